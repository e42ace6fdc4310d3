"""Everything the diagnosis measures in a window before it chooses a cause, as named frozen fields.

:meth:`Measurements.from_view` reads the judged stretch (span.py), the cards' shapes and periods, the host's
and the processes' facts (facts.py), the levels of every card where the cards part ways, the links, and the
evidence sentences several rules share. The rules (``mechanisms/``) read these fields and nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpu_triage.diagnosis.facts import (
    Fact,
    HostFacts,
    ProcFacts,
    ge,
    host_facts,
    link_traffic,
    median_of,
    pct,
    proc_facts,
    stall_ticks,
)
from gpu_triage.diagnosis.host_evidence import WorkersRec, data_facts, quiet_wait_s, startup_facts, storage_facts
from gpu_triage.diagnosis.inside import InsideEvidence, inside_evidence, not_loaders
from gpu_triage.diagnosis.patterns import CardShape, across_cards, autoperiods, card_shapes, column_nanmeans, nanmean
from gpu_triage.diagnosis.span import JobSpan, job_span, judged_span, tick_seconds
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.vocab import Pattern
from gpu_triage.window import WindowView


def span_words(seconds: float) -> str:
    """How long the judged ticks last, as the evidence names it: ``40 s``, ``3 min``."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


@dataclass(frozen=True, slots=True)
class Judged:
    """The judged stretch: its first tick, whether it is a fresh regime, the longest earlier run in its band."""

    start: int
    fresh: bool
    prior_run: int
    span: JobSpan


@dataclass(frozen=True, slots=True)
class Shape:
    """The cards' shapes and the pattern across them, with its period and duty (from the cards it concerns)."""

    shapes: dict[int, CardShape]
    pattern: Pattern
    cards: list[int]
    period_s: float | None
    duty: float | None
    fast: bool


@dataclass(frozen=True, slots=True)
class Measurements:
    """What a rule may read, measured once per verdict (see the module docstring)."""

    view: WindowView
    th: Thresholds
    dt: float  # the tick length
    judged: Judged
    shape: Shape
    gpu: dict[str, np.ndarray]  # every card's fields over the judged ticks
    hf: HostFacts  # over the cards the pattern concerns (the busy one for single_card_busy)
    pf: ProcFacts
    util: dict[int, float]  # mean GPU-Util of the cards the pattern concerns
    sm: dict[int, float]  # their SM activity
    all_util: dict[int, float]  # every card's
    all_sm: dict[int, float]
    link: dict[int, float]  # every card's PCIe + NVLink traffic over the judged ticks
    stall_util: dict[int, float]  # every card's, over the ticks where the cards part ways
    stall_sm: dict[int, float]
    stall_d2h: dict[int, float]  # peak device-to-host bytes/s there, SMs idle
    quiet_wait_s: float  # how long the waiting cards have waited with quiet links (whole window)
    procs_known: bool  # any process information in the window (containers may have none)
    gpu_line: Fact
    base: list[Fact]  # the GPU-Util line, and SM activity where known: every rule's evidence begins so
    storage: list[Fact]  # what the disks do while the GPU waits
    data: list[Fact]  # what the cores and the DataLoader workers do while the GPU waits
    workers: WorkersRec
    strong_data: bool
    inside: InsideEvidence = InsideEvidence()  # the training processes' stack samples (trace v3; empty before)
    loader_ruled_out: bool = False  # the job's own clock says its steps do not wait for data (rules.find_cause)

    # -- reading ---------------------------------------------------------------------------------------

    @property
    def pattern(self) -> Pattern:
        return self.shape.pattern

    @property
    def n_gpus(self) -> int:
        return self.view.n_gpus

    @property
    def start(self) -> int:
        return self.judged.start

    @property
    def sm_known(self) -> bool:
        return not math.isnan(self.hf.sm_mean)

    @property
    def high(self) -> bool:
        return ge(self.hf.gpu_mean, self.th.high_util_pct)

    @property
    def waits(self) -> bool:
        """The GPU waits: not held high, or held in a shape that has waits of its own."""
        return not self.high or self.pattern in (Pattern.SAWTOOTH, Pattern.STEADY_LOW, Pattern.IMBALANCED)

    @property
    def waiting(self) -> list[int]:
        """Cards at high GPU-Util with low SM activity: kernels that wait (NCCL at a barrier), not compute."""
        th = self.th
        return [i for i, u in self.util.items() if u >= th.high_util_pct and self.sm.get(i, math.nan) < th.sm_low_pct]

    @property
    def job_present(self) -> bool:
        """A process uses the GPUs; without process information, a card holds a context's worth of memory."""
        return self.pf.seen or (not self.procs_known and ge(self.hf.mem_frac, self.th.mem_context_frac))

    @property
    def rank_held(self) -> bool:
        """Some card waits at a collective (GPU-Util high, SM low) over the ticks where the cards part ways."""
        th = self.th
        util, sm = self.stall_util or self.all_util, self.stall_sm or self.all_sm
        return self.n_gpus >= 2 and any(u >= th.high_util_pct and sm.get(i, math.nan) < th.sm_low_pct
                                        for i, u in util.items())

    @property
    def fed_slowly(self) -> bool:
        """Since the job runs (the tick after the one where the last of its cards ran its first kernel), the
        GPU waited in most ticks, and kernels ran in those waits: a job fed slowly. A job starting up holds a
        core with idle cards too, but runs no kernel; a job that waits in a minority of its running ticks is
        a compute job ramping up (real DDP start: one tick at 71 %, then 97 %), not one starved of input."""
        pf = self.pf
        if pf.running_waits < 1 or 2 * pf.running_waits <= pf.running_ticks:
            return False
        return not self.sm_known or ge(pf.sm_running_waits, self.th.sm_fed_pct)

    @property
    def round_trip(self) -> tuple[float, float] | None:
        """(host-to-device, device-to-host) bytes/s of the busiest receiving card over the judged ticks when
        bytes go both ways: at least ``h2d_bytes_per_s`` down to the card and ``round_trip_share`` of that back
        (and ``round_trip_min_bytes_per_s``, or ``d2h_bytes_per_s`` while the process runs more than one
        thread's work, ``one_thread_max_cores``: a pageable copy is one thread's memcpy).
        An input pipeline sends batches to the card and little back; gradients down and parameters up every
        step (an optimizer or a model part on the host) move both ways. None otherwise.
        Read over the ticks since the current job runs, where it has some in the judged stretch (as its CPU
        is): the previous job's and the start-up's ticks move no step's bytes."""
        rx, tx = self.gpu["pcie_rx_bytes_per_s"], self.gpu["pcie_tx_bytes_per_s"]
        ran = self.judged.span.running_from
        if ran is not None and ran + 1 < self.view.n and rx.shape[0]:
            keep = max(0, ran + 1 - self.judged.start)
            rx, tx = rx[keep:], tx[keep:]
        if not rx.size or np.isnan(rx).all():
            return None
        down = np.nan_to_num(nanmean(rx, axis=0), nan=0.0)
        up = np.nan_to_num(nanmean(tx, axis=0), nan=0.0)
        j = int(np.argmax(down))
        th = self.th
        computing = ge(self.pf.main_cpu, 100.0 * th.one_thread_max_cores)
        least = th.d2h_bytes_per_s if computing else th.round_trip_min_bytes_per_s
        if down[j] < th.h2d_bytes_per_s or up[j] < max(th.round_trip_share * down[j], least):
            return None
        return float(down[j]), float(up[j])

    @property
    def no_sm_note(self) -> Fact:
        return Fact("SM activity not available on these cards (no GPM before Hopper): judged from GPU-Util alone")

    # -- measuring -------------------------------------------------------------------------------------

    @classmethod
    def from_view(cls, view: WindowView, th: Thresholds, cpu_count: int | None = None,
                  dt: float | None = None) -> Measurements:
        """Measure ``view`` (at least 3 ticks and warmup_s of them, some GPU-Util: engine.diagnose checks);
        ``dt``: its tick length when the caller has it already (:func:`~span.tick_seconds`)."""
        dt = tick_seconds(view) if dt is None else dt
        recent = max(3, int(math.ceil(th.recent_s / dt)))
        span = job_span(view, th, 3 * recent)  # the judged stretch and its look-back reach at most 3 x recent
        start, fresh, prior_run = judged_span(view, th, dt, floor=span.start, running_from=span.running_from)
        judged = Judged(start, fresh, prior_run, span)
        gpu = {k: v[start:] for k, v in view.gpu.items()}
        shape = _shape(view, gpu, judged, th, dt)
        # one card busy and the rest idle: the busy card's own waits are what to explain
        link = link_traffic(gpu)  # per element: a card's columns of it are its own traffic
        if shape.pattern == Pattern.SINGLE_CARD_BUSY:
            cols = [view.gpu_indexes.index(i) for i in shape.cards]
            focus, focus_idx = {k: v[:, cols] for k, v in gpu.items()}, list(shape.cards)
            focus_link = link[:, cols]
        else:
            focus, focus_idx, focus_link = gpu, view.gpu_indexes, link
        sl = slice(start, view.n)
        stall = stall_ticks(focus["util_pct"], th)
        hf = host_facts(focus, focus_idx, view.cpu[sl], view.iowait[sl], {k: v[sl] for k, v in view.disk.items()},
                        view.disk_names, th, cpu_count, stall, focus_link)
        pf = _proc_facts(view, th, judged, focus, shape, dt, stall)
        all_sm = dict(zip(view.gpu_indexes, column_nanmeans(gpu["sm_active_pct"]).tolist(), strict=True))
        all_util = {idx: s.mean for idx, s in shape.shapes.items() if not math.isnan(s.mean)}
        stall_util, stall_sm, stall_d2h = _parting(view, gpu, th)
        link_per_card = dict(zip(view.gpu_indexes, column_nanmeans(link).tolist(), strict=True))
        util = {i: u for i, u in all_util.items() if i in focus_idx}
        # the span named: a card's graph beside it says its mean over the whole window, which may hold more
        gpu_line = Fact(f"GPU-Util mean {pct(hf.gpu_mean)}, p5 {pct(hf.gpu_p5)}, p95 {pct(hf.gpu_p95)} "
                        f"over the last {span_words((view.n - start) * dt)}",
                        "gpu_util_mean_pct", hf.gpu_mean, tuple(util))
        base = [gpu_line]
        if not math.isnan(hf.sm_mean):
            base.append(Fact(f"SM activity mean {pct(hf.sm_mean)}", "sm_active_mean_pct", hf.sm_mean))
        workers, data, strong = data_facts(hf, pf, th, all_util)
        return cls(
            view, th, dt, judged, shape, gpu, hf, pf,
            util=util, sm={i: v for i, v in all_sm.items() if i in focus_idx},
            all_util=all_util, all_sm=all_sm, link=link_per_card, stall_util=stall_util, stall_sm=stall_sm,
            stall_d2h=stall_d2h, quiet_wait_s=quiet_wait_s(view, focus_idx, th, dt),
            procs_known=any(bool(t) for t in view.procs), gpu_line=gpu_line, base=base,
            storage=storage_facts(hf, th), data=data, workers=workers, strong_data=strong,
            inside=inside_evidence(view, _inside_from(judged)),
        )


def _inside_from(judged: Judged) -> int:
    """The first tick whose stack samples say what the job's step does: in the judged stretch, the current
    job's, after the tick where its last card ran its first kernel (imports and the model's build before it
    are a start-up's phases, not the step's)."""
    span = judged.span
    running = span.running_from + 1 if span.running_from is not None else 0
    return max(judged.start, span.start, running)


def _shape(view: WindowView, gpu: dict[str, np.ndarray], judged: Judged, th: Thresholds, dt: float) -> Shape:
    util, umin, umax = gpu["util_pct"], gpu["util_min_pct"], gpu["util_max_pct"]
    shapes: dict[int, CardShape] = dict(zip(view.gpu_indexes, card_shapes(util, umin, umax, th), strict=True))
    if not judged.fresh and judged.start > 0:
        _window_periods(view, shapes, th)
    pattern, cards = across_cards(shapes, th)
    # period and duty: from the cards the pattern concerns
    saw = [shapes[i] for i in (cards or list(shapes)) if shapes[i].pattern == "sawtooth"]
    if not saw:
        return Shape(shapes, Pattern(pattern), cards, None, None, False)
    periods = [s.period.ticks for s in saw if s.period is not None]
    duties = [s.duty for s in saw if s.duty is not None]
    return Shape(shapes, Pattern(pattern), cards, median_of(periods) * dt if periods else None,
                 median_of(duties) if duties else None, any(s.fast for s in saw))


def _window_periods(view: WindowView, shapes: dict[int, CardShape], th: Thresholds) -> None:
    """A short stretch may hold too few cycles: look for each sawtooth's period over the whole window."""
    util_all = view.gpu["util_pct"]
    todo = [j for j, idx in enumerate(view.gpu_indexes)
            if shapes[idx].pattern == "sawtooth" and shapes[idx].period is None
            and not shapes[idx].fast and not np.isnan(util_all[:, j]).any()]
    if todo:
        for j, p in zip(todo, autoperiods(util_all[:, todo], th.sawtooth_min_acf), strict=True):
            if p is not None:
                shapes[view.gpu_indexes[j]].period = p


def _proc_facts(view: WindowView, th: Thresholds, judged: Judged, focus: dict[str, np.ndarray], shape: Shape,
                dt: float, stall: np.ndarray) -> ProcFacts:
    """``stall``: :func:`~facts.stall_ticks` of the focus cards."""
    n, start, span = view.n, judged.start, judged.span
    others_busy = len([s for s in shape.shapes.values() if s.pattern != "idle"]) > 1
    procs = view.procs[start:] if len(view.procs) == n else view.procs[-(n - start):]
    # ticks since the job's first kernel: before it the job starts up, it does not wait for input
    if span.appeared is None:
        running = np.ones(n - start, dtype=bool)
    else:
        # strictly after: the tick that holds the first kernel is still part start-up
        running = np.arange(start, n) > (span.running_from if span.running_from is not None else n)
    pf = proc_facts(procs, stall, th, others_busy, running, not_loaders(view), view.memo)
    waits = stall & running
    pf.running_waits = int(waits.sum())
    pf.running_ticks = int(running.sum())
    sm_w = focus["sm_active_pct"][waits]
    if sm_w.size and not np.isnan(sm_w).all():
        pf.sm_running_waits = float(nanmean(sm_w))
    if span.starting(n):
        startup_facts(pf, view, span, dt)
    return pf


def _parting(view: WindowView, gpu: dict[str, np.ndarray],
             th: Thresholds) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """Every card's GPU-Util, SM activity and peak device-to-host rate with its SMs idle, over the ticks where
    the cards part ways (spread >= imbalance_pct; every tick when they never do).

    A rank that stalls now and then (a checkpoint) shows there, while between those ticks every rank
    computes; a rank copying tensors off its card outside the step (torch.save of CUDA tensors) sends
    device-to-host there, the others waiting at the next collective."""
    util, sm = gpu["util_pct"], gpu["sm_active_pct"]
    # np.nanmax/np.nanmin are fmax/fmin.reduce for an ndarray, behind Python layers and a warning on all-NaN
    with np.errstate(invalid="ignore"):
        spread = np.fmax.reduce(util, axis=1) - np.fmin.reduce(util, axis=1) if util.size else np.zeros(0)
    parting = spread >= th.imbalance_pct
    if not parting.any():
        parting = np.ones(util.shape[0], dtype=bool)
    st_u, st_sm = nanmean(util[parting], axis=0), nanmean(sm[parting], axis=0)  # numpy's values, no warning
    idx = view.gpu_indexes
    stall_util = {i: float(st_u[j]) for j, i in enumerate(idx) if not math.isnan(st_u[j])}
    stall_sm = {i: float(st_sm[j]) for j, i in enumerate(idx)}
    tx = gpu["pcie_tx_bytes_per_s"]
    with np.errstate(invalid="ignore"):
        quiet_sm = np.where(np.isnan(sm), True, sm < th.sm_idle_pct)
        d2h = np.fmax.reduce(np.where(parting[:, None] & quiet_sm, tx, np.nan), axis=0) if tx.size else np.zeros(0)
    stall_d2h = {i: float(d2h[j]) for j, i in enumerate(idx) if j < d2h.size}
    return stall_util, stall_sm, stall_d2h
