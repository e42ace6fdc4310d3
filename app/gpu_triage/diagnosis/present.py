"""What the screen shows now, and whether a verdict's evidence agrees with it.

A verdict is judged over a stretch (the recent ``recent_s``, or a fresh regime) and the tracker may hold it
for ``hold_s`` after the raw verdict moved on, while the dashboard's cards, cores and disks show the newest
ticks. Evidence that those numbers contradict ("card 0 holds 55 % of its memory" beside 1.7G/140G) costs the
verdict its trust, so every figure a shown fact rests on (``Fact.metric``/``value``/``cards``) is checked
against the same figure over the *present*: the last ``hold_s`` of the window (at least 3 ticks), the time
the tracker takes to confirm a change.

A figure agrees with the present when it lies within the range the present ticks show for it, widened by
the metric's tolerance: the engine's own regime bands (what it counts as "the same level"), one for counts
of cores and workers, a factor of four for link rates (copies come in bursts). A range rather than a mean,
so a sawtooth's average agrees with a present that holds a stall and a burst. Figures that are not on the
screen (periods, peaks "up to", the job's own clock, times) are not checked.

:func:`on_screen` is the one rule every reader of the tracker applies (dashboard, exporter, recorder,
``diagnose``): the held verdict stays while its figures agree with the present; when they do not, a raw
verdict that agrees is shown with a first line saying the verdict is changing and from what; when neither
agrees (the raw verdict's stretch still holds the old regime), the contradicted lines are replaced by what
the screen reads and the advice is withheld until a verdict catches up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_triage.diagnosis.engine import COLLECTING, Verdict
from gpu_triage.diagnosis.facts import Fact, link_traffic
from gpu_triage.diagnosis.patterns import nanmean
from gpu_triage.diagnosis.span import tick_seconds
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.verdict import collecting
from gpu_triage.units import fmt_rate
from gpu_triage.window import WindowView

CHANGING = "verdict_changing"  # the metric of the first line of a verdict shown while the verdict changes
RATE = "bytes/s"  # a Check's unit for rates, written by units.fmt_rate


def present_ticks(view: WindowView, th: Thresholds, verdict: Verdict | None = None) -> int:
    """How many of the newest ticks are "the present" for ``verdict``: ``hold_s``, at least 3 ticks, and for a
    sawtooth slower than the tick one period (its judged stretch when it has no steady one): a cycle's
    average is not contradicted by the phase it is in now."""
    dt = tick_seconds(view)
    span = th.hold_s
    if verdict is not None and verdict.pattern == "sawtooth" and "tick_s" not in _metrics(verdict):
        cycle = verdict.period_s or verdict.facts.get("judged_s") or th.recent_s
        span = max(span, min(cycle, th.recent_s))
    # rounded, not ceiled: a recorded interval of 1.997 s must not make 6 s four ticks on one tick and three on
    # the next
    return max(1, min(view.n, max(3, round(span / dt))))


def _metrics(verdict: Verdict) -> set[str]:
    return {str(f.get("metric")) for f in verdict.evidence_facts}


def _cols(view: WindowView, cards: tuple[int, ...] | list[int]) -> list[int]:
    cols = [view.gpu_indexes.index(c) for c in cards if c in view.gpu_indexes]
    return cols or list(range(view.n_gpus))


Reader = Callable[[WindowView, slice, list[int], Thresholds], np.ndarray]


def _gpu(field: str) -> Reader:
    return lambda v, s, cols, th: v.gpu[field][s][:, cols]


def _mem_frac(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(v.gpu["mem_used_bytes"][s][:, cols] / v.gpu["mem_total_bytes"][s][:, cols])


def _spread(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    u = v.gpu["util_pct"][s][:, cols]
    with np.errstate(invalid="ignore"):
        return np.asarray(np.fmax.reduce(u, axis=1) - np.fmin.reduce(u, axis=1)) if u.size else u


def _per_tick(a: np.ndarray, how: Callable[[np.ndarray], float],
              rows: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Per row of ``a``: ``how`` of its non-NaN values, NaN where it has none. ``rows`` computes the same for
    every row at once on rows without NaN (a C-contiguous copy: each row added as the 1-D row is, so the same
    values); only rows with a NaN are walked in Python (a walk over every row was a third of a check)."""
    nan = np.isnan(a)
    out = np.full(a.shape[0], np.nan)
    if not a.shape[1]:
        return out
    holes = np.logical_or.reduce(nan, axis=1)
    whole = ~holes
    if whole.any():
        out[whole] = rows(a[whole])
    for i in np.flatnonzero(holes).tolist():
        keep = ~nan[i]
        if keep.any():
            out[i] = how(a[i][keep])
    return out


def _cpu_mean(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    return _per_tick(v.cpu[s], lambda r: float(r.mean()), lambda a: np.add.reduce(a, axis=1) / a.shape[1])


def _cores_busy(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    return _per_tick(v.cpu[s], lambda r: float(r.sum() / 100.0), lambda a: np.add.reduce(a, axis=1) / 100.0)


def _cores_pegged(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    peg = th.core_pegged_pct
    return _per_tick(v.cpu[s], lambda r: float(np.count_nonzero(r >= peg)),
                     lambda a: np.count_nonzero(a >= peg, axis=1).astype(float))


def _disk(field: str) -> Reader:
    return lambda v, s, cols, th: _per_tick(v.disk[field][s], lambda r: float(r.max()),
                                            lambda a: np.maximum.reduce(a, axis=1))


def _procs(v: WindowView, s: slice) -> list[list[Any]]:
    n = v.n
    lo = range(n)[s].start
    if len(v.procs) != n:  # aligned to the newest tick
        off = n - len(v.procs)
        return [v.procs[k - off] if 0 <= k - off < len(v.procs) else [] for k in range(lo, n)]
    return list(v.procs[lo:])


def _main_cpu(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    """The busiest GPU process's CPU % per tick; where no process is listed, at most what the cores did."""
    cores = _cores_busy(v, s, cols, th) * 100.0
    out = []
    for tick in _procs(v, s):
        cpu = [float(p.cpu_pct) for p in tick if p.cpu_pct is not None]
        out.append(max(cpu) if cpu else np.nan)
    a = np.array(out, dtype=float)
    return a if not np.isnan(a).all() else np.column_stack([np.zeros_like(cores), cores])


def _workers_pegged(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    out = [float(sum(1 for p in tick for c in p.workers_cpu_pct if c is not None and c >= th.core_pegged_pct))
           if tick else np.nan for tick in _procs(v, s)]
    return np.array(out, dtype=float)


def _link(v: WindowView, s: slice, cols: list[int], th: Thresholds) -> np.ndarray:
    return link_traffic({k: a[s][:, cols] for k, a in v.gpu.items()})


@dataclass(frozen=True, slots=True)
class Check:
    read: Reader
    widen: Callable[[float, float, Thresholds, WindowView], tuple[float, float]]
    unit: str = ""  # how the present reading is written: " %", " cores", ..., RATE (units.fmt_rate)
    scale: float = 1.0
    # a host figure the engine reads over the ticks where the GPU waits (facts.stall_ticks): read where the
    # screen shows the cards waiting. Not the links: a copy runs beside the kernels, in the ticks between
    waits: bool = False


def waiting_ticks(view: WindowView, s: slice, th: Thresholds) -> np.ndarray:
    """Which present ticks show the GPU waiting, as a reader of the screen sees it: the cards' mean GPU-Util
    under ``stall_util_pct``; where none is, under ``high_util_pct`` (the engine's stall ticks); else all.
    A host figure "while the GPU waits" must be seen on those ticks: a process at 100 % of a core while the
    cards idle is contradicted by a screen whose idle cards sit beside an idle process."""
    util = view.gpu["util_pct"][s]
    # each tick's card mean in one call: numpy's nanmean of each row, the same values (patterns.nanmean)
    per_tick = nanmean(util, axis=1) if util.shape[1] else np.full(util.shape[0], np.nan)
    with np.errstate(invalid="ignore"):
        for limit in (th.stall_util_pct, th.high_util_pct):
            mask = per_tick < limit
            if mask.any():
                return np.asarray(mask)
    return np.ones(per_tick.shape[0], dtype=bool)


def _band(name: str, scale: float = 1.0) -> Callable[[float, float, Thresholds, WindowView], tuple[float, float]]:
    return lambda lo, hi, th, v: (lo - getattr(th, name) * scale, hi + getattr(th, name) * scale)


def _plus_one(lo: float, hi: float, th: Thresholds, v: WindowView) -> tuple[float, float]:
    return lo - 1.0, hi + 1.0


def _cores_band(lo: float, hi: float, th: Thresholds, v: WindowView) -> tuple[float, float]:
    tol = th.regime_band_cpu_pct / 100.0 * max(1, v.cpu.shape[1])
    return lo - tol, hi + tol


def _await(lo: float, hi: float, th: Thresholds, v: WindowView) -> tuple[float, float]:
    return lo / 2 - th.await_ms, hi * 2 + th.await_ms


def _rate(lo: float, hi: float, th: Thresholds, v: WindowView) -> tuple[float, float]:
    # copies come in bursts a tick's mean smears: the same order of magnitude agrees
    return lo / 4 - th.link_quiet_bytes_per_s, hi * 4 + th.link_quiet_bytes_per_s


# every metric a fact may rest on that the screen shows; the others (periods, peaks, the job's clock, times)
# are about the judged stretch as a whole and have no present reading to disagree with
CHECKS: dict[str, Check] = {
    "gpu_util_mean_pct": Check(_gpu("util_pct"), _band("regime_band_util_pct"), " %"),
    "sm_active_mean_pct": Check(_gpu("sm_active_pct"), _band("regime_band_util_pct"), " %"),
    "gpu_util_spread_pct": Check(_spread, _band("regime_band_util_pct"), " %"),
    "gpu_mem_used_frac": Check(_mem_frac, _band("regime_band_mem_pct", 0.01), " %", 100.0),
    "cpu_busy_pct": Check(_cpu_mean, _band("regime_band_cpu_pct"), " %", waits=True),
    "cpu_cores_busy": Check(_cores_busy, _cores_band, " cores", waits=True),
    "cpu_cores_pegged": Check(_cores_pegged, _plus_one, "", waits=True),
    "iowait_pct": Check(lambda v, s, c, th: v.iowait[s], _band("regime_band_iowait_pct"), " %", waits=True),
    "disk_busy_pct": Check(_disk("busy_pct"), _band("regime_band_disk_pct"), " %", waits=True),
    "disk_await_ms": Check(_disk("await_ms"), _await, " ms"),  # one fsync's tick carries a stretch's mean
    "main_process_cpu_pct": Check(_main_cpu, _band("regime_band_cpu_pct"), " % of a core", waits=True),
    "workers_pegged": Check(_workers_pegged, _plus_one, "", waits=True),
    "link_bytes_per_s": Check(_link, _rate, RATE),
    "link_stall_bytes_per_s": Check(_link, _rate, RATE),
    "pcie_rx_bytes_per_s": Check(_gpu("pcie_rx_bytes_per_s"), _rate, RATE),
}


@dataclass(frozen=True, slots=True)
class Contradiction:
    """A shown fact whose figure lies outside what the screen reads for it over the present ticks."""

    fact: dict[str, Any]  # the fact as the verdict carries it (``Fact.as_dict``)
    low: float  # the present's lowest and highest reading of the same figure
    high: float

    def text(self) -> str:
        """The present reading, written as the fact's figure is ("card 0 memory now 1 %")."""
        check = CHECKS[str(self.fact["metric"])]
        lo, hi = self.low * check.scale, self.high * check.scale
        if check.unit == RATE:
            a, b = fmt_rate(lo), fmt_rate(hi)
            now = a if a == b else f"{a}..{b}"
        else:
            now = f"{lo:.0f}{check.unit}" if f"{lo:.0f}" == f"{hi:.0f}" else f"{lo:.0f}..{hi:.0f}{check.unit}"
        return f"{_NAMES.get(str(self.fact['metric']), self.fact['metric'])} now {now}"


_NAMES = {
    "gpu_util_mean_pct": "GPU-Util", "sm_active_mean_pct": "SM activity", "gpu_util_spread_pct": "cards' spread",
    "gpu_mem_used_frac": "memory in use", "cpu_busy_pct": "CPU", "cpu_cores_busy": "CPU",
    "cpu_cores_pegged": "pegged cores", "iowait_pct": "iowait", "disk_busy_pct": "busiest disk",
    "disk_await_ms": "disk await", "main_process_cpu_pct": "training process CPU",
    "workers_pegged": "pegged DataLoader workers", "link_bytes_per_s": "links",
    "link_stall_bytes_per_s": "links", "pcie_rx_bytes_per_s": "PCIe host-to-device",
}


def present_range(metric: str, cards: tuple[int, ...] | list[int], view: WindowView, th: Thresholds,
                  n: int) -> tuple[float, float] | None:
    """(lowest, highest) reading of ``metric`` over the last ``n`` ticks (:func:`present_ticks`) on
    ``cards`` (all when empty); None when the screen has no such figure or reads none of it."""
    check = CHECKS.get(metric)
    if check is None or view.n == 0:
        return None
    s = slice(view.n - n, view.n)
    a = np.asarray(check.read(view, s, _cols(view, cards), th), dtype=float)
    if check.waits and a.ndim and a.shape[0] == n:
        a = a[waiting_ticks(view, s, th)]
    if not a.size or np.isnan(a).all():
        return None
    return float(np.nanmin(a)), float(np.nanmax(a))


def contradictions(verdict: Verdict, view: WindowView, th: Thresholds) -> list[Contradiction]:
    """The verdict's evidence facts that the present ticks of ``view`` contradict."""
    if verdict.pattern == COLLECTING:
        return []  # its figures are the newest tick's own
    out: list[Contradiction] = []
    n = present_ticks(view, th, verdict)
    for fact in verdict.evidence_facts:
        metric, value = fact.get("metric"), fact.get("value")
        if metric not in CHECKS or value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        got = present_range(str(metric), tuple(fact.get("cards") or ()), view, th, n)
        if got is None:
            continue
        lo, hi = CHECKS[str(metric)].widen(got[0], got[1], th, view)
        if not lo <= float(value) <= hi:
            out.append(Contradiction(fact, *got))
    return out


def _name(v: Verdict) -> str:
    return f"{v.pattern} · {v.bottleneck}"


def _changing(to: Verdict | None, held: Verdict, seen_s: float | None, th: Thresholds) -> Fact:
    if to is None:
        return Fact(f"changing? the numbers on screen have moved off {_name(held)}: no advice until a verdict "
                    "fits them", CHANGING, 1.0)
    if to.pattern == held.pattern:
        new, old = to.bottleneck, held.bottleneck
    elif to.bottleneck == held.bottleneck:
        new, old = to.pattern, held.pattern
    else:
        new, old = _name(to), _name(held)
    if seen_s is None:
        seen = ""
    elif seen_s < 0.5:
        seen = f" (new on this tick; the hold is {th.hold_s:.0f} s)"
    else:
        seen = f" ({new} seen {seen_s:.0f} s of the {th.hold_s:.0f} s hold)"
    return Fact(f"changing: {new} ← {old} held{seen}", CHANGING, 1.0)


def _with_lines(v: Verdict, first: list[Fact], drop: list[Contradiction], keep_advice: bool) -> Verdict:
    gone = {id(c.fact): c for c in drop}
    facts: list[dict[str, Any]] = [f.as_dict() for f in first]
    for fact in v.evidence_facts:
        c = gone.get(id(fact))
        facts.append(fact if c is None else Fact(c.text(), None, None, tuple(fact.get("cards") or ())).as_dict())
    return dataclasses.replace(
        v, evidence=[str(f["text"]) for f in facts], evidence_facts=facts,
        advice=list(v.advice) if keep_advice else [],
        destructive_advice=list(v.destructive_advice) if keep_advice else [],
        facts={**v.facts, CHANGING: 1.0},
    )


def collecting_now(view: WindowView, th: Thresholds, first: Verdict | None = None,
                   seen_s: float | None = None) -> Verdict:
    """The warm-up verdict for the newest tick: the time collected so far (never rounded up to the warm-up it
    has not reached) and, once a first verdict waits for its hold, which one."""
    dt = tick_seconds(view)
    v = collecting(view, dt, th)
    have = view.n * dt
    shown = f"{have:.0f}" if round(have) < th.warmup_s or have >= th.warmup_s else f"{math.floor(have * 10) / 10:.1f}"
    if first is None or first.pattern == COLLECTING:
        line = f"collecting ({shown} s of {th.warmup_s:.0f} s): no verdict before the window can support one"
    else:
        what = _name(first) if first.bottleneck == "none" else first.bottleneck
        seen = f" seen {seen_s:.0f} s" if seen_s is not None else ""
        line = f"collecting ({shown} s): first verdict {what}{seen}, shown once it has held {th.hold_s:.0f} s"
    facts = [{**v.evidence_facts[0], "text": line, "value": round(have, 3)}, *v.evidence_facts[1:]]
    return dataclasses.replace(v, evidence=[str(f["text"]) for f in facts], evidence_facts=facts)


def on_screen(shown: Verdict, raw: Verdict, view: WindowView, th: Thresholds, seen_s: float | None = None) -> Verdict:
    """The verdict to show beside ``view``'s numbers: ``shown`` (the tracker's held verdict) while its
    figures agree with the present; else the raw verdict, saying it is changing, when its figures agree;
    else the contradicted lines replaced by the present readings and no advice. ``seen_s``: how long the
    raw verdict's pair has been seen (the tracker's candidate), for the "changing" line."""
    if view.n == 0 or shown.facts.get("judged_s") is None and shown.pattern != COLLECTING:
        return shown  # no-data verdicts: nothing to compare
    if shown.pattern == COLLECTING:
        return collecting_now(view, th, raw, seen_s)
    bad = contradictions(shown, view, th)
    if not bad:
        return shown
    if raw.key != shown.key and raw.pattern != COLLECTING:
        raw_bad = contradictions(raw, view, th)
        return _with_lines(raw, [_changing(raw, shown, seen_s, th)], raw_bad, keep_advice=not raw_bad)
    return _with_lines(shown, [_changing(None, shown, None, th)], bad, keep_advice=False)
