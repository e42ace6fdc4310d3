"""``gpu-triage diagnose FILE``: the live diagnosis replayed over a recording, tick by tick.

Each tick goes into a :class:`RollingWindow` of ``window_s`` and is diagnosed exactly as the dashboard would
(:func:`verdicts` also gives the live tracker's shown verdict). Segments do not use the live hysteresis,
which must stay causal and so lags: with the whole recording at hand, the raw verdicts are smoothed in both
directions (:func:`smoothed_keys`) and consecutive equal verdicts merged. The segments cover the trace end
to end with no gap: each ends where the next begins.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpu_triage.diagnosis.engine import Verdict, diagnose, format_confidence
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.tracker import VerdictTracker
from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, Tick
from gpu_triage.window import RollingWindow


@dataclass(slots=True)
class Segment:
    start: datetime  # start of the first tick's interval
    end: datetime  # end of the last tick's interval
    pattern: str
    bottleneck: str
    gpus: list[int]
    confidence: float
    evidence: list[str]
    advice: list[str]
    ticks: int = 0
    period_s: float | None = None
    duty: float | None = None
    facts: dict[str, float] = field(default_factory=dict)
    evidence_facts: list[dict[str, Any]] = field(default_factory=list)  # beside each evidence sentence

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "start": _iso(self.start),
            "end": _iso(self.end),
            "pattern": self.pattern,
            "bottleneck": self.bottleneck,
            "gpus": list(self.gpus),
            "confidence": round(self.confidence, 3),
            "evidence": list(self.evidence),
            "evidence_facts": list(self.evidence_facts),
            "advice": list(self.advice),
            "ticks": self.ticks,
            "period_s": self.period_s,
            "duty": None if self.duty is None else round(self.duty, 3),
        }


def terminal_progress(label: str, stream: Any = None) -> Callable[[int, int], None] | None:
    """A progress line updated in place on stderr when it is a terminal; None (silent) otherwise."""
    out = stream if stream is not None else sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        out.write(f"\r{label}: {done}/{total} ticks ({100 * done // max(total, 1)} %)" + end)
        out.flush()

    return show


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def verdicts(ticks: list[Tick], interval_s: float, thresholds: Thresholds, window_s: float,
             cpu_count: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> list[tuple[Tick, Verdict, Verdict]]:
    """(tick, raw verdict, shown verdict) for every tick, as the dashboard would have computed them.

    ``progress(done, total)`` is called every 500 ticks: a day of 2 s ticks takes minutes to diagnose."""
    capacity = max(2, round(window_s / interval_s)) if interval_s > 0 else 150
    window = RollingWindow(capacity)
    tracker = VerdictTracker(thresholds)
    out: list[tuple[Tick, Verdict, Verdict]] = []
    for tick in ticks:
        window.append(tick)
        raw = diagnose(window.view(), thresholds, cpu_count)
        shown = tracker.update(tick.ts.timestamp(), raw)
        out.append((tick, raw, shown))
        if progress is not None and len(out) % 500 == 0 and len(out) < len(ticks):
            progress(len(out), len(ticks))
    if progress is not None and out:
        progress(len(out), len(ticks))  # the last call ends the line
    return out


def _mode(values: list[str], lo: int, hi: int, own: str) -> str:
    """The most common value of ``values[lo:hi]``; ties keep ``own`` (no change without a majority)."""
    counts: dict[str, int] = {}
    for v in values[lo:hi]:
        counts[v] = counts.get(v, 0) + 1
    best = max(counts.values())
    return own if counts.get(own, 0) == best else max(counts, key=lambda v: (counts[v], v == own))


def smoothed_keys(ticks: list[Tick], raws: list[Verdict], thresholds: Thresholds,
                  interval_s: float) -> list[tuple[str, str]]:
    """Non-causal (pattern, bottleneck) per tick: what a reader of the whole recording would say.

    The live tracker must wait ``hold_s`` before believing a change; offline the future is known, so:

    1. **Back-dating**: a raw verdict that judged a fresh regime (engine.judged_span: a step held for
       ``max(regime_min_s, 3 ticks)``) also speaks for the ticks it needed to confirm it, up to that length
       back, instead of only from the moment it was confirmed. Not further: when a sawtooth stops, its last
       low phase and the idle after it form one block, and only the data after the last burst may say idle;
       and only over the part of the block longer than the longest earlier run in its band, since the first
       ticks of that block looked exactly like one more low phase of the cycle.
       A later verdict overrides an earlier one on the ticks both cover.
    2. **Centred mode filter** of ±``hold_s`` on pattern and on bottleneck separately (as the live tracker
       holds them separately): a flicker shorter than the hold is outvoted by its neighbours on both sides,
       and a real change moves the boundary to where the votes switch, not ``hold_s`` later.
    """
    n = len(ticks)
    hold_s = thresholds.hold_s
    confirm_s = max(thresholds.regime_min_s, 3 * interval_s)
    pat = [r.pattern for r in raws]
    bot = [r.bottleneck for r in raws]
    t = [tk.ts.timestamp() for tk in ticks]
    for i, r in enumerate(raws):
        if r.facts.get("regime_fresh") == 1.0 and r.facts.get("judged_s", 0.0) > 0:
            # only what outlasted the longest earlier run in that band (a cycle's phase) is the new regime
            distinct_s = r.facts["judged_s"] - r.facts.get("regime_prior_run_s", 0.0)
            first = t[i] - min(max(distinct_s, 0.0), confirm_s)
            j = i
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


def _basis(raws: list[Verdict], key: tuple[str, str]) -> Verdict:
    """The verdict whose evidence a segment shows: the most confident raw verdict that says exactly what the
    segment says; failing that (pattern and bottleneck are smoothed separately) one that names the same
    bottleneck, with the segment's pattern; failing that the most confident one."""
    same = [r for r in raws if r.key == key]
    if same:
        return max(same, key=lambda r: r.confidence)
    same_b = [r for r in raws if r.bottleneck == key[1]]
    pool = same_b or [r for r in raws if r.pattern == key[0]] or raws
    best = max(pool, key=lambda r: r.confidence)
    if best.pattern != key[0]:
        keep_period = key[0] == "sawtooth"
        best = dataclasses.replace(best, pattern=key[0], period_s=best.period_s if keep_period else None,
                                   duty=best.duty if keep_period else None)
    return best


def segments(ticks: list[Tick], interval_s: float, thresholds: Thresholds, window_s: float,
             cpu_count: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> list[Segment]:
    """The verdicts of a whole recording, merged into contiguous segments in time order.

    Raw verdicts are computed as the dashboard would, then smoothed without regard to causality (see
    :func:`smoothed_keys`), so a segment begins where its regime began. Each segment's evidence and advice
    come from a raw verdict that agrees with the segment (see :func:`_basis`).
    """
    res = verdicts(ticks, interval_s, thresholds, window_s, cpu_count, progress)
    if not res:
        return []
    raws = [raw for _t, raw, _s in res]
    keys = smoothed_keys(ticks, raws, thresholds, interval_s)
    segs: list[Segment] = []
    members: list[list[Verdict]] = []
    for tick, raw, key in zip(ticks, raws, keys, strict=True):
        if segs and (segs[-1].pattern, segs[-1].bottleneck) == key:
            segs[-1].end = tick.ts
            segs[-1].ticks += 1
            members[-1].append(raw)
            continue
        iv = tick.interval_s if tick.interval_s and tick.interval_s > 0 else interval_s
        start = segs[-1].end if segs else tick.ts - timedelta(seconds=iv)  # contiguous: no gap
        segs.append(Segment(start, tick.ts, key[0], key[1], [], 0.0, [], [], 1))
        members.append([raw])
    for seg, group in zip(segs, members, strict=True):
        b = _basis(group, (seg.pattern, seg.bottleneck))
        agree = [r.confidence for r in group if r.key == (seg.pattern, seg.bottleneck)]
        seg.confidence = float(sorted(agree)[len(agree) // 2]) if agree else b.confidence * 0.5
        seg.gpus, seg.evidence, seg.advice = list(b.gpus), list(b.evidence), list(b.advice)
        seg.evidence_facts = list(b.evidence_facts)
        # kill/free/restart only when the segment is confident and lasted the live tracker's hold
        if (b.destructive_advice and seg.confidence >= thresholds.destructive_min_conf
                and (seg.end - seg.start).total_seconds() >= thresholds.hold_s):
            seg.advice += b.destructive_advice
        seg.period_s, seg.duty, seg.facts = b.period_s, b.duty, dict(b.facts)
    return segs


# -- reading ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class LoadedTrace:
    ticks: list[Tick]
    interval_s: float
    host: HostInfo
    notice: str | None = None  # the reader's word on a crash leftover or a torn last tick


def load_trace(path: Path) -> LoadedTrace:
    """Read a trace-v1 file (Parquet or a crash leftover) through the project's reader; UserError if bad."""
    from gpu_triage.trace.reader import open_trace

    tf = open_trace(path)
    return LoadedTrace(list(tf.ticks(0, tf.n)), float(tf.interval_s), tf.host, tf.notice)


# -- the command ---------------------------------------------------------------------------------------


def run_diagnose(args: argparse.Namespace, config: Any) -> int:
    path = Path(args.file).expanduser()
    trace = load_trace(path)
    if trace.notice:  # stderr: --json output stays parseable; compare and recover say it the same way
        print(f"gpu-triage: {trace.notice}", file=sys.stderr)
    if not trace.ticks:
        raise UserError(f"{path}: the recording holds no ticks: record for a few seconds at least")
    segs = segments(trace.ticks, trace.interval_s, config.thresholds, config.window_s, trace.host.cpu_count,
                    terminal_progress(f"diagnosing {path.name}"))
    if getattr(args, "json", False):
        obj = {
            "file": str(path),
            "interval_s": trace.interval_s,
            "ticks": len(trace.ticks),
            "segments": [s.to_json_obj() for s in segs],
        }
        print(json.dumps(obj, indent=2, allow_nan=False, default=str))
        return 0
    print(f"{path}: {len(trace.ticks)} ticks of {trace.interval_s:g} s, {len(segs)} segments")
    for s in segs:
        print()
        dur = (s.end - s.start).total_seconds()
        gpus = ", ".join(map(str, s.gpus)) if s.gpus else "-"
        print(f"{s.start:%H:%M:%S} - {s.end:%H:%M:%S} UTC ({dur:.0f} s)  {s.pattern} / {s.bottleneck}  "
              f"cards {gpus}  {format_confidence(s.confidence)}")
        for e in s.evidence:
            print(f"  - {e}")
        for a in s.advice:
            print(f"  > {a}")
    return 0
