"""``gpu-triage diagnose FILE``: the live diagnosis replayed over a recording, tick by tick.

Each tick goes into a :class:`RollingWindow` of ``window_s`` and is diagnosed exactly as the dashboard would
(:func:`verdicts` also gives the live tracker's shown verdict). Segments do not use the live hysteresis,
which must stay causal and so lags: with the whole recording at hand, the raw verdicts are smoothed in both
directions (:func:`smoothed_keys`) and consecutive equal verdicts merged. The segments cover the trace end
to end with no gap: each ends where the next begins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from gpu_triage.diagnosis.engine import Finding, Verdict, confidence_word
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.worth import Headroom
from gpu_triage.model import HostInfo, Tick
from gpu_triage.offline.judge import MAX_INTERVAL_S, Judged, judge
from gpu_triage.trace.batches import TraceSource


@dataclass(slots=True, kw_only=True)
class Segment(Finding):
    """A stretch of a recording and what the offline reading says of it (the verdict's fields: Finding)."""

    start: datetime  # start of the first tick's interval
    end: datetime  # end of the last tick's interval
    ticks: int = 0
    recorded_headroom: Headroom | None = None  # what the recording stored with the basis tick's verdict

    @property
    def recorded_differs(self) -> bool:
        """The recording stored another headroom than the one computed now (other settings, another version)."""
        r, h = self.recorded_headroom, self.headroom
        return r is not None and (h is None or (r.kind, r.line()) != (h.kind, h.line()))

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "start": _iso(self.start),
            "end": _iso(self.end),
            "pattern": self.pattern,
            "bottleneck": self.bottleneck,
            "gpus": list(self.gpus),
            "confidence": round(self.confidence, 3),
            "confidence_word": confidence_word(self.confidence),
            "evidence": list(self.evidence),
            "evidence_facts": list(self.evidence_facts),
            "advice": list(self.advice),
            "ticks": self.ticks,
            "period_s": self.period_s,
            "duty": None if self.duty is None else round(self.duty, 3),
            "headroom": None if self.headroom is None else self.headroom.as_dict(),
            "recorded_headroom": None if self.recorded_headroom is None else self.recorded_headroom.as_dict(),
        }


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _mode(values: list[str], lo: int, hi: int, own: str) -> str:
    """The most common value of ``values[lo:hi]``; ties keep ``own`` (no change without a majority)."""
    counts: dict[str, int] = {}
    for v in values[lo:hi]:
        counts[v] = counts.get(v, 0) + 1
    best = max(counts.values())
    return own if counts.get(own, 0) == best else max(counts, key=lambda v: (counts[v], v == own))


def smoothed_keys(t: list[float], raws: list[Verdict], thresholds: Thresholds,
                  interval_s: float) -> list[tuple[str, str]]:
    """Non-causal (pattern, bottleneck) per judged tick (``t``: their times, in order; ``interval_s``: the
    time between them): what a reader of the whole recording would say.

    The live tracker must wait ``hold_s`` before believing a change; offline the future is known, so:

    1. **Back-dating**: a raw verdict that judged a fresh regime (span.judged_span: a step held for
       ``max(regime_min_s, 3 ticks)``) also speaks for the ticks it needed to confirm it, up to that length
       back, instead of only from the moment it was confirmed; only for the ticks before the regime was first
       judged alone (the verdicts after that judged it themselves: a reading 20 s into the regime does not
       relabel the 6 s before it). Not further: when a sawtooth stops, its last
       low phase and the idle after it form one block, and only the data after the last burst may say idle;
       and only over the part of the block longer than the longest earlier run in its band, since the first
       ticks of that block looked exactly like one more low phase of the cycle.
       A later verdict overrides an earlier one on the ticks both cover.
    2. **Centred mode filter** of ±``hold_s`` on pattern and on bottleneck separately (as the live tracker
       holds them separately): a flicker shorter than the hold is outvoted by its neighbours on both sides,
       and a real change moves the boundary to where the votes switch, not ``hold_s`` later.
    """
    n = len(t)
    hold_s = thresholds.hold_s
    confirm_s = max(thresholds.regime_min_s, 3 * interval_s)
    pat = [r.pattern for r in raws]
    bot = [r.bottleneck for r in raws]
    confirmed = 0  # the first tick whose verdict judged the regime now judged (its start: t - judged_s)
    for i, r in enumerate(raws):
        fresh = r.facts.get("regime_fresh") == 1.0 and r.facts.get("judged_s", 0.0) > 0
        if not fresh:
            continue
        if not (i and _same_regime(raws[i - 1], t[i - 1], r, t[i], interval_s)):
            confirmed = i
        # only what outlasted the longest earlier run in that band (a cycle's phase) is the new regime
        distinct_s = r.facts["judged_s"] - r.facts.get("regime_prior_run_s", 0.0)
        first = t[i] - min(max(distinct_s, 0.0), confirm_s)
        # the ticks before the regime was first judged alone, and only those: from then on each tick's own
        # verdict judged it, and a later reading of it (a flicker at its end) must not relabel them
        j = min(i, confirmed)
        while j > 0 and t[j - 1] > first + 1e-6:
            j -= 1
            pat[j], bot[j] = r.pattern, r.bottleneck
    keys: list[tuple[str, str]] = []
    lo = hi = 0
    for i in range(n):
        while t[lo] < t[i] - hold_s:
            lo += 1
        while hi < n and t[hi] <= t[i] + hold_s:
            hi += 1
        keys.append((_mode(pat, lo, hi, pat[i]), _mode(bot, lo, hi, bot[i])))
    return _absorb_short(keys, t, hold_s)


def _same_regime(a: Verdict, ta: float, b: Verdict, tb: float, interval_s: float) -> bool:
    """Whether the verdicts at ``ta`` and ``tb`` (consecutive ticks) both judged the same fresh regime: the
    stretch each judged starts at the same moment, within a tick."""
    if a.facts.get("regime_fresh") != 1.0:
        return False
    return abs((ta - a.facts.get("judged_s", 0.0)) - (tb - b.facts.get("judged_s", 0.0))) <= interval_s + 1e-6


def _absorb_short(keys: list[tuple[str, str]], t: list[float], min_s: float) -> list[tuple[str, str]]:
    """Runs shorter than ``min_s`` merged into a neighbour, shortest first.

    Filtering pattern and bottleneck separately can leave a sliver where one has switched and the other not
    yet (``idle / stall_unexplained`` for one second between a sawtooth and an idle card); the live tracker
    would never show anything for less than its hold, and neither does the offline reading. The sliver joins
    the neighbour that shares its bottleneck, else its pattern, else the longer one.
    """
    runs: list[list[Any]] = []  # [key, first index, last index]
    for i, k in enumerate(keys):
        if runs and runs[-1][0] == k:
            runs[-1][2] = i
        else:
            runs.append([k, i, i])

    def length(r: list[Any]) -> float:
        a, b = r[1], r[2]
        return float(t[b] - t[a - 1] if a > 0 else t[b] - t[a] + (t[1] - t[0] if len(t) > 1 else 0.0))

    while len(runs) > 1:
        j = min(range(len(runs)), key=lambda q: length(runs[q]))
        if length(runs[j]) >= min_s:
            break
        cand = [q for q in (j - 1, j + 1) if 0 <= q < len(runs)]
        key = runs[j][0]
        q = max(cand, key=lambda c: (runs[c][0][1] == key[1], runs[c][0][0] == key[0], length(runs[c])))
        lo_i, hi_i = min(runs[q][1], runs[j][1]), max(runs[q][2], runs[j][2])
        runs[q][1], runs[q][2] = lo_i, hi_i
        del runs[j]
        # neighbours that now carry the same key become one run
        merged: list[list[Any]] = []
        for r in runs:
            if merged and merged[-1][0] == r[0]:
                merged[-1][2] = r[2]
            else:
                merged.append(r)
        runs = merged
    out: list[tuple[str, str]] = []
    for k, a, b in runs:
        out.extend([k] * (b - a + 1))
    return out


def _basis(raws: list[Verdict], key: tuple[str, str]) -> tuple[int, Verdict]:
    """The verdict whose evidence and advice a segment shows: what the dashboard shows at the segment's end,
    the newest raw verdict that says exactly what the segment says (:class:`~gpu_triage.diagnosis.tracker.
    VerdictTracker`), so that ``diagnose`` and the screen give the same words for the same moment; failing
    that (pattern and bottleneck are smoothed separately) the newest that names the same bottleneck, with the
    segment's pattern; failing that the newest."""
    same = [i for i, r in enumerate(raws) if r.key == key]
    if same:
        return same[-1], raws[same[-1]]
    same_b = [i for i, r in enumerate(raws) if r.bottleneck == key[1]]
    pool = same_b or [i for i, r in enumerate(raws) if r.pattern == key[0]] or list(range(len(raws)))
    at = pool[-1]
    best = raws[at]
    if best.pattern != key[0]:
        keep_period = key[0] == "sawtooth"
        best = dataclasses.replace(best, pattern=key[0], period_s=best.period_s if keep_period else None,
                                   duty=best.duty if keep_period else None)
    return at, best


def segments(ticks: list[Tick], interval_s: float, thresholds: Thresholds, window_s: float,
             cpu_count: int | None = None,
             progress: Callable[[int, int], None] | None = None,
             resolution_s: float | None = None) -> list[Segment]:
    """The verdicts of a list of ticks, merged into segments in time order (see :func:`diagnose_trace`).

    The same streaming, columnar path as ``gpu-triage diagnose``: the ticks become one Arrow batch."""
    if not ticks:
        return []
    from gpu_triage.trace.schema import ticks_to_batch

    batch = ticks_to_batch(ticks)
    src = TraceSource(Path("<ticks>"), HostInfo(cpu_count=cpu_count), len(ticks),
                      np.array([tk.ts.timestamp() for tk in ticks]),
                      np.array([np.nan if tk.interval_s is None else float(tk.interval_s) for tk in ticks]),
                      interval_s, lambda: iter([batch]))
    return diagnose_trace(src, thresholds, window_s, progress, resolution_s).segments


@dataclass(slots=True)
class Gap:
    start: datetime  # end of the last tick before the gap
    end: datetime  # start of the first tick after it

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def to_json_obj(self) -> dict[str, Any]:
        return {"gap": True, "start": _iso(self.start), "end": _iso(self.end), "duration_s": round(self.seconds, 3)}


@dataclass(slots=True)
class Timeline:
    segments: list[Segment]
    gaps: list[Gap]
    interval_s: float  # trusted: from the timestamps when the metadata disagrees with them
    ticks: int
    stride: int  # the engine ran every ``stride`` ticks (1: every tick)
    warnings: list[str] = field(default_factory=list)
    # (bottleneck, headroom) of each raw verdict whose headroom is a bound: what the recording's verdicts
    # promised, point by point (compare's promise reads the median, as a segment shows only its basis's)
    bounds: list[tuple[str, Headroom]] = field(default_factory=list)

    def entries(self) -> list[Segment | Gap]:
        """Segments and gaps in time order."""
        return sorted([*self.segments, *self.gaps], key=lambda e: (e.start, isinstance(e, Segment)))

    @property
    def recorded_s(self) -> float:
        return sum(max((s.end - s.start).total_seconds(), 0.0) for s in self.segments)


def first_start(src: TraceSource, judged: Judged, a: int) -> datetime:
    """When tick ``a``'s interval began (as Tick.ts - interval: to the microsecond): where a stretch
    starting at ``a`` begins."""
    iv0 = judged.intervals[a] if not np.isnan(judged.intervals[a]) else min(judged.nominal, MAX_INTERVAL_S)
    return _dt(src.t[a]) - timedelta(seconds=float(iv0))


def diagnose_trace(src: TraceSource, thresholds: Thresholds, window_s: float,
                   progress: Callable[[int, int], None] | None = None,
                   resolution_s: float | None = None, stride: int | None = None) -> Timeline:
    """Segments and gaps of a whole recording, streamed (see the comment above :data:`MAX_POINTS`).

    Raw verdicts are computed as the dashboard would, at the chosen points (:func:`judge`), then smoothed
    without regard to causality (see :func:`smoothed_keys`), so a segment begins where its regime began.
    Each segment's evidence and advice come from a raw verdict that agrees with the segment (see
    :func:`_basis`). A gap (no tick for more than GAP_INTERVALS intervals) ends the stretch before it: the
    window starts afresh after it, and segments never span it.
    """
    jd = judge(src, thresholds, window_s, progress, resolution_s, stride)
    n, nominal, stride, warn = src.n, jd.nominal, jd.stride, jd.warnings
    if n == 0:
        return Timeline([], [], nominal, 0, 1, warn)
    starts, points, group_of, raws, stored = jd.starts, jd.points, jd.group_of, jd.raws, jd.stored

    segs: list[Segment] = []
    gaps: list[Gap] = []
    pt = src.t[points]
    for gi, a in enumerate(starts):
        sel = np.flatnonzero(group_of == gi)
        if sel.size == 0:
            continue
        g_raws = [raws[i] for i in sel]
        keys = smoothed_keys([float(x) for x in pt[sel]], g_raws, thresholds, nominal * stride)
        begin = first_start(src, jd, a)
        if segs:
            gaps.append(Gap(segs[-1].end, max(begin, segs[-1].end)))
        g_stored = [stored[i] for i in sel] if stored else None
        group_segs, members, kept = _stretch_runs(src, [int(points[i]) for i in sel], g_raws, keys, g_stored,
                                                  begin, a)
        for seg, group, recorded in zip(group_segs, members, kept, strict=True):
            _fill_segment(seg, group, recorded, thresholds)
        segs.extend(group_segs)
    bounds = [(str(r.bottleneck), r.headroom) for r in raws if r.headroom is not None and r.headroom.kind == "bound"]
    return Timeline(segs, gaps, nominal, n, stride, warn, bounds)


def _stretch_runs(src: TraceSource, pts: list[int], g_raws: list[Verdict], keys: list[tuple[str, str]],
                  g_stored: list[Headroom | None] | None, begin: datetime, a: int,
                  ) -> tuple[list[Segment], list[list[Verdict]], list[list[Headroom | None]]]:
    """One stretch's runs of equal smoothed keys, as bare segments with their raw verdicts and the headroom the
    file stored at each member's tick: kept apart from the filling (:func:`_fill_segment`) because a segment's
    evidence is chosen only once all its members are known. Segments are contiguous inside a stretch, and
    each counts the ticks since the previous point (the first, since the stretch's start ``a``)."""
    group_segs: list[Segment] = []
    members: list[list[Verdict]] = []
    kept: list[list[Headroom | None]] = []
    prev = a - 1
    for j, (raw, key) in enumerate(zip(g_raws, keys, strict=True)):
        p = pts[j]
        covered = p - prev
        prev = p
        end = _dt(src.t[p])
        recorded = g_stored[j] if g_stored else None
        if group_segs and (group_segs[-1].pattern, group_segs[-1].bottleneck) == key:
            group_segs[-1].end = end
            group_segs[-1].ticks += covered
            members[-1].append(raw)
            kept[-1].append(recorded)
            continue
        start = group_segs[-1].end if group_segs else begin  # contiguous inside a stretch
        group_segs.append(Segment(key[0], key[1], [], 0.0, [], [], start=start, end=end, ticks=covered))
        members.append([raw])
        kept.append([recorded])
    return group_segs, members, kept


def _fill_segment(seg: Segment, group: list[Verdict], recorded: list[Headroom | None],
                  thresholds: Thresholds) -> None:
    """Give a bare segment the evidence, advice and confidence of the raw verdict that agrees with it
    (:func:`_basis`): the segment shows one real verdict's reasons, not a blend of its members'."""
    at, b = _basis(group, (seg.pattern, seg.bottleneck))
    seg.recorded_headroom = recorded[at]
    agree = [r.confidence for r in group if r.key == (seg.pattern, seg.bottleneck)]
    seg.confidence = float(sorted(agree)[len(agree) // 2]) if agree else b.confidence * 0.5
    seg.gpus, seg.evidence, seg.advice = list(b.gpus), list(b.evidence), list(b.advice)
    seg.evidence_facts, seg.headroom = list(b.evidence_facts), b.headroom
    # kill/free/restart only when the segment is confident and lasted the live tracker's hold
    if (b.destructive_advice and seg.confidence >= thresholds.destructive_min_conf
            and (seg.end - seg.start).total_seconds() >= thresholds.hold_s):
        seg.advice += b.destructive_advice
    seg.period_s, seg.duty, seg.facts = b.period_s, b.duty, dict(b.facts)


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), tz=UTC)
