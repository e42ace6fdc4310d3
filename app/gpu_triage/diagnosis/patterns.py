"""The shape of GPU-Util: per card and across cards.

A pattern is read from the tick series *and* from the min/max inside each tick (``util_min_pct`` /
``util_max_pct``): a 2 s tick averages a 1 s-on/1 s-off sawtooth into a flat 50 %, but its min near 0 and max
near 100 still show the swing. Periods are found with the autoperiod method (Vlachos, Yu, Castelli, SDM
2005): candidate periods are the peaks of the periodogram, and a candidate is kept only if it sits on a hill
of the autocorrelation, so one lucky value never makes a sawtooth.

Everything here is numpy on (T,) or (T, G) arrays; NaN is "missing".
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.vocab import Pattern

PATTERNS = tuple(p.value for p in Pattern if p is not Pattern.COLLECTING)


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


@overload
def nanmean(a: np.ndarray, axis: None = None) -> float: ...
@overload
def nanmean(a: np.ndarray, axis: int) -> np.ndarray: ...
def nanmean(a: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Mean ignoring NaN, NaN (no warning) where everything is missing.

    For float arrays this is numpy's own ``nanmean`` computation, step for step (copy, NaN -> 0, sum, count of
    non-NaN, divide), so the results are bit-identical; it skips ``warnings.catch_warnings`` and numpy's
    dispatch layers, which were most of its cost (profile: 24 calls per diagnosis, ~1/4 of its time).
    """
    if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)
            mean: np.ndarray | float = np.nanmean(a, axis=axis)
            return mean
    if a.flags.c_contiguous and a.size:
        # most arrays hold no NaN: their plain sum is the sum of numpy's NaN-zeroed copy (a C-contiguous array
        # of the same shape, added in the same order), so sum / count is its mean, bit for bit. A NaN in the
        # sum (a NaN in the values, or inf - inf) sends it the whole way below.
        tot = np.add.reduce(a, axis=axis)
        if axis is None or a.ndim == 1:
            if tot == tot:
                one: float = tot / a.size
                return one
        elif not np.isnan(np.add.reduce(tot, axis=None)):
            fast: np.ndarray = tot / a.shape[axis]
            return fast
    mask = np.isnan(a)
    arr = np.where(mask, 0.0, a)  # numpy's copy + copyto(0, where=NaN) in one call: the same array
    cnt = np.add.reduce(~mask, axis=axis, dtype=np.intp)
    tot = np.add.reduce(arr, axis=axis)
    # no 0/0 to silence: np.errstate's context manager was a tenth of this function's time (ndarray.all()
    # goes through numpy's Python layers too: the ufunc's reduce, or a scalar's truth, costs less)
    if cnt if cnt.ndim == 0 else np.logical_and.reduce(cnt, axis=None):
        avg: np.ndarray | float = np.true_divide(tot, cnt)
        return avg
    with np.errstate(invalid="ignore", divide="ignore"):
        avg = np.true_divide(tot, cnt)
    return avg


def column_nanmeans(a: np.ndarray) -> np.ndarray:
    """``[nanmean(a[:, j]) for j in columns]`` of a (T, G) float array in one call, the same values.

    Not ``nanmean(a, axis=0)``: numpy adds a column's values in a different order along axis 0 than along a
    1-D array (pairwise there), which can change the last bit; the rows of the transposed copy are added as
    the 1-D columns are."""
    return np.asarray(nanmean(np.ascontiguousarray(a.T), axis=1))


def percentiles(a: np.ndarray, qs: Sequence[float], axis: int = 0) -> np.ndarray:
    """``np.percentile(a, qs, axis=axis)`` (method "linear"), the same values: the sorted values at the
    virtual index ``(n - 1) * q / 100`` and numpy's own interpolation between its neighbours (numpy's
    ``_lerp``: ``a + d * t``, or ``b - d * (1 - t)`` from ``t = 0.5``). numpy's Python layers cost ~70 us a
    call on the few values a verdict reads. Arrays with NaN or a negative zero (where the order of equal
    values shows) go to numpy itself."""
    if a.size == 0 or a.dtype.kind != "f" or np.isnan(a).any() or (np.signbit(a) & (a == 0)).any():
        return np.asarray(np.percentile(a, list(qs), axis=axis))
    s = np.sort(a, axis=axis)
    n = a.shape[axis]
    out = []
    for q in qs:
        vi = (n - 1) * np.true_divide(q, 100)
        if vi >= n - 1:
            prev = nxt = -1
        elif vi < 0:
            prev = nxt = 0
        else:
            prev = int(np.floor(vi))
            nxt = prev + 1
        t = vi - prev
        lo, hi = np.take(s, prev, axis=axis), np.take(s, nxt, axis=axis)
        diff = hi - lo
        out.append(hi - diff * (1 - t) if t >= 0.5 else lo + diff * t)
    return np.asarray(out)


@overload
def nanmax(a: np.ndarray, axis: None = None) -> float: ...
@overload
def nanmax(a: np.ndarray, axis: int) -> np.ndarray: ...
def nanmax(a: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Max ignoring NaN, NaN (no warning) where everything is missing."""
    if type(a) is np.ndarray and a.dtype.kind == "f" and a.size:
        # what np.nanmax computes for an ndarray, without its warning machinery (which cost more than this)
        top_: np.ndarray | float = np.fmax.reduce(a, axis=axis)
        return top_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        top: np.ndarray | float = np.nanmax(a, axis=axis) if a.size else float("nan")
        return top


def _refine(peaks: list[int], sp: list[float], ac: list[float], n: int, min_acf: float) -> Period | None:
    """:func:`autoperiods`' refinement of one column's peaks (no NaN in ``sp`` or ``ac``)."""
    best: Period | None = None
    for k in sorted(peaks, key=lambda k: -sp[k])[:3]:
        lo = max(2, n // (k + 1))
        hi = min(n // 2, math.ceil(n / (k - 1)))
        if hi < lo:
            continue
        seg = ac[lo : hi + 1]
        lag = lo + seg.index(max(seg))
        if lag + 1 >= n:
            continue
        a = ac[lag]
        if a >= ac[lag - 1] and a >= ac[lag + 1] and a >= min_acf and (best is None or a > best.acf):
            best = Period(ticks=float(lag), acf=a)
    return best


def autoperiods(x: np.ndarray, min_acf: float) -> list[Period | None]:
    """The dominant period in ticks of each column of ``x`` (T, K, no NaN), or None.

    Candidates: local peaks of the periodogram holding a clear share of the power (at least twice the mean
    bin, and among the three strongest). Each candidate's period ``n/k`` is refined to the highest
    autocorrelation between the neighbouring bins' periods ``n/(k+1)`` and ``n/(k-1)``; it is kept only if
    that lag is a hill (no lower than both neighbours) and the autocorrelation there reaches ``min_acf``.
    At least two whole periods must fit in the series. One FFT call serves every column.
    """
    n, k_cols = x.shape
    out: list[Period | None] = [None] * k_cols
    if n < 6 or k_cols == 0:
        return out
    xc = x - x.mean(axis=0)
    var = (xc * xc).sum(axis=0)
    live = (var > 1e-9 * n) & (np.sqrt(var / n) >= 2.0)  # flat within 2 points of GPU-Util: nothing periodic
    if not live.any():
        return out
    f = np.fft.rfft(xc, 2 * n, axis=0)
    spec = np.abs(np.fft.rfft(xc, axis=0)) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        acf = np.fft.irfft(f * np.conj(f), axis=0)[:n] / var  # biased autocorrelation, 1 at lag 0
    kmax = spec.shape[0] - 1
    ks = np.arange(2, kmax + 1)  # k >= 2: at least two periods in the series
    if ks.size == 0:
        return out
    # the periodogram's peaks of every live column at once (a loop of small numpy calls per column was
    # half of this function's time); the means as a 1-D column's mean adds them (see column_nanmeans)
    cols = np.flatnonzero(live)
    sp_all = spec[:, cols]
    mean_power = np.ascontiguousarray(sp_all[1:].T).mean(axis=1)
    at = sp_all[ks]
    right = np.where((ks + 1 <= kmax)[:, None], sp_all[np.minimum(ks + 1, kmax)], -1.0)
    is_peak = (at >= sp_all[ks - 1]) & (at >= right) & (at >= 2.0 * mean_power)
    ac_live = acf[:, cols]
    if np.isfinite(sp_all).all() and np.isfinite(ac_live).all():
        # the same refinement in Python floats and ints (numpy's scalar arithmetic and argsort/argmax calls
        # on a few values were half of this function's time); exact where nothing is NaN: a stable sort by
        # power, the first highest autocorrelation, the same divisions of small integers
        ks_l = ks.tolist()
        for col, peak_row, sp_col, ac_col in zip(cols.tolist(), is_peak.T.tolist(), sp_all.T.tolist(),
                                                 ac_live.T.tolist(), strict=True):
            out[col] = _refine([k for k, ok in zip(ks_l, peak_row, strict=True) if ok], sp_col, ac_col, n, min_acf)
        return out
    for i, c in enumerate(cols):  # NaN or inf in the spectrum (values out of range): numpy's own order
        out[c] = _refine_numpy(ks[is_peak[:, i]], sp_all[:, i], acf[:, c], n, min_acf)
    return out


def _refine_numpy(peaks: np.ndarray, sp: np.ndarray, ac: np.ndarray, n: int, min_acf: float) -> Period | None:
    """:func:`_refine` in numpy, for a column with NaN or inf (where the order of equal values shows)."""
    best: Period | None = None
    for k in peaks[np.argsort(-sp[peaks], kind="stable")][:3]:
        lo = max(2, int(n // (k + 1)))
        hi = min(n // 2, int(np.ceil(n / (k - 1))))
        if hi < lo:
            continue
        lag = lo + int(np.argmax(ac[lo : hi + 1]))
        if lag + 1 >= n:
            continue
        if ac[lag] >= ac[lag - 1] and ac[lag] >= ac[lag + 1] and ac[lag] >= min_acf:
            if best is None or ac[lag] > best.acf:
                best = Period(ticks=float(lag), acf=float(ac[lag]))
    return best


def _unit(x: float) -> float:
    """``float(np.clip(x, 0.0, 1.0))``: inside (0, 1) the value itself, else numpy's own clip (which settles
    NaN and signed zeros); np.clip's Python layers cost ~8 us a card a verdict."""
    return x if 0.0 < x < 1.0 else float(np.clip(x, 0.0, 1.0))


def card_shapes(util: np.ndarray, umin: np.ndarray, umax: np.ndarray, th: Thresholds) -> list[CardShape]:
    """The pattern of every card (columns of the (T, G) arrays), statistics computed for all cards at once."""
    n_cards = util.shape[1]
    if util.shape[0] == 0:
        return [CardShape("idle", float("nan"), float("nan"), float("nan"), 0.0, None, False, None)] * n_cards
    missing = np.isnan(util)
    if missing.any():
        # rare (a card lost mid-window): the same statistics, one card at a time over its valid ticks
        out = []
        for j in range(n_cards):
            ok = ~missing[:, j]
            if not ok.any():
                out.append(CardShape("idle", float("nan"), float("nan"), float("nan"), 0.0, None, False, None))
            else:
                out.extend(card_shapes(util[ok, j : j + 1], umin[ok, j : j + 1], umax[ok, j : j + 1], th))
        return out
    have_minmax = ~(np.isnan(umin).all(axis=0) | np.isnan(umax).all(axis=0))
    lo = np.where(np.isnan(umin), util, umin)
    hi = np.where(np.isnan(umax), util, umax)
    n_ticks = util.shape[0]
    mean = np.add.reduce(util, axis=0) / n_ticks  # ndarray.mean's steps without its Python layers
    # one call for the three (numpy's percentile costs ~70 us of Python a call; each column's value is
    # computed on its own, so stacking changes none)
    q = percentiles(np.stack([util, hi, lo]), [5, 95], axis=1)
    p5, p95, hi95, lo5 = q[0, 0], q[1, 0], q[1, 1], q[0, 2]
    swing = np.where(have_minmax, hi95 - lo5, p95 - p5)
    top = np.where(have_minmax, hi95, p95)
    # a tick swings when its own min is a stall and its max a burst: a cycle shorter than the tick
    wide = (lo <= th.stall_util_pct) & (hi - lo >= th.sawtooth_min_swing_pct) & (hi >= th.burst_util_pct)
    fast = have_minmax & (np.add.reduce(wide, axis=0, dtype=np.float64) / n_ticks >= 0.5) & (mean >= th.stall_util_pct)
    # bursts and stalls: the ticks swing, or (a 2 s tick blurs a short cycle) the ticks' min/max swing
    # around ticks that themselves reach stalls
    tick_swing = (top >= th.burst_util_pct) & (
        ((p95 - p5) >= th.sawtooth_min_swing_pct)
        | (have_minmax & (swing >= th.sawtooth_min_swing_pct) & (p5 <= th.stall_util_pct))
    )
    periods: list[Period | None] = [None] * n_cards
    cols = np.flatnonzero(tick_swing)
    if cols.size:
        for c, p in zip(cols, autoperiods(util[:, cols], th.sawtooth_min_acf), strict=True):
            periods[c] = p
    out = []
    for j in range(n_cards):
        m, a, b, sw, tp = float(mean[j]), float(p5[j]), float(p95[j]), float(swing[j]), float(top[j])
        if m < th.idle_util_pct and b < th.stall_util_pct:
            out.append(CardShape("idle", m, a, b, sw, None, False, None))
            continue
        duty = _unit(m / tp) if tp > 0 else None
        period = periods[j]
        if period is not None:
            out.append(CardShape("sawtooth", m, a, b, sw, period, False, duty))
        elif fast[j]:
            out.append(CardShape("sawtooth", m, a, b, sw, None, True, duty))
        elif m >= th.high_util_pct:
            out.append(CardShape("steady_high", m, a, b, sw, None, False, None))
        elif b - a >= th.sawtooth_min_swing_pct and b >= th.burst_util_pct and a <= th.stall_util_pct:
            # SageMaker's "fluctuating" (p95 > 70, p5 < 10) without a confirmed period: bursts and stalls
            out.append(CardShape("sawtooth", m, a, b, sw, None, False, float(np.mean(util[:, j] >= (a + b) / 2))))
        else:
            out.append(CardShape("steady_low", m, a, b, sw, None, False, None))
    return out


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
    return _vote(shapes, busy)


def _vote(shapes: dict[int, CardShape], busy: list[int]) -> tuple[str, list[int]]:
    """The busy cards' own patterns vote; ties go to the more alarming shape."""
    votes: dict[str, int] = {}
    for i in busy:
        p = shapes[i].pattern
        votes[p] = votes.get(p, 0) + 1
    pattern = max(votes, key=lambda p: (votes[p], _SEVERITY.get(p, 0)))
    return pattern, sorted(i for i in busy if shapes[i].pattern == pattern)
