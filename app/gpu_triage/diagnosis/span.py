"""Which ticks of the window are judged: the tick length, the current job's span and the current regime.

What is judged is the *current regime*, not the whole window. A 5-minute window averaged would take minutes
to notice a change, so the levels and causes are read over the last ``recent_s`` seconds; and if the end of
that stretch is a steady block (a step: a new level held for ``max(regime_min_s, 3 ticks)``) longer by half
than any run in its band over the ``2 * recent_s`` before it (so it is not just the low phase of a cycle),
only that block is judged (see :func:`judged_span`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from gpu_triage.diagnosis import tickmemo
from gpu_triage.diagnosis.patterns import nanmean
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.window import WindowView


def tick_seconds(view: WindowView) -> float:
    """The tick length: median of the recorded intervals, else of the timestamps' steps, else 2 s."""
    iv = view.interval_s[~np.isnan(view.interval_s)] if view.interval_s.size else view.interval_s
    # np.median's value without its overhead: the middle of the sorted values, or the two middle ones added
    # and halved (median_of's arithmetic, on the same doubles)
    if iv.size:
        srt = np.sort(iv)
        mid = iv.size // 2
        med = float(srt[mid]) if iv.size % 2 else (float(srt[mid - 1]) + float(srt[mid])) / 2.0
    else:
        med = 0.0
    if med > 0:
        return med
    if view.t.size >= 2:
        d = np.diff(view.t)
        d = d[d > 0]
        if d.size:
            return float(np.median(d))
    return 2.0


def _tick_features(view: WindowView, lo: int = 0) -> np.ndarray:
    """Per tick from ``lo`` on (T - lo, 7): GPU-Util, min, max inside tick (card means), memory share, CPU mean,
    busiest disk, iowait. Each row is its tick's alone (numpy adds each row of a C-contiguous array as the 1-D
    row), so rows computed at different verdicts are the rows computed together."""
    g = {k: view.gpu[k][lo:] for k in ("util_pct", "util_min_pct", "util_max_pct", "mem_used_bytes",
                                       "mem_total_bytes")}
    n = view.n - lo
    util = nanmean(g["util_pct"], axis=1)
    umin = nanmean(g["util_min_pct"], axis=1)
    umax = nanmean(g["util_max_pct"], axis=1)
    umin = np.where(np.isnan(umin), util, umin)
    umax = np.where(np.isnan(umax), util, umax)
    with np.errstate(invalid="ignore", divide="ignore"):
        mem = nanmean(g["mem_used_bytes"] / g["mem_total_bytes"], axis=1) * 100.0
    cpu = nanmean(view.cpu[lo:], axis=1) if view.cpu.shape[1] else np.full(n, np.nan)
    busy = view.disk["busy_pct"][lo:]
    # no NaN left to skip: np.nanmax is the plain maximum here, without its Python layers
    disk = np.maximum.reduce(np.where(np.isnan(busy), -1.0, busy), axis=1) if busy.shape[1] else np.full(n, np.nan)
    disk = np.where(disk < 0, np.nan, disk)
    return np.column_stack([util, umin, umax, mem, cpu, disk, view.iowait[lo:]])


def _features(view: WindowView) -> np.ndarray:
    """:func:`_tick_features` of the whole window, the rows of ticks seen at the previous verdict taken from it.

    Ticks are numbered by ``view.ticks_ever`` (a window's rows are never rewritten); the rows are reused only
    for the same columns (cards in the same order, as many cores and disks): a card added changes every
    row's mean. Otherwise (a first verdict, another shape, a window that moved back) all rows are computed."""
    first, n = view.ticks_ever - view.n, view.n
    shape = (tuple(view.gpu_indexes), view.cpu.shape[1], view.disk["busy_pct"].shape[1])
    tab = tickmemo.table(view.memo, "tick features")
    last = tab.get(0)
    feat: np.ndarray
    if view.ticks_ever and last is not None and last[0] == shape:
        was_first, was = last[1]
        keep = was_first + was.shape[0] - first  # rows of the previous verdict from this view's first tick on
        if 0 <= first - was_first and 0 < keep <= n:
            feat = np.concatenate([was[first - was_first:], _tick_features(view, keep)]) if keep < n else \
                was[first - was_first:]
            tab[0] = (shape, (first, feat))
            return feat
    feat = _tick_features(view)
    tab[0] = (shape, (first, feat))
    return feat


# how far a tick may sit from the regime's median and still belong to it, per feature (percentage points)
def _bands(th: Thresholds) -> np.ndarray:
    return np.array([th.regime_band_util_pct, th.regime_band_minmax_pct, th.regime_band_minmax_pct,
                     th.regime_band_mem_pct, th.regime_band_cpu_pct, th.regime_band_disk_pct,
                     th.regime_band_iowait_pct])
_GPU_COLS = 4  # the first four features are the cards' own (GPU-Util, min, max, memory share); the rest the host's


def _in_band_split(feat: np.ndarray, ref: np.ndarray, bands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tick in band on every feature, tick in band on the cards' own features)."""
    diff = np.abs(feat - ref)
    ok = (diff <= bands) | np.isnan(diff)
    return ok.all(axis=1), ok[:, :_GPU_COLS].all(axis=1)


def _members(ok: np.ndarray, gpu_ok: np.ndarray, max_blip: int) -> np.ndarray:
    """``ok`` with short host-only blips filled in.

    A run of ticks whose cards stay in band but whose host figures leave it for fewer than ``max_blip``
    ticks, after an in-band tick (and before one, or at the very end), still belongs to the regime: one tick
    of a disk at 100 % (a log flush, the recorder's own write) or a CPU spike is noise, not a phase. Blips of
    the cards' own figures are never filled in: a GPU-Util excursion may be the burst of a sawtooth.
    """
    out = ok.copy()
    # the runs of ticks out of band, found with numpy (a walk over every tick of the window in Python was 2 %
    # of a verdict); the runs themselves are few
    edges = np.diff(np.concatenate(([False], ~ok, [False])).view(np.int8))
    starts, ends = np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()
    for i, j in zip(starts, ends, strict=True):
        if 0 < i and j - i < max_blip and gpu_ok[i:j].all():
            out[i:j] = True
    return out


def nanmedian0(a: np.ndarray) -> np.ndarray:
    """``np.nanmedian(a, axis=0)`` of a (T, K) float array, the same values: per column the middle of its
    sorted non-NaN values (the two middle ones added and halved for an even count, as numpy does), NaN
    where a column has none, and no warning. numpy takes a masked-array path for short inputs that cost
    0.3 ms a call (7 % of ``diagnose DIR --summary``); this is a sort and a gather."""
    if a.shape[0] == 0:
        return np.full(a.shape[1], np.nan)
    s = np.sort(a, axis=0)  # NaN sorts last
    cnt = a.shape[0] - np.count_nonzero(np.isnan(a), axis=0)
    cols = np.arange(a.shape[1])
    with np.errstate(invalid="ignore", over="ignore"):
        med: np.ndarray = (s[np.maximum((cnt - 1) // 2, 0), cols] + s[cnt // 2, cols]) / 2.0 + 0.0  # -0 as numpy: 0
    med[cnt == 0] = np.nan
    return med


def _longest_run(mask: np.ndarray) -> int:
    longest = run = 0
    for v in mask:
        run = run + 1 if v else 0
        longest = max(longest, run)
    return longest


@dataclass(frozen=True, slots=True)
class JobSpan:
    """Where the current job begins in the window, from the GPU processes NVML lists.

    ``start``: the first tick after the newest tick held by *other* processes (a different job, whose pids
    share none with the current one); 0 when no such tick is in reach (one job all along, or no process
    information). ``appeared``: the first tick at or after ``start`` with a process on a card (None: none).
    ``first_kernel``: the first tick from ``appeared`` on where a kernel ran (SM activity ≥ ``sm_fed_pct`` or
    GPU-Util ≥ ``idle_util_pct``); None: not one yet, the job is starting.
    ``running_from``: the first tick by which every card holding one of its processes had run a kernel (ranks
    start up at their own pace); ``first_kernel`` where some card has run none yet.
    """

    start: int = 0
    appeared: int | None = None
    first_kernel: int | None = None
    running_from: int | None = None  # the first tick by which every card the job uses had run a kernel

    def starting(self, n: int) -> bool:
        """Its processes appeared inside the window (of ``n`` ticks) and it does not run yet: no kernel since
        (imports, CUDA context, model build), or on the tick where the last of the cards it uses ran its first
        kernel (that tick is part start-up)."""
        if self.appeared is None or self.appeared == 0 or self.first_kernel == self.appeared:
            return False  # a job that ran kernels from its first tick on was already running (listed late)
        return self.running_from is None or (n - 1) - self.running_from < 1


def _recurring(trace: np.ndarray, need: int) -> np.ndarray:
    """(T, G): the ticks on which a card shows SM activity for the ``need``-th time or later: kernels too faint
    for ``sm_fed_pct`` that come back tick after tick are a loop's steps, not a start-up's initialisation
    (real 2-thread CPU model part feeding a tiny MLP: 0.01-0.02 % on every 2 s tick, every other 0.5 s tick;
    the real start-ups showed such faint ticks once or twice, just before their first kernel)."""
    out: np.ndarray = (np.cumsum(trace, axis=0) >= need) & trace
    return out


_PID, _CARD = attrgetter("pid"), attrgetter("gpu_index")


def job_span(view: WindowView, th: Thresholds, reach: int) -> JobSpan:
    """The current job's span over the last ``reach`` ticks (bounded: process lists are converted lazily
    offline, and nothing older than the judged stretch plus its look-back is read)."""
    n = view.n
    lo = max(0, n - reach)
    procs = view.procs[-(n - lo):] if len(view.procs) >= n - lo else list(view.procs)
    off = n - len(procs)  # procs are aligned to the newest tick
    current: frozenset[int] = frozenset()
    cards: set[int] = set()
    start = 0
    appeared: int | None = None
    tab = tickmemo.table(view.memo, "pids, cards")  # each tick's sets, made once while it is in the window
    for k in range(len(procs) - 1, -1, -1):
        tick = procs[k]
        if not tick:
            continue
        hit = tab.get(id(tick))
        if hit is None or hit[0] is not tick:
            # map in C: this walk over the look-back's ticks was 6 % of a verdict
            hit = (tick, (frozenset(map(_PID, tick)), frozenset(map(_CARD, tick))))
            tickmemo.store(tab, tick, hit[1])
        pids, on_cards = hit[1]
        if current and pids.isdisjoint(current):
            start = off + k + 1  # the newest tick of another job: the current one begins after it
            break
        current = pids
        cards.update(on_cards)
        appeared = off + k
    tickmemo.prune(tab, procs)
    if appeared is None:
        return JobSpan(start)
    sm = view.gpu["sm_active_pct"][appeared:]
    util = view.gpu["util_pct"][appeared:]
    # (T, G): a kernel ran. Tiny kernels read SM 0.0 at GPU-Util 20-31 % (field notes), and copies alone
    # (the model moved to the card) read GPU-Util 1-4 %: either figure above its floor counts
    with np.errstate(invalid="ignore"):
        kernel = (sm >= th.sm_fed_pct) | (util >= th.idle_util_pct)
        kernel |= _recurring(sm > th.sm_trace_pct, int(th.sm_trace_ticks))
    any_hits = np.flatnonzero(kernel.any(axis=1))
    if not any_hits.size:
        return JobSpan(start, appeared, None, None)
    first = appeared + int(any_hits[0])
    firsts: list[int] = []  # each of the job's cards: its first kernel
    # per card, whether it ran a kernel and its first kernel's tick: one call for all cards
    ran: list[bool] = np.asarray(kernel.any(axis=0)).tolist()
    first_hit: list[int] = np.asarray(kernel.argmax(axis=0)).tolist()
    for j, idx in enumerate(view.gpu_indexes):
        if idx in cards:
            if not ran[j]:  # a card of the job has run none yet: the job runs from its first kernel anywhere
                return JobSpan(start, appeared, first, first)
            firsts.append(appeared + first_hit[j])
    return JobSpan(start, appeared, first, max(firsts, default=first))


def judged_span(view: WindowView, th: Thresholds, dt: float, floor: int = 0,
                running_from: int | None = None) -> tuple[int, bool, int]:
    """Index of the first judged tick, whether the judged stretch is a fresh steady regime, and (for a fresh
    one) the longest earlier run in its band, in ticks: the part of the block that a cycle's phase could also
    have made, so offline readers back-date the regime only over what came after it.

    A *step* (a change of level that then holds) is an event of its own: after ``max(regime_min_s, 3 ticks)``
    in a band around the new level, the block at the end is judged alone, so 20 s of 99 % followed by 20 s of
    20 % is not averaged into one 60 % "sawtooth". What must not be read as a step is the low (or high)
    phase of a cycle: the block counts only when it is longer by half than every earlier run in the same band
    over the ``2 * recent_s`` before it. A cycle whose period fits in that look-back has had a run just as long
    in it (its previous phase); a new regime has not. The look-back is bounded so that an unrelated job at a
    similar level a minute ago does not veto today's step. A run cut by the start of the window has an
    unknown length: a block in its band is not called a new regime until that run has left the look-back.
    Host-only blips shorter than the block's minimum length do not break the block (see :func:`_members`).

    ``floor`` (:func:`job_span`): the first tick of the current job. The look-back does not reach before it:
    an earlier job at the same level (real `h200x2-stuck`: card 0 spinning while card 1 idles, then a new job
    with the roles swapped, 24 s later) is not a phase of this one, and a run that began with the job has a
    known length. ``running_from``: a block that holds the job's start-up (a card that has run no kernel yet)
    begins only when every card runs, so a rank still starting up is not read as an idle card.
    """
    n = view.n
    recent = max(3, int(math.ceil(th.recent_s / dt)))
    start = max(0, n - recent)
    m_min = max(3, int(math.ceil(th.regime_min_s / dt)))
    if n - start <= m_min:
        return start, False, 0
    feat = _features(view)
    tail = feat[n - m_min :]
    if np.isnan(tail).all():
        return start, False, 0
    ref = nanmedian0(tail)  # a feature missing everywhere stays NaN
    ok, gpu_ok = _in_band_split(feat, ref, _bands(th))
    member = _members(ok, gpu_ok, m_min)
    if not member[n - m_min :].all():
        return start, False, 0
    # the steady block at the end
    k = n - m_min
    while k > 0 and member[k - 1]:
        k -= 1
    block = n - k
    if k <= start:  # steady over the whole recent stretch: judge the recent stretch
        return start, False, 0
    # is it a new regime, or one more phase of a cycle seen before? compare with earlier runs in band
    lo = max(0, floor, k - 2 * recent)  # and not before the job began: another job's runs say nothing of this one
    longest = _longest_run(member[lo:k])
    if lo == 0 and member[0]:
        # a run that began before the first tick: its length is unknown, so it cannot be outlasted
        longest = max(longest, block)
    # half as long again as the longest such run before: the cycle's low phase jitters, a new regime does not end
    if block > 1.5 * longest:
        if running_from is not None and k < running_from:
            # a new job's block starts once every card runs: its start-up (no kernel yet) is a phase of its own
            k = running_from
            if n - k < m_min:
                return start, False, 0
        return k, True, longest
    return start, False, 0
