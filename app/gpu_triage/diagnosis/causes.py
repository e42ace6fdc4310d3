"""Why the GPUs wait: the two-minute method's facts (GPU, SM, CPU cores, disks, links, processes) and the
rules that turn them into one bottleneck with its evidence.

The host facts are read over the *stall ticks* (ticks where the cards' mean GPU-Util is below
``high_util_pct``): in a sawtooth, what the CPU does while the GPU waits is what explains the wait; what it
does while the GPU computes (the main process pegging a core to launch kernels) does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpu_triage.diagnosis.patterns import nanmax, nanmean, nanpct
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.model import ProcSample
from gpu_triage.units import fmt_rate

BOTTLENECKS = (
    "none",
    "data_pipeline",
    "storage_io",
    "communication",
    "launch_overhead",
    "memory_idle",
    "stall_unexplained",
)


@dataclass(slots=True)
class ProcFacts:
    """What the GPU processes and their children (DataLoader workers) did over the judged ticks."""

    seen: bool = False  # any process on a GPU in the stretch
    workers: int = 0  # the most workers one process had
    workers_pegged: int = 0  # workers at or above core_pegged_pct (median over ticks)
    worker_cpu_mean: float = float("nan")  # mean CPU % of a worker (100 = one core)
    respawns: int = 0  # times a process's whole set of worker pids was replaced
    main_pegged: bool = False  # a training process itself holds a core (kernel launches or in-process loading)
    ranks_on_first_card: int = 0  # distinct processes on the lowest-indexed card when no other card has any
    mem_holders: list[int] = field(default_factory=list)  # pids holding GPU memory


def proc_facts(procs: list[list[ProcSample]], th: Thresholds, other_cards_busy: bool) -> ProcFacts:
    facts = ProcFacts()
    pegged_per_tick: list[int] = []
    worker_cpu: list[float] = []
    last_sets: dict[int, frozenset[int]] = {}
    main_pegged_ticks = 0
    ticks_with_procs = 0
    cards_seen: set[int] = set()
    pids_by_card: dict[int, set[int]] = {}
    holders: set[int] = set()
    for tick in procs:
        if not tick:
            continue
        ticks_with_procs += 1
        pegged = 0
        main_pegged = False
        for p in tick:
            cards_seen.add(p.gpu_index)
            pids_by_card.setdefault(p.gpu_index, set()).add(p.pid)
            if p.gpu_mem_bytes:
                holders.add(p.pid)
            if p.workers is not None:
                facts.workers = max(facts.workers, int(p.workers))
            cpus = [c for c in p.workers_cpu_pct if c is not None]
            worker_cpu.extend(cpus)
            pegged += sum(1 for c in cpus if c >= th.core_pegged_pct)
            if p.cpu_pct is not None and p.cpu_pct >= th.core_pegged_pct:
                main_pegged = True
            if p.worker_pids:
                pids = frozenset(p.worker_pids)
                prev = last_sets.get(p.pid)
                if prev is not None and prev and not (prev & pids):
                    facts.respawns += 1
                last_sets[p.pid] = pids
        pegged_per_tick.append(pegged)
        main_pegged_ticks += main_pegged
    facts.seen = ticks_with_procs > 0
    if pegged_per_tick:
        facts.workers_pegged = int(np.median(pegged_per_tick))
    if worker_cpu:
        facts.worker_cpu_mean = float(np.mean(worker_cpu))
    facts.main_pegged = ticks_with_procs > 0 and main_pegged_ticks >= 0.5 * ticks_with_procs
    if len(cards_seen) == 1 and not other_cards_busy:
        facts.ranks_on_first_card = len(pids_by_card[next(iter(cards_seen))])
    facts.mem_holders = sorted(holders)
    return facts


@dataclass(slots=True)
class HostFacts:
    """The two-minute method's numbers over the judged ticks (NaN where not measured)."""

    gpu_mean: float
    gpu_p5: float
    gpu_p95: float
    sm_mean: float  # NaN: no SM activity on these cards (pre-Hopper, no GPM)
    cpu_busy: float  # mean busy % of all cores during stall ticks
    cpu_saturated_share: float  # share of stall ticks whose mean core busy reaches cpu_saturated_pct
    max_core: float  # the busiest core's busy %, averaged over stall ticks
    cores: int
    cores_pegged: int  # median count of pegged cores during stall ticks
    others_busy: float  # mean busy % of the cores that are not pegged
    pegged_ids: list[int]  # the cores most often pegged
    disk_busy: float
    disk_name: str | None
    await_ms: float
    iowait: float
    link_bytes_per_s: float  # busiest card's PCIe + NVLink traffic, both directions
    mem_frac: float  # highest share of a card's memory in use
    mem_card: int | None

    def as_dict(self) -> dict[str, float]:
        return {
            "gpu_util_mean_pct": self.gpu_mean,
            "gpu_util_p5_pct": self.gpu_p5,
            "gpu_util_p95_pct": self.gpu_p95,
            "sm_active_mean_pct": self.sm_mean,
            "cpu_busy_pct": self.cpu_busy,
            "cpu_saturated_share": self.cpu_saturated_share,
            "cpu_max_core_pct": self.max_core,
            "cpu_cores": float(self.cores),
            "cpu_cores_pegged": float(self.cores_pegged),
            "disk_busy_pct": self.disk_busy,
            "disk_await_ms": self.await_ms,
            "iowait_pct": self.iowait,
            "link_bytes_per_s": self.link_bytes_per_s,
            "gpu_mem_used_frac": self.mem_frac,
        }


def _f(x: object) -> float:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
    return v


def host_facts(
    gpu: dict[str, np.ndarray],
    gpu_indexes: list[int],
    cpu: np.ndarray,
    iowait: np.ndarray,
    disk: dict[str, np.ndarray],
    disk_names: list[str],
    th: Thresholds,
    cpu_count: int | None,
) -> HostFacts:
    util = gpu["util_pct"]
    per_tick = nanmean(util, axis=1) if util.shape[1] else np.full(util.shape[0], np.nan)
    stall = per_tick < th.high_util_pct
    if not stall.any():
        stall = np.ones_like(stall, dtype=bool)
    vals = util[~np.isnan(util)]
    gpu_mean = float(vals.mean()) if vals.size else float("nan")
    # one sort for both percentiles (same values as two calls)
    gpu_p5, gpu_p95 = (float(v) for v in np.percentile(vals, [5, 95])) if vals.size else (float("nan"),) * 2
    sm_mean = _f(nanmean(gpu["sm_active_pct"])) if gpu["sm_active_pct"].size else float("nan")

    c = cpu[stall] if cpu.shape[1] else cpu
    cores = int(cpu_count or cpu.shape[1] or 0)
    if c.size and not np.isnan(c).all():
        cpu_busy = _f(nanmean(c))
        tick_busy = nanmean(c, axis=1)
        cpu_sat = float(np.mean(tick_busy >= th.cpu_saturated_pct))
        max_core = _f(nanmean(nanmax(c, axis=1)))
        pegged = c >= th.core_pegged_pct
        n_pegged = pegged.sum(axis=1)
        cores_pegged = int(np.median(n_pegged))
        freq = pegged.mean(axis=0)
        pegged_ids = [int(i) for i in np.argsort(-freq, kind="stable")[:cores_pegged] if freq[i] >= 0.5]
        rest = np.where(pegged, np.nan, c)
        others_busy = _f(nanmean(rest))
    else:
        cpu_busy = max_core = others_busy = cpu_sat = float("nan")
        cores_pegged = 0
        pegged_ids = []

    iow = _f(nanmean(iowait[stall])) if iowait.size else float("nan")
    busy = disk["busy_pct"][stall] if disk["busy_pct"].shape[1] else np.zeros((0, 0))
    if busy.size and not np.isnan(busy).all():
        per_disk = nanmean(busy, axis=0)
        j = int(np.nanargmax(per_disk))
        disk_busy = _f(per_disk[j])
        disk_name = disk_names[j] if j < len(disk_names) else None
        aw = disk["await_ms"][stall][:, j]
        await_ms = _f(nanmean(aw)) if aw.size else float("nan")
    else:
        disk_busy = await_ms = float("nan")
        disk_name = None

    link = np.zeros(util.shape)
    have_link = np.zeros(util.shape, dtype=bool)
    for name in ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"):
        a = gpu[name]
        have_link |= ~np.isnan(a)
        link += np.nan_to_num(a)
    link = np.where(have_link, link, np.nan)
    per_card_link = nanmean(link, axis=0) if link.size else np.zeros(0)
    link_max = _f(nanmax(per_card_link)) if np.size(per_card_link) else float("nan")

    used, total = gpu["mem_used_bytes"], gpu["mem_total_bytes"]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = nanmean(used / total, axis=0) if used.size else np.zeros(0)
    if np.size(frac) and not np.isnan(frac).all():
        j = int(np.nanargmax(frac))
        mem_frac, mem_card = _f(frac[j]), gpu_indexes[j]
    else:
        mem_frac, mem_card = float("nan"), None
    return HostFacts(
        gpu_mean, gpu_p5, gpu_p95, sm_mean, cpu_busy, cpu_sat, max_core, cores, cores_pegged, others_busy, pegged_ids,
        disk_busy, disk_name, await_ms, iowait=iow, link_bytes_per_s=link_max, mem_frac=mem_frac, mem_card=mem_card,
    )


@dataclass(slots=True)
class Cause:
    bottleneck: str
    confidence: float
    evidence: list[str]


def _ge(x: float, limit: float) -> bool:
    return not math.isnan(x) and x >= limit


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.0f} %"


def _gbs(x: float) -> str:
    return fmt_rate(x)


def find_cause(pattern: str, hf: HostFacts, pf: ProcFacts, th: Thresholds, n_gpus: int, sm_per_card: dict[int, float],
               util_per_card: dict[int, float]) -> Cause:
    """Apply the method's rules in order; the first that holds names the bottleneck."""
    sm_known = not math.isnan(hf.sm_mean)
    gpu_line = f"GPU-Util mean {_pct(hf.gpu_mean)}, p5 {_pct(hf.gpu_p5)}, p95 {_pct(hf.gpu_p95)}"
    ev: list[str] = [gpu_line]
    if sm_known:
        ev.append(f"SM activity mean {_pct(hf.sm_mean)}")
    no_sm_note = "SM activity not available on these cards (no GPM before Hopper): judged from GPU-Util alone"

    # -- input pressure: what the host does while the GPU waits --------------------------------------------
    storage_ev: list[str] = []
    if _ge(hf.iowait, th.iowait_pct):
        storage_ev.append(f"iowait {_pct(hf.iowait)}")
    if _ge(hf.disk_busy, th.disk_busy_pct):
        storage_ev.append(f"disk {hf.disk_name} {_pct(hf.disk_busy)} busy")
    if _ge(hf.await_ms, th.await_ms):
        storage_ev.append(f"disk {hf.disk_name} await {hf.await_ms:.0f} ms")
    if storage_ev and not math.isnan(hf.await_ms) and not any(s.startswith("disk " + str(hf.disk_name) + " await") for s in storage_ev):
        storage_ev.append(f"await {hf.await_ms:.1f} ms")

    data_ev: list[str] = []
    too_few = False
    cpu_full = _ge(hf.cpu_saturated_share, 0.5)
    if cpu_full:
        data_ev.append(f"CPU {_pct(hf.cpu_busy)} busy on average over {hf.cores} cores while the GPU waits "
                       f"(at or above {th.cpu_saturated_pct:.0f} % in {hf.cpu_saturated_share * 100:.0f} % of those ticks)")
    few_limit = max(2, hf.cores // 8)
    lone_cores = 1 <= hf.cores_pegged <= few_limit and (math.isnan(hf.others_busy) or hf.others_busy < 25.0)
    if pf.workers_pegged >= 1 and (pf.workers <= max(2, hf.cores // 4) or lone_cores):
        too_few = True
        ids = " and ".join(str(i) for i in hf.pegged_ids) if hf.pegged_ids else ""
        if hf.cores_pegged >= 1 and lone_cores:
            where = f"cores {ids} at {hf.max_core:.0f} %" if len(hf.pegged_ids) > 1 else (
                f"core {ids} at {hf.max_core:.0f} %" if ids else f"{hf.cores_pegged} cores pegged")
            data_ev.append(f"{where} while the other {max(hf.cores - hf.cores_pegged, 0)} idle "
                           f"({_pct(hf.others_busy)})")
        data_ev.append(f"{pf.workers} DataLoader workers, {pf.workers_pegged} of them at 100 % of a core: "
                       "too few workers for this input pipeline")
    elif pf.workers >= 1 and pf.workers_pegged * 2 >= pf.workers and not cpu_full:
        # every worker busy the whole time while the GPU waits: the workers are the limit (more of them
        # needs more cores; lighter preprocessing needs none), whatever their number
        data_ev.append(f"{pf.workers_pegged} of {pf.workers} DataLoader workers at 100 % of a core while the "
                       "GPU waits: preprocessing cannot keep up")
    elif lone_cores and not pf.seen and not (sm_known and hf.sm_mean < th.sm_idle_pct):
        too_few = True
        data_ev.append(
            f"{hf.cores_pegged} of {hf.cores} cores pegged ({_pct(hf.max_core)}) while the rest idle "
            f"({_pct(hf.others_busy)}): too few loader processes")
    if pf.respawns >= 2:
        data_ev.append(f"DataLoader worker pids changed {pf.respawns} times: workers re-spawned each epoch")
    in_process = (pf.seen and pf.workers == 0 and pf.main_pegged and lone_cores and hf.cores_pegged <= 1)

    # -- rules, in order -----------------------------------------------------------------------------------
    if pattern == "idle":
        if _ge(hf.mem_frac, th.mem_held_frac):
            return Cause("memory_idle", 0.85, [
                f"card {hf.mem_card} holds {hf.mem_frac * 100:.0f} % of its memory",
                gpu_line + ": no kernels run",
            ] + ([f"SM activity {_pct(hf.sm_mean)}"] if sm_known else []))
        if pf.seen and storage_ev:
            return Cause("storage_io", 0.7, ev + storage_ev)
        if pf.seen and data_ev:
            return Cause("data_pipeline", 0.6, ev + data_ev)
        return Cause("none", 0.8 if not pf.seen else 0.6, ev + ["no kernels run" + (
            "" if pf.seen else " and no process uses the GPUs")])

    high = _ge(hf.gpu_mean, th.high_util_pct)
    # communication: busy on paper, SMs idle (NCCL kernels waiting hold their SMs at 100 % GPU-Util)
    waiting = [i for i, u in util_per_card.items() if u >= th.high_util_pct and sm_per_card.get(i, np.nan) < th.sm_low_pct]
    if sm_known and waiting and (len(waiting) * 2 >= max(1, len([u for u in util_per_card.values() if u >= th.stall_util_pct]))):
        link_ok = _ge(hf.link_bytes_per_s, th.link_busy_bytes_per_s)
        if link_ok or n_gpus >= 2:
            cev = ev + [
                f"cards {', '.join(map(str, waiting))}: GPU-Util ≥ {th.high_util_pct:.0f} % but SM activity "
                f"< {th.sm_low_pct:.0f} %: kernels waiting, not computing",
            ]
            if link_ok:
                cev.append(f"link traffic {_gbs(hf.link_bytes_per_s)} on the busiest card")
            strag = [i for i, u in util_per_card.items() if i not in waiting and u >= th.stall_util_pct]
            if strag:
                cev.append(f"card {', '.join(map(str, strag))} computes while the others wait: a straggler")
            return Cause("communication", 0.75 if link_ok else 0.6, cev)

    if not high or pattern in ("sawtooth", "steady_low", "imbalanced"):
        if storage_ev:
            return Cause("storage_io", min(0.9, 0.55 + 0.15 * len(storage_ev)), ev + storage_ev)
        if data_ev:
            conf = 0.85 if (too_few or pf.respawns >= 2 or cpu_full) else 0.6
            if not sm_known:
                conf -= 0.1
                data_ev.append(no_sm_note)
            return Cause("data_pipeline", conf, ev + data_ev)
        moderate = _ge(hf.gpu_mean, th.stall_util_pct)
        if sm_known and moderate and hf.sm_mean < th.sm_idle_pct:
            return Cause("launch_overhead", 0.8, ev + [
                f"GPU-Util {_pct(hf.gpu_mean)} with SM activity {hf.sm_mean:.1f} %: many tiny kernels, the "
                "GPU waits on kernel launches",
                f"no input pressure: CPU {_pct(hf.cpu_busy)}, disks {_pct(hf.disk_busy)}, iowait {_pct(hf.iowait)}",
            ])
        if in_process and not sm_known:
            return Cause("launch_overhead", 0.35, ev + [
                "the training process holds one core at 100 % and has no DataLoader workers: it either "
                "launches many small kernels or loads data itself (num_workers=0)", no_sm_note])
        if in_process and sm_known:
            return Cause("data_pipeline", 0.5, ev + [
                "the training process holds one core at 100 % with no DataLoader workers: it loads data "
                "itself (num_workers=0)"])
        if pattern in ("sawtooth", "steady_low"):
            conf = 0.7 if pattern == "sawtooth" else 0.4
            if not sm_known:
                conf -= 0.1
            return Cause("stall_unexplained", conf, ev + [
                f"while the GPU waits: CPU {_pct(hf.cpu_busy)} (busiest core {_pct(hf.max_core)}), "
                f"disk {_pct(hf.disk_busy)}, iowait {_pct(hf.iowait)}, links {_gbs(hf.link_bytes_per_s)}: "
                "all quiet, so the wait is in the job itself (sleeps, syncs, checkpoints, logging)",
            ])
    conf = 0.85 if sm_known and _ge(hf.sm_mean, th.sm_low_pct) else 0.6
    out = ev + (["the GPUs are kept busy"] if high else ["nothing on the host explains the difference between the cards"])
    if not sm_known:
        out.append(no_sm_note)
    return Cause("none", conf, out)


def mem_usage_line(hf: HostFacts) -> str:
    return f"card {hf.mem_card} holds {_pct(hf.mem_frac * 100 if not math.isnan(hf.mem_frac) else float('nan'))} of its memory"


def percentile_or_nan(a: np.ndarray, q: float) -> float:
    return _f(nanpct(a, q)) if a.size else float("nan")
