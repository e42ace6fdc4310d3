"""``gpu-triage diagnose FILE``: the live diagnosis replayed over a recording, tick by tick.

Each tick goes into a :class:`RollingWindow` of ``window_s``, is diagnosed exactly as the dashboard would,
passes the same :class:`VerdictTracker`, and consecutive equal shown verdicts are merged into segments. The
segments cover the trace end to end with no gap: each ends where the next begins.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpu_triage.diagnosis.engine import Verdict, diagnose
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

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "start": _iso(self.start),
            "end": _iso(self.end),
            "pattern": self.pattern,
            "bottleneck": self.bottleneck,
            "gpus": list(self.gpus),
            "confidence": round(self.confidence, 3),
            "evidence": list(self.evidence),
            "advice": list(self.advice),
            "ticks": self.ticks,
            "period_s": self.period_s,
            "duty": None if self.duty is None else round(self.duty, 3),
        }


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def verdicts(ticks: list[Tick], interval_s: float, thresholds: Thresholds, window_s: float,
             cpu_count: int | None = None) -> list[tuple[Tick, Verdict, Verdict]]:
    """(tick, raw verdict, shown verdict) for every tick, as the dashboard would have computed them."""
    capacity = max(2, round(window_s / interval_s)) if interval_s > 0 else 150
    window = RollingWindow(capacity)
    tracker = VerdictTracker(thresholds)
    out: list[tuple[Tick, Verdict, Verdict]] = []
    for tick in ticks:
        window.append(tick)
        raw = diagnose(window.view(), thresholds, cpu_count)
        shown = tracker.update(tick.ts.timestamp(), raw)
        out.append((tick, raw, shown))
    return out


def segments(ticks: list[Tick], interval_s: float, thresholds: Thresholds, window_s: float,
             cpu_count: int | None = None) -> list[Segment]:
    """The shown verdicts of a whole recording, merged into contiguous segments in time order."""
    segs: list[Segment] = []
    for tick, _raw, shown in verdicts(ticks, interval_s, thresholds, window_s, cpu_count):
        iv = tick.interval_s if tick.interval_s and tick.interval_s > 0 else interval_s
        start = tick.ts - timedelta(seconds=iv)
        if segs and (segs[-1].pattern, segs[-1].bottleneck) == shown.key:
            seg = segs[-1]
            seg.end = tick.ts
            seg.ticks += 1
            # keep the evidence of the most confident moment of the segment
            if shown.confidence >= seg.confidence:
                seg.confidence, seg.evidence, seg.advice = shown.confidence, shown.evidence, shown.advice
                seg.gpus, seg.period_s, seg.duty, seg.facts = shown.gpus, shown.period_s, shown.duty, shown.facts
            continue
        if segs:
            start = segs[-1].end  # contiguous: no gap even if a tick was late
        segs.append(Segment(start, tick.ts, shown.pattern, shown.bottleneck, list(shown.gpus), shown.confidence,
                            list(shown.evidence), list(shown.advice), 1, shown.period_s, shown.duty, dict(shown.facts)))
    return segs


# -- reading ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class LoadedTrace:
    ticks: list[Tick]
    interval_s: float
    host: HostInfo


def load_trace(path: Path) -> LoadedTrace:
    """Read a trace-v1 file through the project's reader when it exists, else straight from Parquet."""
    try:
        from gpu_triage.trace.reader import open_trace  # type: ignore[import-not-found]
    except ImportError:
        return _load_parquet(path)
    tf = open_trace(path)
    return LoadedTrace(list(tf.ticks(0, tf.n)), float(tf.interval_s), tf.host)


def _load_parquet(path: Path) -> LoadedTrace:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.exists():
        raise UserError(f"{path}: no such file: check the path of the recording")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"{path}: not a readable Parquet trace ({exc.__class__.__name__}): "
                        "give a file written by gpu-triage record") from exc
    meta = table.schema.metadata or {}
    if "ts" not in table.column_names or "gpus" not in table.column_names:
        raise UserError(f"{path}: not a gpu-triage trace (no ts/gpus columns): give a file written by gpu-triage record")
    host = HostInfo()
    try:
        if b"gpu_triage.host" in meta:
            host = HostInfo.from_json_obj(json.loads(meta[b"gpu_triage.host"]))
        interval = float(meta.get(b"gpu_triage.interval_s", b"nan"))
    except (ValueError, TypeError, AttributeError) as exc:
        raise UserError(f"{path}: bad gpu_triage metadata ({exc}): the file is damaged") from exc
    try:
        ticks = [Tick.from_row(r) for r in table.to_pylist()]
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: rows do not follow trace v1 ({exc}): the file is damaged or not a gpu-triage trace") from exc
    if math.isnan(interval) or interval <= 0:
        ivs = sorted(t.interval_s for t in ticks if t.interval_s)
        interval = ivs[len(ivs) // 2] if ivs else 2.0
    return LoadedTrace(ticks, interval, host)


# -- the command ---------------------------------------------------------------------------------------


def run_diagnose(args: argparse.Namespace, config: Any) -> int:
    path = Path(args.file).expanduser()
    trace = load_trace(path)
    if not trace.ticks:
        raise UserError(f"{path}: the recording holds no ticks: record for a few seconds at least")
    segs = segments(trace.ticks, trace.interval_s, config.thresholds, config.window_s, trace.host.cpu_count)
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
              f"cards {gpus}  confidence {s.confidence:.2f}")
        for e in s.evidence:
            print(f"  - {e}")
        for a in s.advice:
            print(f"  > {a}")
    return 0
