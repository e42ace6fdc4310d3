"""The doctor's checks of the links between the cards: the topology matrix read as the slowest pair and its
speed (:class:`TopologyAnalysis`, also drawn by the report), and NCCL_P2P_LEVEL against it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_triage.doctor.facts import Facts, GpuFacts
from gpu_triage.doctor.registry import Finding, register
from gpu_triage.topology import (
    NCCL_LEVELS,
    NVLINK_GBPS_PER_LINK,
    is_nvlink,
    nccl_level_for,
    nvlink_count,
    path_kind,
    path_rank,
)

#: PCIe per lane and direction, GB/s, after line encoding (gen 3+: 128b/130b).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
#: Across sockets traffic crosses the CPU interconnect and usually host memory: count half the PCIe link.
SYS_FACTOR = 0.5


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


_Pair = tuple[int, int, str]


def _slowest_pairs(
    known: list[_Pair], by_index: dict[int, GpuFacts], worst_rank: int | None
) -> tuple[list[tuple[int, int]], float | None]:
    """The pairs of the lowest bandwidth and that bandwidth when every pair's is known; else the pairs of the
    worst kind of path and no bandwidth."""
    speeds = {(i, j): pair_gbps(lab, by_index.get(i), by_index.get(j)) for i, j, lab in known}
    if all(v is not None for v in speeds.values()):
        slowest_speed = min(speeds.values())  # type: ignore[type-var]
        return [p for p, v in speeds.items() if v == slowest_speed], slowest_speed
    return [(i, j) for i, j, lab in known if path_rank(lab) == worst_rank], None


def _label_of(known: list[_Pair], pair: tuple[int, int]) -> str:
    return next(lab for i, j, lab in known if (i, j) == pair)


def _links_verdict(known: list[_Pair], kinds_differ: bool) -> str:
    """all_nvlink, pcie_only, or mixed: NVLink beside PCIe, or paths of different kinds (``kinds_differ``)."""
    all_nv = all(is_nvlink(lab) for _, _, lab in known)
    any_nv = any(is_nvlink(lab) for _, _, lab in known)
    verdict = "all_nvlink" if all_nv else ("mixed" if any_nv else "pcie_only")
    if verdict == "pcie_only" and kinds_differ:
        verdict = "mixed"
    if all_nv and len({lab for _, _, lab in known}) > 1:
        verdict = "mixed"  # NV18 next to NV4: still a fast road and a slower one
    return verdict


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
    slowest_pairs, bandwidth = _slowest_pairs(known, by_index, worst_rank)
    worst_label = next(lab for _, _, lab in known if path_rank(lab) == worst_rank)
    best_label = next(lab for _, _, lab in known if path_rank(lab) == best_rank)
    slow_label = _label_of(known, slowest_pairs[0]) if slowest_pairs else None
    verdict = _links_verdict(known, worst_rank != best_rank)
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
