"""The shape of GPU-Util: per card and across cards.

A pattern is read from the tick series *and* from the min/max inside each tick (``util_min_pct`` /
``util_max_pct``): a 2 s tick averages a 1 s-on/1 s-off sawtooth into a flat 50 %, but its min near 0 and max
near 100 still show the swing. Periods are found with the autoperiod method (Vlachos, Yu, Castelli, SDM
2005): candidate periods are the peaks of the periodogram, and a candidate is kept only if it sits on a hill
of the autocorrelation, so one lucky value never makes a sawtooth.

Everything here is numpy on (T,) or (T, G) arrays; NaN is "missing".
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from gpu_triage.diagnosis.thresholds import Thresholds

PATTERNS = ("idle", "steady_high", "steady_low", "sawtooth", "single_card_busy", "imbalanced")


@dataclass(slots=True)
class Period:
    """A confirmed period of a series: in ticks, and the autocorrelation at that lag (its strength)."""

    ticks: float
    acf: float


@dataclass(slots=True)
class CardShape:
    """What one card's GPU-Util did over the judged stretch."""

    pattern: str
    mean: float
    p5: float
    p95: float
    swing: float  # p95 of max-inside-tick minus p5 of min-inside-tick (or of the ticks themselves)
    period: Period | None
    fast: bool  # swings inside the ticks: a sawtooth faster than the tick
    duty: float | None


def nanmean(a: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Mean ignoring NaN, NaN (no warning) where everything is missing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanmean(a, axis=axis)


def nanpct(a: np.ndarray, q: float, axis: int | None = None) -> np.ndarray | float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanpercentile(a, q, axis=axis)


def nanmax(a: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanmax(a, axis=axis) if a.size else float("nan")


def autoperiod(x: np.ndarray, min_acf: float) -> Period | None:
    """The dominant period of ``x`` in ticks, or None.

    Candidates: local peaks of the periodogram holding a clear share of the power (at least twice the mean
    bin, and among the three strongest). Each candidate's period ``n/k`` is refined to the nearest local
    maximum of the autocorrelation between the neighbouring bins' periods ``n/(k+1)`` and ``n/(k-1)``; it is
    kept only if that lag is a hill (higher than both neighbours) and the autocorrelation there reaches
    ``min_acf``. At least two whole periods must fit in the series.
    """
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    n = x.shape[0]
    if n < 6:
        return None
    x = x - x.mean()
    var = float(np.dot(x, x))
    if var <= 1e-9 * n or np.sqrt(var / n) < 2.0:  # flat within 2 points of GPU-Util: nothing periodic
        return None
    spec = np.abs(np.fft.rfft(x)) ** 2
    spec[0] = 0.0
    # autocorrelation, biased (divided by n) and normalised to 1 at lag 0
    f = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(f * np.conj(f))[:n] / var
    kmax = spec.shape[0] - 1
    candidates: list[int] = []
    mean_power = spec[1:].mean() if kmax >= 1 else 0.0
    for k in range(2, kmax + 1):  # k >= 2: at least two periods in the series
        left = spec[k - 1]
        right = spec[k + 1] if k + 1 <= kmax else -1.0
        if spec[k] >= left and spec[k] >= right and spec[k] >= 2.0 * mean_power:
            candidates.append(k)
    candidates.sort(key=lambda k: -spec[k])
    best: Period | None = None
    for k in candidates[:3]:
        lo = max(2, int(np.floor(n / (k + 1))))
        hi = min(n // 2, int(np.ceil(n / (k - 1))) if k > 1 else n // 2)
        if hi < lo:
            continue
        lags = np.arange(lo, hi + 1)
        lag = int(lags[np.argmax(acf[lags])])
        if lag < 2 or lag + 1 >= n:
            continue
        hill = acf[lag] >= acf[lag - 1] and acf[lag] >= acf[lag + 1]
        if hill and acf[lag] >= min_acf and (best is None or acf[lag] > best.acf):
            best = Period(ticks=float(lag), acf=float(acf[lag]))
    return best


def card_shape(util: np.ndarray, umin: np.ndarray, umax: np.ndarray, th: Thresholds) -> CardShape:
    """The pattern of one card over the judged ticks (``util``, ``umin``, ``umax`` are (T,))."""
    valid = ~np.isnan(util)
    if not valid.any():
        return CardShape("idle", float("nan"), float("nan"), float("nan"), 0.0, None, False, None)
    u = util[valid]
    mean = float(u.mean())
    p5 = float(np.percentile(u, 5))
    p95 = float(np.percentile(u, 95))
    lo = umin[valid]
    hi = umax[valid]
    have_minmax = not (np.isnan(lo).all() or np.isnan(hi).all())
    if have_minmax:
        lo = np.where(np.isnan(lo), u, lo)
        hi = np.where(np.isnan(hi), u, hi)
        swing = float(np.percentile(hi, 95) - np.percentile(lo, 5))
        # a tick swings when its own min is a stall and its max a burst: a cycle shorter than the tick
        wide = (lo <= th.stall_util_pct) & (hi - lo >= th.sawtooth_min_swing_pct) & (hi >= th.burst_util_pct)
        fast = bool(wide.mean() >= 0.5) and mean >= th.stall_util_pct
    else:
        swing = p95 - p5
        fast = False
    if mean < th.idle_util_pct and p95 < th.stall_util_pct:
        return CardShape("idle", mean, p5, p95, swing, None, False, None)

    top = float(np.percentile(hi, 95)) if have_minmax else p95
    # bursts and stalls: the ticks swing, or (a 2 s tick blurs a short cycle) the ticks' min/max swing
    # around ticks that themselves reach stalls
    tick_swing = top >= th.burst_util_pct and (
        (p95 - p5) >= th.sawtooth_min_swing_pct
        or (have_minmax and swing >= th.sawtooth_min_swing_pct and p5 <= th.stall_util_pct)
    )
    period = autoperiod(u, th.sawtooth_min_acf) if tick_swing else None
    duty: float | None = None
    if period is not None:
        duty = float(np.clip(mean / top, 0.0, 1.0)) if top > 0 else None
        return CardShape("sawtooth", mean, p5, p95, swing, period, False, duty)
    if fast:
        duty = float(np.clip(mean / top, 0.0, 1.0)) if top > 0 else None
        return CardShape("sawtooth", mean, p5, p95, swing, None, True, duty)
    if mean >= th.high_util_pct:
        return CardShape("steady_high", mean, p5, p95, swing, None, False, None)
    if p95 - p5 >= th.sawtooth_min_swing_pct and p95 >= th.burst_util_pct and p5 <= th.stall_util_pct:
        # SageMaker's "fluctuating" (p95 > 70, p5 < 10) without a confirmed period: bursts and stalls
        duty = float(np.mean(u >= (p5 + p95) / 2))
        return CardShape("sawtooth", mean, p5, p95, swing, None, False, duty)
    return CardShape("steady_low", mean, p5, p95, swing, None, False, None)


_SEVERITY = {"sawtooth": 3, "steady_low": 2, "steady_high": 1, "idle": 0}


def across_cards(shapes: dict[int, CardShape], th: Thresholds) -> tuple[str, list[int]]:
    """The pattern of the whole machine and the cards it concerns.

    One card busy while every other card is idle is ``single_card_busy`` (every rank on cuda:0, or a job
    that forgot to use the rest); a spread of mean GPU-Util above ``imbalance_pct`` is ``imbalanced``;
    otherwise the cards' own patterns vote (ties go to the more alarming shape).
    """
    if not shapes:
        return "idle", []
    busy = [i for i, s in shapes.items() if s.pattern != "idle"]
    idle = [i for i, s in shapes.items() if s.pattern == "idle"]
    if not busy:
        return "idle", sorted(shapes)
    if len(shapes) >= 2 and len(busy) == 1 and idle:
        return "single_card_busy", busy
    means = np.array([s.mean for s in shapes.values() if not np.isnan(s.mean)])
    if len(shapes) >= 2 and means.size >= 2 and float(means.max() - means.min()) >= th.imbalance_pct:
        lo_cut = float(means.max()) - th.imbalance_pct
        laggards = sorted(i for i, s in shapes.items() if s.mean <= lo_cut)
        return "imbalanced", laggards or busy
    votes: dict[str, int] = {}
    for i in busy:
        p = shapes[i].pattern
        votes[p] = votes.get(p, 0) + 1
    pattern = max(votes, key=lambda p: (votes[p], _SEVERITY.get(p, 0)))
    return pattern, sorted(i for i in busy if shapes[i].pattern == pattern)
