"""The evidence sentences about the host and the job's processes that several rules share (storage, the
DataLoader workers, CPU saturation, start-up), measured once per window for :class:`~gpu_triage.diagnosis.
measure.Measurements`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gpu_triage.diagnosis.facts import LINK_FIELDS, Fact, HostFacts, ProcFacts, ge, link_traffic, pct
from gpu_triage.diagnosis.span import JobSpan
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.model import JOB_RANGES
from gpu_triage.window import WindowView

MAX_RATE = JOB_RANGES["samples_per_s"][1]  # a job's samples/s past this is no measurement (trace v2's range)
FED_FLOOR_PCT = 10.0  # a GPU fed less than this share of the time is read as fed this much: the want stays finite


@dataclass(frozen=True, slots=True)
class JobRate:
    """The job's own rate (trace v2 ``job``) and how much of the time its GPUs compute (:attr:`fed_pct`): at
    least 100 - ``wait_pct`` (the share of each step not waiting for a batch, by the job's clock) and at least
    ``busy_pct``, the GPU-Util of the least busy working card. CUDA runs a step's kernels while the loop
    already waits for the next batch, so the clock alone reads a GPU busy 26 % of the time as 7 % (real
    1-card starved run: 93 % data wait at GPU-Util 26 %); the least busy card, because a card waiting at a
    collective for the others spins at 100 % GPU-Util."""

    samples_per_s: float  # the whole job's, summed over ranks
    wait_pct: float | None  # None: the job does not measure it (a log without data time)
    busy_pct: float  # NaN: unknown

    @property
    def fed_pct(self) -> float:
        """The share of the time the GPU computes (never below :data:`FED_FLOOR_PCT`)."""
        shares = [s for s in (None if self.wait_pct is None else 100.0 - self.wait_pct, self.busy_pct)
                  if s is not None and not math.isnan(s)]
        return min(100.0, max([FED_FLOOR_PCT, *shares]))

    def reason(self, workers: int, pegged: int, cards: str = "the GPU") -> str:
        """"~457 samples/s from 1 worker (1 pegged, ~457/s each); the GPU would take ~1778/s (busy 26 % ...)"."""
        s = self.samples_per_s
        busy, wait = self.busy_pct, self.wait_pct
        if wait is not None and (math.isnan(busy) or 100.0 - wait >= busy):
            why = f"at {wait:.0f} % data wait"
        elif wait is not None:
            why = (f"busy {busy:.0f} % of the time on the least busy card; its kernels run during the {wait:.0f} % "
                   "data wait")
        else:
            why = f"busy {busy:.0f} % of the time on the least busy card"
        return (f"~{s:.0f} samples/s from {workers} worker{'s' if workers != 1 else ''} ({pegged} pegged, "
                f"~{s / workers:.0f}/s each); {cards} would take "
                f"~{s * 100.0 / self.fed_pct:.0f}/s ({why})")


@dataclass(frozen=True, slots=True)
class WorkersRec:
    """The one num_workers recommendation: from cores, training processes, measured worker saturation and
    how much of the time the GPU is fed (:meth:`line`: the number and its reason in one line, or None when
    num_workers is not what to change)."""

    lo: int  # cores/4 per process: the method's starting point
    hi: int  # cores/2 per process
    now: int | None  # num_workers now (None: no process information)
    state: str  # "too_few", "cpu_bound" (enough workers, each pegged), "cpu_full" (every core busy), "range"
    cores: int = 0
    procs: int = 1
    idle_cores: int = 0  # cores not busy while the GPU waits
    gpu_pct: float = float("nan")  # GPU-Util while the pipeline feeds it: the share of the time it is fed
    pegged: int = 0  # workers at 100 % of a core, all processes together (median per tick)
    rate: JobRate | None = None  # the job's own samples/s, where a job source reports it (:meth:`with_rate`)

    def with_rate(self, samples_per_s: float | None, wait_pct: float | None, busy_pct: float) -> WorkersRec:
        """This recommendation with the job's own rate beside it; unchanged without a rate (no job source, a
        stale or stopped job) or without anything saying how much of the time the GPU computes."""
        if (samples_per_s is None or not math.isfinite(samples_per_s) or not 0 < samples_per_s <= MAX_RATE
                or (wait_pct is None and math.isnan(busy_pct))):
            return self
        return replace(self, rate=JobRate(float(samples_per_s), wait_pct, busy_pct))

    @property
    def _workers(self) -> int:
        return max(self.now or 0, 1) * max(self.procs, 1)

    @property
    def _by_rate(self) -> bool:
        return self.rate is not None and (self.now or 0) >= 1

    def needed(self) -> int:
        """Workers per process the GPU needs, unbounded: with the job's rate, (samples/s / fed share) / (samples/s
        per worker), per process; else the workers now / the GPU-Util's share. The workers are num_workers x the
        processes (ranks run the same DataLoader; its workers take batches in turn), not the pegged count: a
        median per tick, it reads 1 of 2 whenever one dips under the line or a rank's workers start late."""
        now = self.now or 0
        if self.rate is not None and self._by_rate:
            per_worker = self.rate.samples_per_s / self._workers
            want = self.rate.samples_per_s * 100.0 / self.rate.fed_pct / max(self.procs, 1)
            return math.ceil(want / per_worker - 1e-9)
        return math.ceil(now * 100.0 / max(self.gpu_pct, FED_FLOOR_PCT))

    def recommended(self) -> int:
        """Pegged workers each deliver what one core can: the GPU fed ``gpu_pct`` of the time (or, where the job
        reports its rate, ``rate.fed_pct``) needs about 100/that times the workers, within the idle cores (one
        core per process kept for the step), and never fewer than one more than now."""
        now = self.now or 0
        room = max(1, self.cores // max(self.procs, 1) - 1)
        if now == 0 or (math.isnan(self.gpu_pct) and not self._by_rate):
            return max(min(self.hi, room), now + 1)
        extra = max(self.idle_cores, 0) // max(self.procs, 1)
        return max(now + 1, min(self.needed(), now + extra, room))

    def line(self) -> str | None:
        now = "" if self.now is None else f" (now {self.now})"
        procs = f"{self.procs} processes" if self.procs > 1 else "one process"
        if self.state == "cpu_full":
            return (f"num_workers{'' if self.now is None else '=' + str(self.now)} is not what to change: every "
                    "core is busy, so more workers will not help and fewer would starve the GPU further")
        if self.state == "cpu_bound":
            return (f"more workers will not help: the {self.now} workers per process (at least cores/2 = {self.hi}) "
                    "are each pegged; make each worker's preprocessing lighter")
        if self.rate is not None and self._by_rate and (self.state == "too_few" or (self.now or 0) < self.lo):
            return self._rate_line(self.rate)
        if self.state == "too_few":
            return (f"DataLoader(num_workers={self.recommended()}){now}: the workers are pegged while cores idle "
                    f"({self.cores} cores, {procs}): each added worker adds a core's worth of input")
        if self.now is not None and self.now >= self.lo:
            return None  # the workers are not saturated: the wait is not their number
        return (f"DataLoader(num_workers={self.lo}){now}: a quarter of the cores per process to start from "
                f"({self.cores} cores, {procs})")

    def waiting_line(self) -> str | None:
        """The job's clock says the steps wait for data while the workers are not pegged: their work waits
        (reads, a remote store): more of them keep more batches in flight. None where :meth:`line` speaks."""
        if self.state != "range" or self.now is None or self.now < self.lo:
            return None
        if self.rate is not None and self._by_rate:
            return self._rate_line(self.rate, waiting=True)
        room = max(1, self.cores // max(self.procs, 1) - 1)
        rec = max(self.now + 1, min(2 * self.now, room))
        return (f"DataLoader(num_workers={rec}, prefetch_factor=4) (now {self.now}): the steps wait for data while "
                "the workers are not pegged, so they wait on reads or latency; more of them keep more in flight")

    def _rate_line(self, rate: JobRate, waiting: bool = False) -> str:
        """The recommendation from the job's rate, its numbers in its reason; "keep" where the rate says the
        workers deliver what the GPU takes. ``waiting``: the workers are not pegged (they wait on reads)."""
        rec, need, now = self.recommended(), self.needed(), self.now or 0
        each = " per process" if self.procs > 1 else ""
        why = rate.reason(self._workers, self.pegged, "the GPUs" if self.procs > 1 else "the GPU")
        if need <= now:  # the GPU's waits are not the workers'
            return f"keep num_workers={now}: {why}: {need} worker{'s' if need != 1 else ''}{each} deliver that"
        fits = f", {rec} fit the idle cores" if rec < need else ""
        procs = f"{self.procs} processes" if self.procs > 1 else "one process"
        if waiting:
            return (f"DataLoader(num_workers={rec}, prefetch_factor=4) (now {now}): {why}: {need} workers{each}"
                    f"{fits}; they are not pegged, so they wait on reads or latency and more keep more in flight")
        return (f"DataLoader(num_workers={rec}) (now {now}): {why}: {need} workers{each}{fits} "
                f"({self.cores} cores, {procs})")


def least_busy_pct(util: np.ndarray, cols: list[int]) -> float:
    """The median over the ticks of the least busy of the cards ``cols``' GPU-Util (NaN: none known). Ranks
    step together: the card that waits at a collective for the others spins at 100 %, the least busy one
    shows how much of the time the job computes."""
    if not cols or not util.size:
        return math.nan
    sub = util[:, cols]
    known = ~np.isnan(sub).all(axis=1)
    if not known.any():
        return math.nan
    return float(np.median(np.fmin.reduce(sub[known], axis=1)))


def storage_facts(hf: HostFacts, th: Thresholds) -> list[Fact]:
    st: list[Fact] = []
    if ge(hf.iowait, th.iowait_pct):
        st.append(Fact(f"iowait {pct(hf.iowait)}", "iowait_pct", hf.iowait))
    if ge(hf.disk_busy, th.disk_busy_pct):
        st.append(Fact(f"disk {hf.disk_name} {pct(hf.disk_busy)} busy", "disk_busy_pct", hf.disk_busy))
    if ge(hf.await_ms, th.await_ms):
        st.append(Fact(f"disk {hf.disk_name} await {hf.await_ms:.0f} ms", "disk_await_ms", hf.await_ms))
    elif st and not math.isnan(hf.await_ms):
        st.append(Fact(f"await {hf.await_ms:.1f} ms", "disk_await_ms", hf.await_ms))
    return st


def _workers(hf: HostFacts, pf: ProcFacts, th: Thresholds, all_util: dict[int, float],
             lone: bool, cpu_full: bool) -> tuple[WorkersRec, bool]:
    """The num_workers recommendation, and whether the workers there are saturated. ``cpu_full``: the busy
    cores are the loader's (data_facts decides it once, for the facts and the recommendation alike)."""
    # training processes: as seen, else one per working card (torchrun's layout)
    procs = pf.processes if pf.seen else max(1, sum(1 for u in all_util.values() if u >= th.idle_util_pct))
    per = max(hf.cores, 1) / procs
    lo, hi = max(1, int(per // 4)), max(1, int(per // 2))
    # a DataLoader's workers take batches in turn and are busy alike: one child pegged among many (at
    # their most) is a helper (a compiler's pool, a logger), not a loader starving the GPU (real
    # torch.compile recompiling: 17-18 children, one of them at 98 %)
    helpers = pf.workers >= 4 and pf.workers_pegged * 4 < pf.workers
    saturated = pf.workers_pegged >= 1 and not helpers and (
        pf.workers_pegged >= th.workers_saturated_share * max(pf.workers_total, 1) or lone
        or pf.workers <= max(2, int(per / th.few_workers_per_core)))
    if cpu_full:
        state = "cpu_full"
    elif saturated and pf.workers < hi:
        state = "too_few"
    elif saturated:
        state = "cpu_bound"
    else:
        state = "range"
    idle = hf.cores - int(math.ceil(hf.cpu_cores_busy)) if not math.isnan(hf.cpu_cores_busy) else 0
    return WorkersRec(lo, hi, pf.workers if pf.seen else None, state, hf.cores, procs, idle,
                      hf.gpu_mean, pf.workers_pegged), saturated


def data_facts(hf: HostFacts, pf: ProcFacts, th: Thresholds,
                all_util: dict[int, float]) -> tuple[WorkersRec, list[Fact], bool]:
    """The data pipeline's evidence: the cores and the DataLoader workers while the GPU waits."""
    d: list[Fact] = []
    # busy cores are a DataLoader's workers only where there are workers: with none, they are the training
    # process's own threads (num_workers=0 decoding on every intra-op thread, or a model part or an optimizer
    # on the CPU: one_core.py says it cannot tell which) or another process's
    cpu_full = ge(hf.cpu_saturated_share, th.cpu_saturated_share) and not (pf.seen and pf.workers == 0)
    if cpu_full:
        d.append(Fact(f"CPU {pct(hf.cpu_busy)} busy on average over {hf.cores} cores while the GPU waits (at "
                      f"or above {th.cpu_saturated_pct:.0f} % in {hf.cpu_saturated_share * 100:.0f} % of those "
                      "ticks)", "cpu_busy_pct", hf.cpu_busy))
    few_cores = max(2, int(hf.cores / th.lone_cores_per_core))
    lone = 1 <= hf.cores_pegged <= few_cores and (math.isnan(hf.others_busy) or hf.others_busy < th.others_quiet_pct)
    workers, saturated = _workers(hf, pf, th, all_util, lone, cpu_full)
    # a loop starved by its loader waits for each batch off CPU (real starved loaders: their training process at
    # 8-53 % of a core); one busier than that does not wait for its children, whatever they are (real:
    # torch.compile's compile worker pegged beside a recompiling process at 70-98 %). Not with several training
    # processes: a DDP rank spins at 100 % of a core in the collective where it waits for a starved peer
    not_waiting = pf.processes <= 1 and ge(pf.main_cpu, th.starved_main_max_pct)
    if not_waiting and workers.state in ("too_few", "cpu_bound"):  # its children do not hold it: no advice on them
        workers, saturated = replace(workers, state="range"), False
    if saturated and not cpu_full and not not_waiting:
        d.extend(_saturated_facts(hf, pf, lone, workers.state))
    elif lone and not pf.seen and not (not math.isnan(hf.sm_mean) and hf.sm_mean < th.sm_idle_pct):
        workers = replace(workers, now=None, state="too_few")
        d.append(Fact(f"{hf.cores_pegged} of {hf.cores} cores pegged ({pct(hf.max_core)}) while the rest idle "
                      f"({pct(hf.others_busy)}): too few loader processes", "cpu_cores_pegged",
                      float(hf.cores_pegged)))
    if pf.respawns >= th.respawns_min:
        d.append(Fact(f"DataLoader worker pids changed {pf.respawns} times: workers re-spawned each epoch",
                      "worker_respawns", float(pf.respawns)))
    strong = workers.state == "too_few" or pf.respawns >= th.respawns_min or cpu_full
    return workers, d, strong


def _saturated_facts(hf: HostFacts, pf: ProcFacts, lone: bool, state: str) -> list[Fact]:
    d: list[Fact] = []
    if lone and hf.cores_pegged >= 1:
        ids = ", ".join(map(str, hf.pegged_ids))
        where = (f"core {ids}" if len(hf.pegged_ids) == 1 else f"cores {ids}") if ids else (
            f"{hf.cores_pegged} core{'s' if hf.cores_pegged != 1 else ''}")
        d.append(Fact(f"{where} at {pct(hf.max_core)} while the other {max(hf.cores - hf.cores_pegged, 0)} "
                      f"idle ({pct(hf.others_busy)})", "cpu_cores_pegged", float(hf.cores_pegged)))
    split = f" ({pf.workers} per process, {pf.processes} processes)" if pf.processes > 1 else ""
    tail = "too few workers for this input pipeline" if state == "too_few" else "preprocessing cannot keep up"
    d.append(Fact(f"{pf.workers_pegged} of {pf.workers_total} DataLoader workers{split} at 100 % of a core "
                  f"while the GPU waits: {tail}", "workers_pegged", float(pf.workers_pegged)))
    return d


def startup_facts(pf: ProcFacts, view: WindowView, span: JobSpan, dt: float) -> None:
    """What a job that does not run yet does: how long since it appeared (and since its first kernel), its
    process's CPU, its cards' memory then and now."""
    n = view.n
    appeared = span.appeared if span.appeared is not None else n - 1
    pf.startup_s = (n - appeared) * dt
    if span.first_kernel is not None:
        pf.startup_kernel_s = (n - span.first_kernel) * dt
    # a process's first CPU reading is 0 (psutil measures from the previous call): the ticks after it count
    procs = view.procs[-(n - appeared - 1):] if n - appeared > 1 else []
    cpu = [max(float(p.cpu_pct) for p in tick if p.cpu_pct is not None) for tick in procs
           if any(p.cpu_pct is not None for p in tick)]
    if cpu:
        pf.startup_cpu = float(np.median(cpu))
    used = view.gpu["mem_used_bytes"]
    first, last = used[appeared], used[-1]
    if not np.isnan(first).all() and not np.isnan(last).all():
        pf.startup_mem_from, pf.startup_mem_now = float(np.nansum(first)), float(np.nansum(last))


def quiet_wait_s(view: WindowView, cards: list[int], th: Thresholds, dt: float) -> float:
    """How long, back from the newest tick, every one of ``cards`` that waits (GPU-Util high, SM low) has done
    so with its links quiet: the age of a collective that moves no bytes."""
    cols = [view.gpu_indexes.index(i) for i in cards]
    if not cols:
        return 0.0
    util, sm = view.gpu["util_pct"][:, cols], view.gpu["sm_active_pct"][:, cols]
    waiting_now = (util[-1] >= th.high_util_pct) & (sm[-1] < th.sm_low_pct)
    if not waiting_now.any():
        return 0.0  # before the links are copied and added up: most verdicts stop here
    g = {"util_pct": util, **{k: view.gpu[k][:, cols] for k in LINK_FIELDS}}  # what is read below
    link = link_traffic(g)
    w = waiting_now
    ok = ((util[:, w] >= th.high_util_pct) & (sm[:, w] < th.sm_low_pct)
          & (np.nan_to_num(link[:, w], nan=np.inf) < th.link_quiet_bytes_per_s)).all(axis=1)
    run = 0
    for v in ok[::-1]:
        if not v:
            break
        run += 1
    return run * dt
