"""The two-minute method's facts over the judged ticks: GPU, SM, CPU cores, disks, links, processes.

The host facts are read over the *stall ticks* (ticks where the cards' mean GPU-Util is below
``high_util_pct``): in a sawtooth, what the CPU does while the GPU waits is what explains the wait; what it
does while the GPU computes (the main process pegging a core to launch kernels) does not.

:class:`Fact` is one sentence of evidence with the number it rests on, so ``diagnose --json`` and scripts
read the figure without parsing the text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpu_triage.diagnosis import tickmemo
from gpu_triage.diagnosis.patterns import nanmax, nanmean, percentiles
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.model import ProcSample


@dataclass(frozen=True, slots=True)
class Fact:
    """One sentence of evidence and, where it rests on one figure, that figure (metric name, value, cards)."""

    text: str
    metric: str | None = None
    value: float | None = None
    cards: tuple[int, ...] = ()
    pid: int | None = None  # the process the sentence is about (the inside evidence), for the screen and JSON

    def as_dict(self) -> dict[str, Any]:
        value = None if self.value is None or math.isnan(self.value) else round(float(self.value), 3)
        out = {"text": self.text, "metric": self.metric, "value": value, "cards": list(self.cards)}
        return out if self.pid is None else {**out, "pid": self.pid}


@dataclass(slots=True)
class ProcFacts:
    """What the GPU processes and their children (DataLoader workers) did over the judged ticks.

    Worker counts are per tick over every training process, then the median over ticks, so the pegged
    count never exceeds the total (``pegged <= total`` holds tick by tick, hence for the medians)."""

    seen: bool = False  # any process on a GPU in the stretch
    processes: int = 0  # training processes (median per tick)
    workers: int = 0  # the most workers one process had (its num_workers)
    workers_total: int = 0  # workers of every process together (median per tick)
    workers_pegged: int = 0  # of those, at or above core_pegged_pct (median per tick)
    respawns: int = 0  # times a process's whole set of worker pids was replaced
    main_cpu: float = float("nan")  # the busiest training process's own CPU % while the GPU waits (100 = a core),
    # over the ticks since the job's first kernel (start-up holds a core with idle cards too: not a wait)
    ranks_on_first_card: int = 0  # distinct processes on the lowest-indexed card when no other card has any
    running_waits: int = 0  # ticks where the GPU waited after the job's first kernel (span.job_span)
    running_ticks: int = 0  # ticks after the job's first kernel
    sm_running_waits: float = float("nan")  # SM activity over those ticks: some kernel runs (fed, slowly)
    startup_s: float = float("nan")  # the job appeared this long ago and does not run yet (NaN: not so)
    startup_kernel_s: float = float("nan")  # its first kernel ran this long ago (NaN: none yet)
    startup_cpu: float = float("nan")  # its busiest process's CPU % meanwhile (imports, CUDA init, model build);
    # NaN on the tick it appeared (a process's first CPU reading is 0)
    startup_mem_from: float = float("nan")  # its cards' memory in use when it appeared, bytes (all cards)
    startup_mem_now: float = float("nan")  # ... and now: a context, then the model, arriving


def ge(x: float, limit: float) -> bool:
    """``x`` is measured and at least ``limit``."""
    return not math.isnan(x) and x >= limit


def pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.0f} %"


def median_of(xs: list[float] | list[int]) -> float:
    """np.median of a short list, without numpy's per-call overhead (same value)."""
    v = sorted(xs)
    m = len(v) // 2
    return float(v[m]) if len(v) % 2 else (v[m - 1] + v[m]) / 2.0


def proc_facts(procs: list[list[ProcSample]], stall: np.ndarray, th: Thresholds, other_cards_busy: bool,
               running: np.ndarray | None = None, not_loaders: frozenset[int] = frozenset(),
               memo: dict[Any, dict[int, tuple[Any, Any]]] | None = None) -> ProcFacts:
    """``stall``: per tick of ``procs``, whether the GPUs waited (the main process's CPU is read there);
    ``running``: per tick, whether the job had run its first kernel (None: all ticks); ``not_loaders``: child
    pids whose own stack showed they are no DataLoader worker (diagnosis/inside.py), not counted as workers;
    ``memo``: the window's (tickmemo.py), where each tick's tally is kept for the next verdicts."""
    facts = ProcFacts()
    pegged_per_tick: list[int] = []
    total_per_tick: list[int] = []
    procs_per_tick: list[int] = []
    main_cpu: list[float] = []
    respawns = _Respawns()
    pids_by_card: dict[int, set[int]] = {}  # its keys: the cards seen
    workers_max = facts.workers
    n_stall = stall.size
    n_running = running.size if running is not None else 0
    peg = th.core_pegged_pct
    tab = {} if memo is None else tickmemo.table(memo, ("tally", peg, not_loaders))
    for k, tick in enumerate(procs):
        if not tick:
            continue
        pegged, total, busiest, n_pids, most, by_card, seen = _tally_kept(tab, tick, peg, not_loaders)
        for card, pids in by_card:
            have = pids_by_card.get(card)
            if have is None:
                pids_by_card[card] = set(pids)
            else:
                have.update(pids)
        workers_max = max(workers_max, most)
        respawns.see(seen)
        pegged_per_tick.append(pegged)
        total_per_tick.append(total)
        procs_per_tick.append(n_pids)
        if ((k >= n_stall or stall[k]) and (running is None or k >= n_running or running[k])
                and not math.isnan(busiest)):
            main_cpu.append(busiest)
    tickmemo.prune(tab, procs)
    facts.workers = workers_max
    facts.respawns = respawns.count
    facts.seen = bool(procs_per_tick)
    if procs_per_tick:
        facts.processes = int(median_of(procs_per_tick))
        facts.workers_pegged = int(median_of(pegged_per_tick))
        facts.workers_total = int(median_of(total_per_tick))
    if main_cpu:
        facts.main_cpu = median_of(main_cpu)
    if len(pids_by_card) == 1 and not other_cards_busy:
        facts.ranks_on_first_card = len(next(iter(pids_by_card.values())))
    return facts


def _tally_kept(tab: dict[int, tuple[Any, Any]], tick: list[ProcSample], peg: float,
                not_loaders: frozenset[int]) -> _Tallied:
    """``tick``'s tally, from ``tab`` (the window's memo) when this very list was tallied there before."""
    hit = tab.get(id(tick))
    if hit is not None and hit[0] is tick:
        kept: _Tallied = hit[1]
        return kept
    tallied = _tally(tick if not not_loaders else [_loaders_only(p, not_loaders) for p in tick], peg)
    tickmemo.store(tab, tick, tallied)
    return tallied


def _loaders_only(p: ProcSample, not_loaders: frozenset[int]) -> ProcSample:
    """``p`` with the children in ``not_loaders`` left out of its workers (pids and CPU are aligned lists)."""
    if not not_loaders.intersection(p.worker_pids):
        return p
    kept = [(w, c) for w, c in zip(p.worker_pids, p.workers_cpu_pct, strict=False) if w not in not_loaders]
    return replace(p, workers=len(kept), worker_pids=[w for w, _ in kept], workers_cpu_pct=[c for _, c in kept])


# a tick's (pegged workers, workers, busiest process's CPU %, processes, most workers of one process,
# (card, its pids) pairs, the tick as counted: without the children that are no DataLoader worker)
_Tallied = tuple[int, int, float, int, int, tuple[tuple[int, frozenset[int]], ...], list[ProcSample]]


def _tally(tick: list[ProcSample], peg: float) -> _Tallied:
    """One tick's counts (see :data:`_Tallied`).

    Attributes are read once each and there is no per-process generator: this loop was ~12 % of
    `diagnose DIR --summary` (8 processes x 10 ticks a verdict); the same counts as written plainly."""
    pegged = total = most = 0
    busiest = float("nan")
    tick_pids: set[int] = set()
    pids_by_card: dict[int, set[int]] = {}
    for p in tick:
        pid = p.pid
        tick_pids.add(pid)
        card = pids_by_card.get(p.gpu_index)
        if card is None:
            card = pids_by_card[p.gpu_index] = set()
        card.add(pid)
        cpus = p.workers_cpu_pct
        if None in cpus:
            cpus = [c for c in cpus if c is not None]
        n_workers = max(int(p.workers or 0), len(cpus))
        if n_workers > most:
            most = n_workers
        total += n_workers
        for c in cpus:
            if c >= peg:
                pegged += 1
        cpu = p.cpu_pct
        if cpu is not None and not cpu <= busiest:
            busiest = float(cpu)
    by_card = tuple((card, frozenset(pids)) for card, pids in pids_by_card.items())
    return pegged, total, busiest, len(tick_pids), most, by_card, tick


class _Respawns:
    """Counts the times a process's whole set of DataLoader worker pids was replaced (an epoch's re-spawn)."""

    __slots__ = ("count", "last_lists", "last_sets")

    def __init__(self) -> None:
        self.count = 0
        self.last_sets: dict[int, frozenset[int]] = {}
        self.last_lists: dict[int, list[int]] = {}  # the worker pid list that last_sets was made from

    def see(self, tick: list[ProcSample]) -> None:
        for p in tick:
            wpids = p.worker_pids
            if not wpids:
                continue
            pid = p.pid
            if self.last_lists.get(pid) == wpids:
                continue  # the same workers as this process's last list: no respawn, the same set kept
            pids = frozenset(wpids)
            prev = self.last_sets.get(pid)
            if prev is not None and prev and not (prev & pids):
                self.count += 1
            self.last_sets[pid] = pids
            self.last_lists[pid] = wpids


@dataclass(slots=True)
class HostFacts:
    """The two-minute method's numbers over the judged ticks (NaN where not measured)."""

    gpu_mean: float
    gpu_p5: float
    gpu_p95: float
    sm_mean: float  # NaN: no SM activity on these cards (pre-Hopper, no GPM)
    sm_stall: float  # SM activity over the stall ticks only
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
    disk_write: float  # busiest disk's write bytes/s during stall ticks
    disk_write_peak: float  # the highest one-tick write bytes/s of any disk over the judged ticks
    await_peak_ms: float  # the highest one-tick await of any disk over the judged ticks
    iowait: float
    link_bytes_per_s: float  # busiest card's PCIe + NVLink traffic, both directions, over the judged ticks
    link_stall_bytes_per_s: float  # the same over the stall ticks only
    h2d_bytes_per_s: float  # busiest card's PCIe host-to-device (RX) traffic during stall ticks
    h2d_cards: list[int]  # cards whose RX reaches h2d_bytes_per_s
    mem_frac: float  # highest share of a card's memory in use
    mem_card: int | None

    @property
    def cpu_cores_busy(self) -> float:
        """Cores' worth of CPU time in use while the GPU waits (sum of busy shares)."""
        return float("nan") if math.isnan(self.cpu_busy) else self.cpu_busy * self.cores / 100.0

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
            "disk_write_bytes_per_s": self.disk_write,
            "disk_write_peak_bytes_per_s": self.disk_write_peak,
            "disk_await_peak_ms": self.await_peak_ms,
            "iowait_pct": self.iowait,
            "link_bytes_per_s": self.link_bytes_per_s,
            "link_stall_bytes_per_s": self.link_stall_bytes_per_s,
            "pcie_rx_bytes_per_s": self.h2d_bytes_per_s,
            "gpu_mem_used_frac": self.mem_frac,
        }


def f(x: object) -> float:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


def stall_ticks(util: np.ndarray, th: Thresholds) -> np.ndarray:
    """Ticks where the cards' mean GPU-Util is below high_util_pct; every tick when there is none."""
    per_tick = np.asarray(nanmean(util, axis=1)) if util.shape[1] else np.full(util.shape[0], np.nan)
    stall = np.asarray(per_tick < th.high_util_pct)
    if not stall.any():
        stall = np.ones_like(stall, dtype=bool)
    return stall


LINK_FIELDS = ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")
_BIG = float(np.finfo(np.float64).max)


def link_traffic(gpu: dict[str, np.ndarray]) -> np.ndarray:
    """(T, G) PCIe + NVLink bytes/s both directions; NaN where a card reports none of the four."""
    shape = gpu["util_pct"].shape
    link = np.zeros(shape)
    have = np.zeros(shape, dtype=bool)
    for name in LINK_FIELDS:
        a = gpu[name]
        ok = ~np.isnan(a)
        have |= ok
        # np.nan_to_num(a) (NaN -> 0, +-inf -> the largest finite double) in three ufunc calls: its Python
        # layers were 4 % of `diagnose DIR --summary`
        link += np.where(ok, np.minimum(np.maximum(a, -_BIG), _BIG), 0.0)
    return np.where(have, link, np.nan)


def _nanargmax(a: np.ndarray) -> int:
    """``np.nanargmax`` of a 1-D float array with a value that is not NaN: numpy's own steps (NaN -> -inf,
    then argmax) without its Python layers (~40 us a call)."""
    return int(np.argmax(np.where(np.isnan(a), -np.inf, a)))


def _busiest(a: np.ndarray) -> float:
    per_card = np.asarray(nanmean(a, axis=0)) if a.size else np.zeros(0)
    return f(nanmax(per_card)) if np.size(per_card) else float("nan")


def host_facts(
    gpu: dict[str, np.ndarray],
    gpu_indexes: list[int],
    cpu: np.ndarray,
    iowait: np.ndarray,
    disk: dict[str, np.ndarray],
    disk_names: list[str],
    th: Thresholds,
    cpu_count: int | None,
    stall: np.ndarray | None = None,
    link: np.ndarray | None = None,
) -> HostFacts:
    """``stall`` (:func:`stall_ticks` of ``gpu``) and ``link`` (:func:`link_traffic` of ``gpu``): where the
    caller has them already."""
    util = gpu["util_pct"]
    if stall is None:
        stall = stall_ticks(util, th)
    vals = util[~np.isnan(util)]
    gpu_mean = float(vals.mean()) if vals.size else float("nan")
    # one sort for both percentiles (same values as two calls)
    gpu_p5, gpu_p95 = (float(v) for v in percentiles(vals, [5, 95])) if vals.size else (float("nan"),) * 2
    sm_mean = f(nanmean(gpu["sm_active_pct"])) if gpu["sm_active_pct"].size else float("nan")
    sm_st = gpu["sm_active_pct"][stall]
    sm_stall = f(nanmean(sm_st)) if sm_st.size and not np.isnan(sm_st).all() else float("nan")
    cores = int(cpu_count or cpu.shape[1] or 0)
    cpu_busy, cpu_sat, max_core, cores_pegged, others_busy, pegged_ids = _cpu_facts(
        cpu[stall] if cpu.shape[1] else cpu, th)
    iow = f(nanmean(iowait[stall])) if iowait.size else float("nan")
    disk_busy, disk_name, await_ms = _busiest_disk(disk, disk_names, stall)
    disk_write, write_peak, await_peak = _disk_writes(disk, stall)
    if link is None:
        link = link_traffic(gpu)
    h2d, h2d_cards = _h2d(gpu, gpu_indexes, stall, th)
    mem_frac, mem_card = _memory(gpu, gpu_indexes)
    return HostFacts(
        gpu_mean, gpu_p5, gpu_p95, sm_mean, sm_stall, cpu_busy, cpu_sat, max_core, cores, cores_pegged, others_busy,
        pegged_ids, disk_busy, disk_name, await_ms, disk_write, write_peak, await_peak, iowait=iow,
        link_bytes_per_s=_busiest(link), link_stall_bytes_per_s=_busiest(link[stall]), h2d_bytes_per_s=h2d,
        h2d_cards=h2d_cards, mem_frac=mem_frac, mem_card=mem_card,
    )


def _cpu_facts(c: np.ndarray, th: Thresholds) -> tuple[float, float, float, int, float, list[int]]:
    """(mean busy, share of saturated ticks, busiest core, pegged cores, the others' busy, the pegged cores'
    ids) over the stall ticks ``c`` (T, cores)."""
    if not c.size or np.isnan(c).all():
        nan = float("nan")
        return nan, nan, nan, 0, nan, []
    cpu_busy = f(nanmean(c))
    tick_busy = np.asarray(nanmean(c, axis=1))
    cpu_sat = float(np.count_nonzero(tick_busy >= th.cpu_saturated_pct) / tick_busy.size)  # np.mean of bools
    max_core = f(nanmean(np.asarray(nanmax(c, axis=1))))
    pegged = c >= th.core_pegged_pct
    n_pegged = pegged.sum(axis=1)
    cores_pegged = int(median_of(n_pegged.tolist()))  # np.median's value
    freq = pegged.mean(axis=0)
    pegged_ids = [int(i) for i in np.argsort(-freq, kind="stable")[:cores_pegged] if freq[i] >= 0.5]
    rest = np.where(pegged, np.nan, c)
    return cpu_busy, cpu_sat, max_core, cores_pegged, f(nanmean(rest)), pegged_ids


def _busiest_disk(disk: dict[str, np.ndarray], disk_names: list[str],
                  stall: np.ndarray) -> tuple[float, str | None, float]:
    """The busiest disk over the stall ticks: its busy %, name and await."""
    busy = disk["busy_pct"][stall] if disk["busy_pct"].shape[1] else np.zeros((0, 0))
    if not busy.size or np.isnan(busy).all():
        return float("nan"), None, float("nan")
    per_disk = np.asarray(nanmean(busy, axis=0))
    j = _nanargmax(per_disk)
    aw = disk["await_ms"][stall][:, j]
    return f(per_disk[j]), disk_names[j] if j < len(disk_names) else None, f(nanmean(aw)) if aw.size else float("nan")


def _disk_writes(disk: dict[str, np.ndarray], stall: np.ndarray) -> tuple[float, float, float]:
    """(busiest disk's write bytes/s over the stall ticks, the highest one-tick write and await of any disk)."""
    writes = disk["write_bytes_per_s"][stall] if disk["write_bytes_per_s"].shape[1] else np.zeros((0, 0))
    disk_write = _busiest(writes) if writes.size and not np.isnan(writes).all() else float("nan")
    all_w, all_aw = disk["write_bytes_per_s"], disk["await_ms"]
    write_peak = f(nanmax(all_w)) if all_w.size and not np.isnan(all_w).all() else float("nan")
    await_peak = f(nanmax(all_aw)) if all_aw.size and not np.isnan(all_aw).all() else float("nan")
    return disk_write, write_peak, await_peak


def _h2d(gpu: dict[str, np.ndarray], gpu_indexes: list[int], stall: np.ndarray,
         th: Thresholds) -> tuple[float, list[int]]:
    """The busiest card's PCIe host-to-device rate over the stall ticks, and the cards reaching h2d_bytes_per_s."""
    rx = gpu["pcie_rx_bytes_per_s"][stall]
    rx_card = np.asarray(nanmean(rx, axis=0)) if rx.size else np.zeros(0)
    h2d = f(nanmax(rx_card)) if np.size(rx_card) and not np.isnan(rx_card).all() else float("nan")
    return h2d, [gpu_indexes[j] for j in range(np.size(rx_card)) if rx_card[j] >= th.h2d_bytes_per_s]


def _memory(gpu: dict[str, np.ndarray], gpu_indexes: list[int]) -> tuple[float, int | None]:
    """The highest share of a card's memory in use, and that card."""
    used, total = gpu["mem_used_bytes"], gpu["mem_total_bytes"]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.asarray(nanmean(used / total, axis=0)) if used.size else np.zeros(0)
    if not np.size(frac) or np.isnan(frac).all():
        return float("nan"), None
    j = _nanargmax(frac)
    return f(frac[j]), gpu_indexes[j]
