"""diagnose(): a window of ticks in, one verdict out. Pure: no I/O, no clock, no globals.

What is judged: the *current regime*, not the whole window. A 5-minute window averaged would take minutes to
notice a change, so the levels and causes are read over the last ``recent_s`` seconds; and if the end of
that stretch is a steady block (a step: a new level held for ``max(regime_min_s, 3 ticks)``) longer by half
than any run in its band over the ``2 * recent_s`` before it (so it is not just the low phase of a cycle),
only that block is judged (see :func:`judged_span`). Periods are looked
for in the judged stretch and, when that stretch is short, in the whole window too.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from gpu_triage.diagnosis.advice import advise
from gpu_triage.diagnosis.causes import find_cause, host_facts, proc_facts
from gpu_triage.diagnosis.job import apply_job
from gpu_triage.diagnosis.patterns import CardShape, across_cards, autoperiods, card_shapes, nanmean
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.window import WindowView


@dataclass(slots=True)
class Verdict:
    pattern: str
    bottleneck: str
    gpus: list[int]
    confidence: float
    evidence: list[str]
    advice: list[str]
    period_s: float | None = None
    duty: float | None = None
    facts: dict[str, float] = field(default_factory=dict)
    per_gpu: dict[int, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.pattern, self.bottleneck)


def no_data_verdict(reason: str, facts: dict[str, float] | None = None) -> Verdict:
    return Verdict("idle", "none", [], 0.1, [reason], [], facts=facts or {})


def tick_seconds(view: WindowView) -> float:
    """The tick length: median of the recorded intervals, else of the timestamps' steps, else 2 s."""
    iv = view.interval_s[~np.isnan(view.interval_s)] if view.interval_s.size else view.interval_s
    if iv.size and float(np.median(iv)) > 0:
        return float(np.median(iv))
    if view.t.size >= 2:
        d = np.diff(view.t)
        d = d[d > 0]
        if d.size:
            return float(np.median(d))
    return 2.0


def _tick_features(view: WindowView) -> np.ndarray:
    """Per tick (T, 7): GPU-Util, min, max inside tick (card means), memory share, CPU mean, busiest disk, iowait."""
    g = view.gpu
    util = nanmean(g["util_pct"], axis=1)
    umin = nanmean(g["util_min_pct"], axis=1)
    umax = nanmean(g["util_max_pct"], axis=1)
    umin = np.where(np.isnan(umin), util, umin)
    umax = np.where(np.isnan(umax), util, umax)
    with np.errstate(invalid="ignore", divide="ignore"):
        mem = nanmean(g["mem_used_bytes"] / g["mem_total_bytes"], axis=1) * 100.0
    cpu = nanmean(view.cpu, axis=1) if view.cpu.shape[1] else np.full(view.n, np.nan)
    busy = view.disk["busy_pct"]
    disk = np.nanmax(np.where(np.isnan(busy), -1.0, busy), axis=1) if busy.shape[1] else np.full(view.n, np.nan)
    disk = np.where(disk < 0, np.nan, disk)
    return np.column_stack([util, umin, umax, mem, cpu, disk, view.iowait])


# how far a tick may sit from the regime's median and still belong to it, per feature (percentage points)
_BANDS = np.array([15.0, 25.0, 25.0, 5.0, 20.0, 30.0, 15.0])
_GPU_COLS = 4  # the first four features are the cards' own (GPU-Util, min, max, memory share); the rest the host's


def _in_band(feat: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return _in_band_split(feat, ref)[0]


def _in_band_split(feat: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tick in band on every feature, tick in band on the cards' own features)."""
    diff = np.abs(feat - ref)
    ok = (diff <= _BANDS) | np.isnan(diff)
    return ok.all(axis=1), ok[:, :_GPU_COLS].all(axis=1)


def _members(ok: np.ndarray, gpu_ok: np.ndarray, max_blip: int) -> np.ndarray:
    """``ok`` with short host-only blips filled in.

    A run of ticks whose cards stay in band but whose host figures leave it for fewer than ``max_blip``
    ticks, after an in-band tick (and before one, or at the very end), still belongs to the regime: one tick of a disk at 100 % (a log flush, the
    recorder's own write) or a CPU spike is noise, not a phase. Blips of the cards' own figures are never
    filled in: a GPU-Util excursion may be the burst of a sawtooth.
    """
    out = ok.copy()
    n = ok.size
    i = 0
    while i < n:
        if ok[i]:
            i += 1
            continue
        j = i
        while j < n and not ok[j]:
            j += 1
        if 0 < i and j - i < max_blip and gpu_ok[i:j].all():
            out[i:j] = True
        i = j
    return out


def _longest_run(mask: np.ndarray) -> int:
    longest = run = 0
    for v in mask:
        run = run + 1 if v else 0
        longest = max(longest, run)
    return longest


def judged_span(view: WindowView, th: Thresholds, dt: float) -> tuple[int, bool, int]:
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
unknown length: a block in its band is not called a new regime until that run has left the look-back. Host-only blips shorter than the block's minimum
    length do not break the block (see :func:`_members`).
    """
    n = view.n
    recent = max(3, int(math.ceil(th.recent_s / dt)))
    start = max(0, n - recent)
    m_min = max(3, int(math.ceil(th.regime_min_s / dt)))
    if n - start <= m_min:
        return start, False, 0
    feat = _tick_features(view)
    tail = feat[n - m_min :]
    if np.isnan(tail).all():
        return start, False, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)  # a feature missing everywhere stays NaN
        ref = np.nanmedian(tail, axis=0)
    ok, gpu_ok = _in_band_split(feat, ref)
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
    lo = max(0, k - 2 * recent)
    longest = _longest_run(member[lo:k])
    if lo == 0 and member[0]:
        # a run that began before the first tick: its length is unknown, so it cannot be outlasted
        longest = max(longest, block)
    # half as long again as the longest such run before: the cycle's low phase jitters, a new regime does not end
    if block > 1.5 * longest:
        return k, True, longest
    return start, False, 0


def diagnose(view: WindowView, thresholds: Thresholds, cpu_count: int | None = None) -> Verdict:
    """The verdict for the current state of the window (see the module docstring for what is judged)."""
    th = thresholds
    n = view.n
    if n == 0:
        return no_data_verdict("no ticks yet")
    if view.n_gpus == 0:
        return no_data_verdict("no GPU data: host only (no NVIDIA driver, or no card visible)")
    util_all = view.gpu["util_pct"]
    if np.isnan(util_all).all():
        return no_data_verdict("no GPU data: GPU-Util missing on every card")

    dt = tick_seconds(view)
    start, fresh, prior_run = judged_span(view, th, dt)
    sl = slice(start, n)
    gpu = {k: v[sl] for k, v in view.gpu.items()}
    util, umin, umax = gpu["util_pct"], gpu["util_min_pct"], gpu["util_max_pct"]

    shapes: dict[int, CardShape] = dict(zip(view.gpu_indexes, card_shapes(util, umin, umax, th), strict=True))
    # a short stretch may hold too few cycles: look for the period over the whole window as well
    if not fresh and start > 0:
        todo = [j for j, idx in enumerate(view.gpu_indexes)
                if shapes[view.gpu_indexes[j]].pattern == "sawtooth" and shapes[view.gpu_indexes[j]].period is None
                and not shapes[view.gpu_indexes[j]].fast and not np.isnan(util_all[:, j]).any()]
        if todo:
            for j, p in zip(todo, autoperiods(util_all[:, todo], th.sawtooth_min_acf), strict=True):
                if p is not None:
                    shapes[view.gpu_indexes[j]].period = p
    pattern, cards = across_cards(shapes, th)

    # one card busy and the rest idle: the busy card's own waits are what to explain
    if pattern == "single_card_busy":
        cols = [view.gpu_indexes.index(i) for i in cards]
        focus = {k: v[:, cols] for k, v in gpu.items()}
        focus_idx = list(cards)
    else:
        focus, focus_idx = gpu, view.gpu_indexes
    hf = host_facts(focus, focus_idx, view.cpu[sl], view.iowait[sl], {k: v[sl] for k, v in view.disk.items()},
                    view.disk_names, th, cpu_count)
    others_busy = len([s for s in shapes.values() if s.pattern != "idle"]) > 1
    pf = proc_facts(view.procs[start:] if len(view.procs) == n else view.procs[-(n - start):], th, others_busy)
    sm = gpu["sm_active_pct"]
    sm_per_card = {idx: float(nanmean(sm[:, j])) for j, idx in enumerate(view.gpu_indexes) if idx in focus_idx}
    util_per_card = {idx: s.mean for idx, s in shapes.items() if not math.isnan(s.mean) and idx in focus_idx}
    cause = find_cause(pattern, hf, pf, th, view.n_gpus, sm_per_card, util_per_card)

    # period and duty: from the cards the pattern concerns
    period_s: float | None = None
    duty: float | None = None
    fast = False
    saw = [shapes[i] for i in (cards or list(shapes)) if shapes[i].pattern == "sawtooth"]
    if saw:
        with_p = [s for s in saw if s.period is not None]
        if with_p:
            period_s = float(np.median([s.period.ticks for s in with_p])) * dt  # type: ignore[union-attr]
        fast = any(s.fast for s in saw)
        duties = [s.duty for s in saw if s.duty is not None]
        duty = float(np.median(duties)) if duties else None

    evidence = list(cause.evidence)
    if pattern == "sawtooth":
        if period_s is not None:
            evidence.insert(0, f"sawtooth: period {period_s:.1f} s, busy {duty * 100:.0f} % of it" if duty is not None
                            else f"sawtooth: period {period_s:.1f} s")
        elif fast:
            evidence.insert(0, f"sawtooth faster than the tick ({dt:g} s): min near 0 and max near 100 inside "
                               "each tick while the mean sits between")
        else:
            evidence.insert(0, "GPU-Util swings between stalls and bursts without a steady period")
    elif pattern == "single_card_busy":
        idle_cards = [i for i, s in shapes.items() if s.pattern == "idle"]
        evidence.insert(0, f"card {cards[0]} busy ({shapes[cards[0]].mean:.0f} %) while {len(idle_cards)} "
                           "other cards idle")
    elif pattern == "imbalanced":
        means = {i: s.mean for i, s in shapes.items()}
        hi_i = max(means, key=means.__getitem__)
        lo_i = min(means, key=means.__getitem__)
        evidence.insert(0, f"cards spread: card {hi_i} at {means[hi_i]:.0f} %, card {lo_i} at {means[lo_i]:.0f} %")

    span_s = (n - start) * dt
    confidence = cause.confidence
    if n - start < 3:
        confidence *= 0.5
    elif span_s < 10.0:
        confidence *= 0.8
    if cause.bottleneck == "memory_idle":
        gpus = [hf.mem_card] if hf.mem_card is not None else cards
        # every card holding memory counts
        used, total = gpu["mem_used_bytes"], gpu["mem_total_bytes"]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = nanmean(used / total, axis=0)
        gpus = [idx for j, idx in enumerate(view.gpu_indexes) if frac[j] >= th.mem_held_frac] or gpus
    else:
        gpus = cards

    facts = hf.as_dict()
    facts["period_s"] = float("nan") if period_s is None else period_s
    facts["duty"] = float("nan") if duty is None else duty
    facts["judged_s"] = span_s
    facts["regime_prior_run_s"] = prior_run * dt
    facts["regime_fresh"] = 1.0 if fresh else 0.0
    n_procs = len({p.pid for tick in view.procs[-(n - start):] for p in tick}) if view.procs else 0
    adv = advise(cause.bottleneck, pattern, hf, pf, view.n_gpus, n_procs)
    verdict = Verdict(
        pattern=pattern,
        bottleneck=cause.bottleneck,
        gpus=list(gpus),
        confidence=float(np.clip(confidence, 0.0, 1.0)),
        evidence=evidence,
        advice=adv,
        period_s=period_s,
        duty=duty,
        facts=facts,
        per_gpu={i: s.pattern for i, s in shapes.items()},
    )
    return apply_job(verdict, view, start, th, hf, pf, n_procs)  # the job's own clock, when a source gives it
