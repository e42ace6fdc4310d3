"""The doctor's checks: pure functions from :class:`~gpu_triage.doctor.facts.Facts` to verdicts.

Each check says ok / warn / fail / skip, one line of why (``summary``) and one line of what to do
(``advice``), plus the numbers behind it (``data``) for scripts. ``skip`` means the check had nothing to
look at here (no GPU, torch not importable, a field the hardware does not report): it is not a pass, and
like ``ok`` it never changes the exit status. Nothing here reads the machine, so each rule is tested on
machines built in the tests.

Every check is registered once, with :func:`register` (its id, a title, when it runs): the id is written
in one place, and :func:`run_checks` runs :data:`REGISTRY` in display order. A check function returns a
:class:`Finding`; the registry names it.

Thresholds are plain module constants with the reason next to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpu_triage.doctor.facts import Facts, GpuFacts
from gpu_triage.topology import (
    NCCL_LEVELS,
    NVLINK_GBPS_PER_LINK,
    is_nvlink,
    nccl_level_for,
    nvlink_count,
    path_kind,
    path_rank,
)
from gpu_triage.units import fmt_bytes

Status = Literal["ok", "warn", "fail", "skip"]
#: How bad each status is; a skip weighs nothing (see :func:`worst`).
STATUS_ORDER: dict[str, int] = {"skip": -1, "ok": 0, "warn": 1, "fail": 2}

GIB = 1024**3
#: An idle card reports a few hundred MiB used by the driver itself; beyond this with no process listed,
#: something (a crashed job's zombie, another container) holds memory the next job will miss.
LEFTOVER_BYTES = 1 * GIB

# nvmlClocksEventReason* bits (nvml.h).
REASON_IDLE = 0x1
REASON_APP_CLOCKS = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80
REASON_DISPLAY_CLOCKS = 0x100
_REASON_NAMES = {
    REASON_IDLE: "idle",
    REASON_APP_CLOCKS: "application clocks",
    REASON_SW_POWER_CAP: "software power cap",
    REASON_HW_SLOWDOWN: "hardware slowdown",
    REASON_SYNC_BOOST: "sync boost",
    REASON_SW_THERMAL: "software thermal slowdown",
    REASON_HW_THERMAL: "hardware thermal slowdown",
    REASON_HW_POWER_BRAKE: "hardware power brake",
    REASON_DISPLAY_CLOCKS: "display clocks",
}
_REASONS_FAIL = REASON_HW_SLOWDOWN | REASON_HW_THERMAL | REASON_HW_POWER_BRAKE
_REASONS_WARN = REASON_SW_THERMAL | REASON_SW_POWER_CAP

#: PCIe per lane and direction, GB/s, after line encoding (gen 3+: 128b/130b).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
#: Across sockets traffic crosses the CPU interconnect and usually host memory: count half the PCIe link.
SYS_FACTOR = 0.5
#: Gradient traffic per step above this (mixed precision, at best) is worth a warning: it is the time the
#: step waits on links unless DDP's bucketed overlap hides it behind the backward pass.
TRAFFIC_WARN_S = 0.25


@dataclass(slots=True)
class Finding:
    """What one check found; :func:`run_checks` turns it into a :class:`Check` under the check's id."""

    status: Status
    summary: str
    advice: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Check:
    id: str
    status: Status
    summary: str
    advice: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "summary": self.summary, "advice": self.advice,
                "data": self.data}


def worst(statuses: Iterable[Status]) -> Status:
    """The report's status: the worst of its checks, skips left out ("ok" when nothing else is left)."""
    return max((s for s in statuses if s != "skip"), key=STATUS_ORDER.__getitem__, default="ok")


# -- the registry -----------------------------------------------------------------------------------

#: What a check reads: the facts alone; with the topology analysis; with the --params count too.
Needs = Literal["facts", "topology", "params"]
#: When it runs: always; only when some card answers (else gpu.driver stands for the GPU part); only
#: with --params.
When = Literal["always", "cards", "params"]


@dataclass(frozen=True, slots=True)
class CheckSpec:
    id: str
    title: str
    func: Callable[..., Finding]
    needs: Needs = "facts"
    when: When = "always"


#: Every check, in display order (the order of registration below).
REGISTRY: list[CheckSpec] = []


def register(check_id: str, title: str, *, needs: Needs = "facts", when: When = "always"
             ) -> Callable[[Callable[..., Finding]], Callable[..., Finding]]:
    """Add the decorated check function to :data:`REGISTRY` under ``check_id``."""

    def add(func: Callable[..., Finding]) -> Callable[..., Finding]:
        if any(spec.id == check_id for spec in REGISTRY):
            raise ValueError(f"doctor check {check_id} registered twice")
        REGISTRY.append(CheckSpec(check_id, title, func, needs, when))
        return func

    return add


def _cards(indexes: list[int]) -> str:
    return ("card " if len(indexes) == 1 else "cards ") + ",".join(str(i) for i in indexes)


def _live(facts: Facts) -> list[GpuFacts]:
    return [g for g in facts.gpus if not g.lost]


# -- GPUs -------------------------------------------------------------------------------------------


@register("gpu.driver", "driver and cards")
def check_driver(facts: Facts) -> Finding:
    if facts.gpu_error is not None or not facts.gpus:
        reason = facts.gpu_error or "no GPU listed"
        return Finding("fail", f"no GPU found: {reason}",
                       "install or load the NVIDIA driver (nvidia-smi must work), or run on the GPU machine; "
                       "host and software checks below still apply",
                       {"error": reason})
    lost = [g.index for g in facts.gpus if g.lost]
    data = {"driver": facts.driver_version, "cuda_driver": facts.cuda_driver_version, "gpus": len(facts.gpus),
            "lost": lost}
    summary = (f"{len(facts.gpus)} GPU(s), driver {facts.driver_version or 'n/a'}, CUDA "
               f"{facts.cuda_driver_version or 'n/a'}")
    if lost:
        return Finding("fail", f"{summary}; {_cards(lost)} stopped answering (GPU is lost)",
                       "the card fell off the bus: check dmesg for Xid errors, drain the node and reset or reboot",
                       data)
    return Finding("ok", summary, "", data)


@register("gpu.model", "card models", when="cards")
def check_model(facts: Facts) -> Finding:
    gpus = _live(facts)
    names = sorted({g.name or "n/a" for g in gpus})
    data = {"models": names, "memory_bytes": [g.mem_total_bytes for g in gpus]}
    if len(names) > 1:
        return Finding("warn", f"mixed models: {', '.join(names)}",
                       "data-parallel steps run at the pace of the slowest card: use one model per job "
                       "(CUDA_VISIBLE_DEVICES)", data)
    mem = gpus[0].mem_total_bytes if gpus else None
    return Finding("ok", f"{len(gpus)} x {names[0] if names else 'n/a'}, {fmt_bytes(mem)} each", "", data)


@register("gpu.persistence", "persistence mode", when="cards")
def check_persistence(facts: Facts) -> Finding:
    gpus = _live(facts)
    off = [g.index for g in gpus if g.persistence is False]
    unknown = all(g.persistence is None for g in gpus)
    data = {"off": off}
    if off:
        return Finding("warn", f"persistence mode off on {_cards(off)}",
                       "sudo nvidia-smi -pm 1 (or run nvidia-persistenced): otherwise the driver tears down between "
                       "jobs and each start pays seconds", data)
    if unknown:
        return Finding("skip", "persistence mode n/a", "", data)
    return Finding("ok", "persistence mode on", "", data)


@register("gpu.mig", "MIG mode", when="cards")
def check_mig(facts: Facts) -> Finding:
    gpus = _live(facts)
    on = [g.index for g in gpus if g.mig_enabled]
    pending = [g.index for g in gpus
               if g.mig_pending is not None and g.mig_enabled is not None and g.mig_pending != g.mig_enabled]
    data = {"enabled": on, "pending_change": pending}
    if pending:
        return Finding("warn", f"MIG mode change pending on {_cards(pending)}",
                       "the change applies after a GPU reset (nvidia-smi -r) or a reboot", data)
    if on:
        return Finding("warn", f"MIG enabled on {_cards(on)}: a job sees slices, not whole cards",
                       "if you meant whole cards: sudo nvidia-smi -i N -mig 0; NCCL does not work across MIG "
                       "instances", data)
    unknown = all(g.mig_enabled is None for g in gpus)
    if unknown:
        return Finding("skip", "MIG n/a (not supported)", "", data)
    return Finding("ok", "MIG off", "", data)


@register("gpu.ecc", "uncorrected ECC errors", when="cards")
def check_ecc(facts: Facts) -> Finding:
    gpus = _live(facts)
    counts = {g.index: g.ecc_uncorrected for g in gpus}
    bad = [i for i, n in counts.items() if n]
    data = {"volatile_uncorrected": {str(i): n for i, n in counts.items()}}
    if bad:
        detail = ", ".join(f"card {i}: {counts[i]}" for i in bad)
        return Finding("fail", f"uncorrected ECC errors since the driver loaded ({detail})",
                       "results on these cards may be wrong: drain them, check nvidia-smi -q -d ECC,PAGE_RETIREMENT "
                       "and "
                       "reset or replace", data)
    if all(n is None for n in counts.values()):
        return Finding("skip", "ECC error counts n/a (ECC off or not reported)", "", data)
    return Finding("ok", "no uncorrected ECC errors", "", data)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in _REASON_NAMES.items() if mask & bit]


@register("gpu.clocks", "clock slowdowns", when="cards")
def check_clocks(facts: Facts) -> Finding:
    gpus = _live(facts)
    failing = {g.index: g.clock_reasons for g in gpus if g.clock_reasons and g.clock_reasons & _REASONS_FAIL}
    warning = {g.index: g.clock_reasons for g in gpus if g.clock_reasons and g.clock_reasons & _REASONS_WARN}
    data = {"reasons": {str(g.index): reason_names(g.clock_reasons) if g.clock_reasons is not None else None
                        for g in gpus}}
    if failing:
        detail = "; ".join(f"card {i}: {', '.join(reason_names(m & _REASONS_FAIL))}" for i, m in failing.items())
        return Finding("fail", f"clocks held down by the hardware ({detail})",
                       "check cooling, power supply and cabling (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); "
                       "these "
                       "cards will be the slow rank", data)
    if warning:
        detail = "; ".join(f"card {i}: {', '.join(reason_names(m & _REASONS_WARN))}" for i, m in warning.items())
        return Finding("warn", f"clocks capped ({detail})",
                       "normal at full load on the power limit; at idle it means heat or a lowered limit (nvidia-smi "
                       "-q "
                       "-d PERFORMANCE,POWER)", data)
    if all(g.clock_reasons is None for g in gpus):
        return Finding("skip", "clock event reasons n/a", "", data)
    return Finding("ok", "no thermal or power slowdown", "", data)


@register("gpu.pcie", "PCIe link width and generation", when="cards")
def check_pcie(facts: Facts) -> Finding:
    gpus = _live(facts)
    narrow = [g for g in gpus
              if g.pcie_width is not None and g.pcie_width_max is not None and g.pcie_width < g.pcie_width_max]
    slow_gen = [g for g in gpus if g not in narrow
                and g.pcie_gen is not None and g.pcie_gen_max is not None and g.pcie_gen < g.pcie_gen_max]
    data = {
        str(g.index): {"gen": g.pcie_gen, "gen_max": g.pcie_gen_max,
                       "width": g.pcie_width, "width_max": g.pcie_width_max}
        for g in gpus
    }
    if narrow:
        detail = ", ".join(f"card {g.index} x{g.pcie_width} of x{g.pcie_width_max}" for g in narrow)
        return Finding("fail", f"PCIe link narrower than the card allows ({detail})",
                       "a narrow link halves host<->card copies: reseat the card or its riser, or move it to a "
                       "full-width slot", data)
    if slow_gen:
        detail = ", ".join(f"card {g.index} gen{g.pcie_gen} of gen{g.pcie_gen_max}" for g in slow_gen)
        return Finding("warn", f"PCIe link below its top generation ({detail}), full width",
                       "idle cards lower the PCIe generation to save power: check under load (nvidia-smi -q -d PCIE "
                       "while training)", data)
    known = [g for g in gpus if g.pcie_width is not None]
    if not known:
        return Finding("skip", "PCIe link n/a", "", data)
    g = known[0]
    return Finding("ok", f"PCIe links at full width (card {g.index}: gen{g.pcie_gen} x{g.pcie_width})", "", data)


@register("gpu.memory", "memory held without a process", when="cards")
def check_memory(facts: Facts) -> Finding:
    gpus = _live(facts)
    leftover = [g for g in gpus if g.processes == [] and (g.mem_used_bytes or 0) > LEFTOVER_BYTES]
    data = {str(g.index): {"used": g.mem_used_bytes, "total": g.mem_total_bytes,
                           "processes": None if g.processes is None else len(g.processes)} for g in gpus}
    if leftover:
        detail = ", ".join(f"card {g.index}: {fmt_bytes(g.mem_used_bytes)}" for g in leftover)
        return Finding("warn", f"memory in use with no process on the card ({detail})",
                       "a leftover from an earlier job (a zombie or another container): the first step may run out of "
                       "memory; "
                       "find it with sudo fuser -v /dev/nvidia* and end it, or reset the card", data)
    return Finding("ok", "no memory held without a process", "", data)


@register("gpu.processes", "processes on the cards", when="cards")
def check_processes(facts: Facts) -> Finding:
    gpus = _live(facts)
    others: list[tuple[int, Any]] = []
    mine: list[tuple[int, Any]] = []
    hidden: list[tuple[int, Any]] = []
    for g in gpus:
        for p in g.processes or []:
            if p.uid is None:
                hidden.append((g.index, p))
            elif facts.uid is not None and p.uid != facts.uid:
                others.append((g.index, p))
            else:
                mine.append((g.index, p))

    def describe(items: list[tuple[int, Any]]) -> str:
        return ", ".join(f"card {i}: pid {p.pid}" + (f" {p.username}" if p.username else "")
                         + (f" {fmt_bytes(p.used_bytes)}" if p.used_bytes is not None else "")
                         for i, p in items[:6]) + (" ..." if len(items) > 6 else "")

    data = {
        "other_users": [{"card": i, "pid": p.pid, "user": p.username, "used_bytes": p.used_bytes} for i, p in others],
        "yours": [{"card": i, "pid": p.pid, "name": p.name, "used_bytes": p.used_bytes} for i, p in mine],
        "not_visible": [{"card": i, "pid": p.pid, "used_bytes": p.used_bytes} for i, p in hidden],
    }
    if others:
        return Finding("warn", f"other users' processes on the cards ({describe(others)})",
                       "you share these cards: expect less memory and slower steps; pick free cards with "
                       "CUDA_VISIBLE_DEVICES or ask the owner", data)
    if hidden:
        return Finding("warn", f"processes not visible from here hold cards ({describe(hidden)})",
                       "another container or user: check with the machine's owner before training on these cards", data)
    if mine:
        return Finding("ok", f"only your processes on the cards ({describe(mine)})",
                       "if no job of yours should be running, one from an earlier run is still alive", data)
    if all(g.processes is None for g in gpus):
        return Finding("skip", "process list n/a", "", data)
    return Finding("ok", "no process on the cards", "", data)


# -- topology ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class TopologyAnalysis:
    verdict: str  # single, all_nvlink, mixed, pcie_only, unknown, none
    slowest: str | None  # the slowest pair's label
    fastest: str | None
    nccl_level: str | None  # the NCCL_P2P_LEVEL that lets every pair use P2P
    slowest_pairs: list[tuple[int, int]]
    bandwidth_gbps: float | None  # per direction per card over the slowest pair, at best

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "slowest": self.slowest,
            "fastest": self.fastest,
            "nccl_p2p_level": self.nccl_level,
            "slowest_pairs": [list(p) for p in self.slowest_pairs],
            "bandwidth_gbps": self.bandwidth_gbps,
        }


def pcie_gbps(g: GpuFacts) -> float | None:
    """The card's PCIe bandwidth per direction: top generation (idle cards downshift) at the current width."""
    gen = g.pcie_gen_max or g.pcie_gen
    width = g.pcie_width or g.pcie_width_max
    if gen is None or width is None or gen not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[gen] * width


def pair_gbps(label: str, a: GpuFacts | None, b: GpuFacts | None) -> float | None:
    """What one pair's path offers per direction, at best. NVLink: 25 GB/s per link (NVLink 2-4)."""
    if is_nvlink(label):
        n = nvlink_count(label)
        return None if n is None else n * NVLINK_GBPS_PER_LINK
    kind = path_kind(label)
    if kind is None or a is None or b is None:
        return None
    links = [x for x in (pcie_gbps(a), pcie_gbps(b)) if x is not None]
    if not links:
        return None
    return min(links) * (SYS_FACTOR if kind == "SYS" else 1.0)


def analyse_topology(facts: Facts) -> TopologyAnalysis:
    matrix = facts.topology
    n = len(matrix)
    if n == 0:
        return TopologyAnalysis("none", None, None, None, [], None)
    if n == 1:
        return TopologyAnalysis("single", None, None, None, [], None)
    by_index = {i: g for i, g in enumerate(facts.gpus)}
    pairs = [(i, j, matrix[i][j]) for i in range(n) for j in range(i + 1, n)]
    known = [(i, j, lab) for i, j, lab in pairs if path_rank(lab) is not None]
    if len(known) < len(pairs):
        unjoined = [(i, j) for i, j, lab in pairs if path_rank(lab) is None]
        return TopologyAnalysis("unknown", None, None, None, unjoined, None)
    worst_rank = max(path_rank(lab) for _, _, lab in known)  # type: ignore[type-var]
    best_rank = min(path_rank(lab) for _, _, lab in known)  # type: ignore[type-var]
    speeds = {(i, j): pair_gbps(lab, by_index.get(i), by_index.get(j)) for i, j, lab in known}
    if all(v is not None for v in speeds.values()):
        slowest_speed = min(speeds.values())  # type: ignore[type-var]
        slowest_pairs = [p for p, v in speeds.items() if v == slowest_speed]
        bandwidth: float | None = slowest_speed
    else:
        slowest_pairs = [(i, j) for i, j, lab in known if path_rank(lab) == worst_rank]
        bandwidth = None
    slow_label = next(lab for i, j, lab in known if (i, j) == slowest_pairs[0]) if slowest_pairs else None
    worst_label = next(lab for _, _, lab in known if path_rank(lab) == worst_rank)
    best_label = next(lab for _, _, lab in known if path_rank(lab) == best_rank)
    all_nv = all(is_nvlink(lab) for _, _, lab in known)
    any_nv = any(is_nvlink(lab) for _, _, lab in known)
    verdict = "all_nvlink" if all_nv else ("mixed" if any_nv else "pcie_only")
    if verdict == "pcie_only" and worst_rank != best_rank:
        verdict = "mixed"
    if all_nv and len({lab for _, _, lab in known}) > 1:
        verdict = "mixed"  # NV18 next to NV4: still a fast road and a slower one
    return TopologyAnalysis(verdict, slow_label or worst_label, best_label, nccl_level_for(worst_label),
                            slowest_pairs, bandwidth)


@register("topology.links", "links between cards", needs="topology")
def check_topology(facts: Facts, topo: TopologyAnalysis) -> Finding:
    data = {"matrix": facts.topology, **topo.to_json_obj()}
    bw = f" (~{topo.bandwidth_gbps:.0f} GB/s per direction)" if topo.bandwidth_gbps else ""
    if topo.verdict == "none":
        return Finding("skip", "no GPU: no links to check", "", data)
    if topo.verdict == "single":
        return Finding("ok", "one card: no traffic between cards", "", data)
    if topo.verdict == "unknown":
        pairs = ", ".join(f"{i}-{j}" for i, j in topo.slowest_pairs[:6])
        return Finding("warn", f"the driver does not say how some cards are joined (pairs {pairs})",
                       "run nvidia-smi topo -m; in a VM the PCIe tree is often hidden, so NCCL cannot choose well "
                       "either", data)
    pairs = ", ".join(f"{i}-{j}" for i, j in topo.slowest_pairs[:6]) + (" ..." if len(topo.slowest_pairs) > 6 else "")
    if topo.verdict == "all_nvlink":
        return Finding("ok", f"every pair on NVLink ({topo.slowest}){bw}", "", data)
    if topo.verdict == "mixed":
        return Finding("warn",
                       f"fast road, slow road: best {topo.fastest}, slowest {topo.slowest} (pairs {pairs}){bw}",
                       "an all-reduce runs at the pace of its slowest pair: keep a job on cards joined by the fast "
                       "links "
                       "(CUDA_VISIBLE_DEVICES), or expect the slow path's speed", data)
    # pcie_only, every pair the same kind of path
    if topo.slowest == "SYS":
        return Finding("warn", f"no NVLink; every pair crosses CPU sockets (SYS){bw}",
                       "gradients go through host memory and the socket link: use cards of one socket if the job "
                       "fits", data)
    return Finding("ok", f"no NVLink; every pair on PCIe ({topo.slowest}){bw}",
                   "fine for small models; big all-reduces will be bound by PCIe", data)


def parse_nccl_level(value: str) -> str | None:
    """NCCL accepts names (NVL, PIX, ...) and the legacy integers 0-5; ``None`` when neither."""
    text = value.strip().upper()
    if text in NCCL_LEVELS:
        return text
    if text == "NODE":  # not an NCCL name, but the nvidia-smi label people copy: NCCL calls it PHB
        return None
    if text.isdigit() and int(text) < len(NCCL_LEVELS):
        return NCCL_LEVELS[int(text)]
    return None


@register("topology.nccl_p2p_level", "NCCL_P2P_LEVEL against the topology", needs="topology")
def check_nccl_level(facts: Facts, topo: TopologyAnalysis) -> Finding:
    env = facts.software.env
    set_value = env.get("NCCL_P2P_LEVEL")
    disabled = env.get("NCCL_P2P_DISABLE", "").strip() in ("1", "true", "TRUE", "True")
    fits = topo.nccl_level
    data = {"fits": fits, "env": set_value, "p2p_disabled": disabled}
    if disabled and topo.verdict in ("all_nvlink", "mixed"):
        return Finding("warn", "NCCL_P2P_DISABLE=1 while cards are joined by NVLink",
                       "unset NCCL_P2P_DISABLE: with it NCCL copies through host memory instead of the links", data)
    if topo.verdict == "none":
        return Finding("skip", "no GPU: no level to check", "", data)
    if fits is None:
        return Finding("ok",
                       f"NCCL_P2P_LEVEL={set_value}" if set_value else "NCCL_P2P_LEVEL not needed (fewer than two "
                                                                       "cards "
                       "or topology n/a)",
                       "", data)
    if set_value is None:
        return Finding("ok", f"NCCL_P2P_LEVEL unset (NCCL decides); {fits} fits this machine",
                       f"if you set it, use NCCL_P2P_LEVEL={fits}", data)
    level = parse_nccl_level(set_value)
    if level is None:
        return Finding("warn", f"NCCL_P2P_LEVEL={set_value} is not a level NCCL knows",
                       f"use one of {', '.join(NCCL_LEVELS[1:])}: {fits} fits this machine (nvidia-smi's NODE is "
                       "NCCL's "
                       "PHB)", data)
    data["env_level"] = level
    if NCCL_LEVELS.index(level) < NCCL_LEVELS.index(fits):
        return Finding("warn",
                       f"NCCL_P2P_LEVEL={set_value} is stricter than the paths here (slowest pair {topo.slowest}): "
                       "those pairs lose P2P",
                       f"set NCCL_P2P_LEVEL={fits} or unset it", data)
    return Finding("ok", f"NCCL_P2P_LEVEL={set_value} allows every pair ({fits} fits)", "", data)


# -- host -------------------------------------------------------------------------------------------


def workers_range(cores: int | None, ranks: int) -> tuple[int, int] | None:
    """DataLoader num_workers per rank: cores/4 to cores/2 over all ranks, at least 1."""
    if not cores:
        return None
    ranks = max(1, ranks)
    lo = max(1, cores // 4 // ranks)
    hi = max(lo, cores // 2 // ranks)
    return lo, hi


@register("host.cpu", "CPU cores and num_workers")
def check_cpu(facts: Facts) -> Finding:
    h = facts.host
    cores = h.cpu_usable or h.cpu_logical
    ranks = max(1, len(_live(facts)))
    rng = workers_range(cores, ranks)
    data = {"logical": h.cpu_logical, "physical": h.cpu_physical, "usable": h.cpu_usable, "ranks": ranks,
            "num_workers_per_rank": list(rng) if rng else None}
    if rng is None:
        return Finding("warn", "CPU core count n/a", "set num_workers by trying 2, 4, 8 and watching the GPU", data)
    usable = "" if h.cpu_usable in (None, h.cpu_logical) else f", {h.cpu_usable} usable here"
    workers = str(rng[0]) if rng[0] == rng[1] else f"{rng[0]}-{rng[1]}"
    summary = (f"{h.cpu_logical} cores ({h.cpu_physical or 'n/a'} physical{usable}): num_workers {workers} per rank "
               f"for {ranks} rank(s)")
    if _live(facts) and cores is not None and cores // ranks < 4:
        return Finding("warn", summary + f" - only {cores / ranks:.1f} cores per card",
                       "data loading will likely starve the cards: preprocess offline, decode on the GPU (DALI), or "
                       "use "
                       "fewer ranks per machine", data)
    return Finding("ok", summary,
                   "start in that range, pin_memory=True, persistent_workers=True, prefetch_factor 2-4", data)


@register("host.memory", "host memory")
def check_host_memory(facts: Facts) -> Finding:
    h = facts.host
    gpu_total = sum(g.mem_total_bytes or 0 for g in _live(facts))
    data = {"total": h.mem_total_bytes, "available": h.mem_available_bytes, "gpu_total": gpu_total or None}
    if h.mem_total_bytes is None:
        return Finding("skip", "host memory n/a", "", data)
    summary = f"{fmt_bytes(h.mem_total_bytes)} RAM, {fmt_bytes(h.mem_available_bytes)} available"
    if h.mem_available_bytes is not None and h.mem_available_bytes < 0.1 * h.mem_total_bytes:
        return Finding("warn", summary + " (under 10 % free)",
                       "other jobs or a page cache that will not drop hold the memory: DataLoader workers and pinned "
                       "buffers may be killed (OOM)", data)
    if gpu_total and h.mem_total_bytes < gpu_total:
        return Finding("warn", summary + f", less than the cards' {fmt_bytes(gpu_total)}",
                       "loading a checkpoint or offloading optimizer state to the CPU will not fit: load shards, or "
                       "map "
                       "it (mmap=True)", data)
    return Finding("ok", summary, "", data)


@register("host.numa", "NUMA placement")
def check_numa(facts: Facts) -> Finding:
    h = facts.host
    gpus = _live(facts)
    per_card = {str(g.index): {"node": g.numa_node, "cpus": _ranges(g.cpus)} for g in gpus}
    data = {"nodes": {str(k): _ranges(v) for k, v in h.numa_nodes.items()}, "cards": per_card}
    nodes = sorted({g.numa_node for g in gpus if g.numa_node is not None})
    if len(h.numa_nodes) <= 1 and len(nodes) <= 1:
        return Finding("ok", "one NUMA node: no placement to get wrong", "", data)
    if not gpus:
        return Finding("ok", f"{len(h.numa_nodes)} NUMA nodes", "", data)
    if not nodes:
        return Finding("ok", f"{len(h.numa_nodes)} NUMA nodes; the cards' nodes n/a (not reported)", "", data)
    groups = "; ".join(f"node {n}: {_cards([g.index for g in gpus if g.numa_node == n])} (cores "
                       f"{_ranges(h.numa_nodes.get(n)) or 'n/a'})" for n in nodes)
    return Finding("ok", f"{max(len(h.numa_nodes), len(nodes))} NUMA nodes - {groups}",
                   "bind each rank and its DataLoader workers to its card's node (numactl --cpunodebind=N "
                   "--membind=N), "
                   "so batches are not copied across sockets", data)


def _ranges(cpus: list[int] | None) -> str | None:
    """[0,1,2,3,8] -> "0-3,8"."""
    if not cpus:
        return None
    cpus = sorted(set(cpus))
    out: list[str] = []
    start = prev = cpus[0]
    ends: list[int | None] = [*cpus[1:], None]  # None closes the last range
    for c in ends:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(out)


# -- software ---------------------------------------------------------------------------------------


@register("software.torch", "Python, torch, NCCL")
def check_torch(facts: Facts) -> Finding:
    sw = facts.software
    data = {"python": sw.python, "torch": sw.torch_version, "torch_cuda": sw.torch_cuda,
            "cuda_available": sw.torch_cuda_available, "nccl": sw.nccl_version}
    if sw.torch_version is None:
        return Finding("skip", f"Python {sw.python}; {sw.torch_note or 'torch n/a'}",
                       "run the doctor with your training environment's Python to check its torch and NCCL", data)
    summary = (f"Python {sw.python}, torch {sw.torch_version} (CUDA {sw.torch_cuda or 'none'}), NCCL "
               f"{sw.nccl_version or 'n/a'}")
    if facts.gpus and sw.torch_cuda_available is False:
        return Finding("fail", summary + ": torch sees no GPU",
                       "a CPU-only torch wheel, or a driver older than the CUDA torch was built for: install the wheel "
                       "matching the driver", data)
    return Finding("ok", summary, "", data)


#: Variables that quietly cost speed when left set from a debugging session.
_SLOW_ENV = {
    "CUDA_LAUNCH_BLOCKING": "makes every kernel launch wait for the previous kernel: unset it outside debugging",
    "NCCL_SHM_DISABLE": "stops NCCL using shared memory between local ranks: "
                        "unset it unless a container lacks /dev/shm",
    "NCCL_ALGO": "forces one all-reduce algorithm: unset it unless you measured that it helps",
    "NCCL_PROTO": "forces one NCCL protocol: unset it unless you measured that it helps",
}


@register("software.env", "environment variables")
def check_env(facts: Facts) -> Finding:
    env = facts.software.env
    nccl = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    data = {"env": env}
    flagged = [(k, why) for k, why in _SLOW_ENV.items() if k in env and env[k].strip() not in ("", "0")]
    if flagged:
        k, why = flagged[0]
        names = ", ".join(f"{k}={env[k]}" for k, _ in flagged)
        return Finding("warn", f"set from debugging? {names}", f"{k} {why}", data)
    shown = ", ".join(f"{k}={v}" for k, v in nccl.items()) or "no NCCL_* variable set"
    return Finding("ok", shown, "", data)


_PTRACE_FIX = ("run gpu-triage as root or as the job's user with kernel.yama.ptrace_scope=0 (sysctl), or give it "
               "CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE)")


@register("software.stacks", "the job's stacks (py-spy)")
def check_stacks(facts: Facts) -> Finding:
    """Whether the dashboard can tell what a waiting job's threads are doing: py-spy found, and ptrace allowed
    on the job's processes (kernel.yama.ptrace_scope, CAP_SYS_PTRACE, root)."""
    acc = facts.software.stacks
    if acc is None:
        return Finding("skip", "not checked", "")
    data = {"py_spy": acc.pyspy, "euid": acc.euid, "cap_sys_ptrace": acc.cap_sys_ptrace,
            "ptrace_scope": acc.ptrace_scope}
    if acc.pyspy is None:
        return Finding("skip", "py-spy not installed: the verdict reads the job from outside only",
                       "pip install 'gpu-triage[stacks]' (or py-spy) to see what a waiting job's threads are doing",
                       data)
    if acc.ptrace_scope == 3:
        return Finding("warn", "kernel.yama.ptrace_scope=3: no process may read another's stacks, root included",
                       "ptrace_scope 3 lasts until a reboot; boot with kernel.yama.ptrace_scope=1 or lower", data)
    privileged = acc.euid == 0 or acc.cap_sys_ptrace is True
    if privileged and acc.ptrace_scope in (None, 0, 1, 2):
        return Finding("ok", f"py-spy reads every process's stacks ({'root' if acc.euid == 0 else 'CAP_SYS_PTRACE'})",
                       "", data)
    if acc.ptrace_scope in (None, 0):
        return Finding("ok", "py-spy reads this user's processes only (another user's job: run as root)", "", data)
    which = "only processes it starts" if acc.ptrace_scope == 1 else "nothing without CAP_SYS_PTRACE"
    return Finding("warn", f"kernel.yama.ptrace_scope={acc.ptrace_scope}: py-spy may read {which}", _PTRACE_FIX, data)


# -- gradient traffic -------------------------------------------------------------------------------


@register("traffic.gradients", "gradient traffic per step", needs="params", when="params")
def check_traffic(facts: Facts, topo: TopologyAnalysis, params: float) -> Finding:
    """params x 4 bytes x 2 per step in fp32 (a ring all-reduce sends and receives about twice the
    gradients), halved in mixed precision, over the slowest pair's link: the time spent on links at best."""
    fp32_bytes = params * 4 * 2
    mixed_bytes = fp32_bytes / 2
    data: dict[str, Any] = {"params": params, "bytes_fp32": fp32_bytes, "bytes_mixed": mixed_bytes,
                            "bandwidth_gbps": topo.bandwidth_gbps, "seconds_fp32": None, "seconds_mixed": None}
    size = (f"{params / 1e9:g}B parameters: {fmt_bytes(fp32_bytes, digits=0)} per step in fp32, "
            f"{fmt_bytes(mixed_bytes, digits=0)} in mixed precision")
    if topo.verdict in ("none", "single"):
        status: Status = "skip" if topo.verdict == "none" else "ok"
        return Finding(status, f"{size}; one card or none: no gradient exchange", "", data)
    if topo.bandwidth_gbps is None:
        return Finding("warn", f"{size}; link bandwidth n/a, so no time estimate",
                       "measure it: nccl-tests all_reduce_perf -b 1G -e 4G -g <cards>", data)
    bw = topo.bandwidth_gbps * 1e9
    s32, s16 = fp32_bytes / bw, mixed_bytes / bw
    data.update(seconds_fp32=s32, seconds_mixed=s16)
    summary = (f"{size}; over {topo.slowest} (~{topo.bandwidth_gbps:.0f} GB/s) at least {s32:.2f} s per step fp32, "
               f"{s16:.2f} s mixed")
    if s16 >= TRAFFIC_WARN_S:
        return Finding("warn", summary,
                       "unless the backward pass takes longer (DDP overlaps buckets with it), steps wait on the links: "
                       "accumulate gradients (no_sync) to all-reduce less often, keep gradients in bf16, or use "
                       "faster-linked cards", data)
    return Finding("ok", summary, "", data)


# -- all of them ------------------------------------------------------------------------------------


def run_checks(facts: Facts, params: float | None = None) -> tuple[list[Check], TopologyAnalysis]:
    """Every registered check that applies, in display order. Without GPUs only gpu.driver stands for the
    GPU part; traffic.gradients runs only with a parameter count."""
    topo = analyse_topology(facts)
    cards = bool(_live(facts))
    checks: list[Check] = []
    for spec in REGISTRY:
        if (spec.when == "cards" and not cards) or (spec.when == "params" and params is None):
            continue
        if spec.needs == "facts":
            found = spec.func(facts)
        elif spec.needs == "topology":
            found = spec.func(facts, topo)
        else:
            found = spec.func(facts, topo, params)
        checks.append(Check(spec.id, found.status, found.summary, found.advice, found.data))
    return checks, topo
