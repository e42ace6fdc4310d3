"""The dashboard's raw verdicts over a recording: at every tick (:func:`verdicts`, Python ticks through a
RollingWindow and the live tracker) or streamed from Arrow batches at chosen ticks (:func:`judge`), and
what the offline reading trusts of a file's timestamps and intervals (gaps, stretches)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpu_triage.diagnosis.engine import Verdict, diagnose
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.worth import Headroom
from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, Tick, VerdictSample
from gpu_triage.offline.columns import RecordingColumns
from gpu_triage.trace.batches import TraceSource
from gpu_triage.trace.row_codec import build_record
from gpu_triage.trace.schema import RECORDED_INTERVAL_RANGE_S
from gpu_triage.verdicts.gaps import gap_limit
from gpu_triage.verdicts.judge import Judge, stored_headroom
from gpu_triage.window import window_capacity

if TYPE_CHECKING:
    import pyarrow as pa

# A recording is read in row batches (a Parquet row group at a time) and turned into numpy columns (time x
# card per field) with vectorised Arrow calls; a buffer keeps the last window's rows and the batch being
# read. The engine runs at chosen ticks ("points") on a WindowView sliced from that buffer, exactly the
# view a RollingWindow would give at that tick. Memory is bounded by the batch and the window, not by the
# recording; time by the number of points (the engine costs milliseconds per call, the reading microseconds
# per tick).

MAX_POINTS = 1500  # default budget of engine calls per recording; see resolution_stride
MAX_INTERVAL_S = 86400.0  # no tick covers more than a day: anything longer in the metadata is not believed


def resolution_stride(n_ticks: int, interval_s: float, resolution_s: float | None) -> int:
    """Every how many ticks the engine runs: every tick up to MAX_POINTS ticks; beyond that, spread
    MAX_POINTS evaluations over the recording (a day of 2 s ticks: every 29th tick, about one per minute).
    ``resolution_s`` asks for one evaluation per that many seconds instead (0: every tick)."""
    if resolution_s is not None:
        return max(1, int(resolution_s / interval_s)) if interval_s > 0 and resolution_s > 0 else 1
    return max(1, math.ceil(n_ticks / MAX_POINTS))


def _trusted_interval(t: np.ndarray, meta: float | None) -> tuple[float, str | None]:
    """The file's interval: the metadata's when the timestamps agree with it (within a factor 2), else the
    timestamps' median step; with one tick, the metadata bounded to a sane range."""
    steps = np.diff(t)
    steps = steps[steps > 0]
    lo, hi = RECORDED_INTERVAL_RANGE_S
    ok_meta = meta is not None and lo <= meta <= hi  # else the reader said so
    if steps.size:
        med = float(f"{float(np.median(steps)):.4g}")  # 1.999938 s of clock jitter is a 2 s recording
        if ok_meta and meta is not None and 0.5 * med <= meta <= 2.0 * med:
            return meta, None
        if meta is None or not ok_meta:
            return med, None
        return med, (f"the metadata interval_s ({meta:g} s) disagrees with the timestamps (a tick every {med:g} s): "
                     "using the timestamps")
    if ok_meta and meta is not None:
        return max(meta, 1e-3), None
    return 2.0, None


def _trusted_ticks(t: np.ndarray, interval: np.ndarray, nominal: float) -> tuple[np.ndarray, int]:
    """Per-tick intervals that fit the timestamps (NaN where not: the engine then reads the steps), and
    how many were dropped. A tick covers at most the time since the previous tick (half as long again for
    jitter), never nothing, and not a thousandth of the file's interval."""
    iv = interval.astype(np.float64, copy=True)
    prev_step = np.concatenate([[np.inf], np.diff(t)])
    limit = np.where(np.isfinite(prev_step), np.maximum(prev_step * 1.5, 1e-3), 10.0 * nominal)
    with np.errstate(invalid="ignore"):
        bad = ~np.isnan(iv) & (~np.isfinite(iv) | (iv <= 0) | (iv > limit) | (iv < nominal / 1000.0))
    iv[bad] = np.nan
    return iv, int(bad.sum())


def _gap_starts(t: np.ndarray, nominal: float) -> np.ndarray:
    """Indexes of the ticks that begin a new stretch after a gap (the first tick is not counted)."""
    if t.size < 2:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.diff(t) > gap_limit(nominal)) + 1


def trusted_interval(t: np.ndarray, meta_interval_s: float | None) -> float:
    """The interval ``diagnose`` trusts for a recording, without the gap search of :func:`stretch_starts`."""
    return _trusted_interval(t, meta_interval_s)[0]


def stretch_starts(t: np.ndarray, meta_interval_s: float | None) -> tuple[np.ndarray, float]:
    """The ticks that begin a new stretch after a gap, with the interval trusted as ``diagnose`` trusts it.

    The one definition of a gap: ``replay`` splits its window at the same ticks as the offline segments."""
    nominal, _ = _trusted_interval(t, meta_interval_s)
    return _gap_starts(t, nominal), nominal


def tick_seconds(t: np.ndarray, interval: np.ndarray, meta_interval_s: float | None) -> np.ndarray:
    """The seconds each tick stands for, as the streamed verdicts count a recording's time: the step since the
    tick before, and for the first tick of each stretch (the file's first, the first after a gap) its own
    interval where the timestamps bear it out, else the trusted one (:func:`~gpu_triage.offline.timeline.
    first_start`). Summed, the recorded time with the gaps left out."""
    nominal, _ = _trusted_interval(t, meta_interval_s)
    ivs, _ = _trusted_ticks(t, interval, nominal)
    out = np.empty(t.size, dtype=np.float64)
    if t.size:
        out[1:] = np.diff(t)
        firsts = np.concatenate([[0], _gap_starts(t, nominal)])
        own = ivs[firsts]
        out[firsts] = np.where(np.isnan(own), min(nominal, MAX_INTERVAL_S), own)
    return out


def _points(n: int, starts: list[int], stride: int) -> np.ndarray:
    """The ticks the engine runs at: every ``stride``-th tick of each stretch between gaps, and the last
    tick of each stretch (so that every stretch ends on a verdict of its own)."""
    out: list[np.ndarray] = []
    bounds = [*starts, n]
    for a, b in itertools.pairwise(bounds):
        p = np.arange(a + stride - 1, b, stride)
        if p.size == 0 or p[-1] != b - 1:
            p = np.append(p, b - 1)
        out.append(p)
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class Judged:
    """Raw verdicts of a recording at chosen ticks (see :func:`judge`)."""

    points: np.ndarray  # (k,) the ticks the engine ran at, in order
    raws: list[Verdict]  # the verdict at each point
    starts: list[int]  # the first tick of each stretch between gaps (starts[0] == 0)
    group_of: np.ndarray  # (k,) the stretch of each point
    nominal: float  # the trusted interval
    intervals: np.ndarray  # (n,) the per-tick intervals trusted (NaN where not)
    stride: int
    warnings: list[str]
    stored: list[Headroom | None] = field(default_factory=list)  # the headroom the file stored at each point


def judge(src: TraceSource, thresholds: Thresholds, window_s: float,
          progress: Callable[[int, int], None] | None = None,
          resolution_s: float | None = None, stride: int | None = None) -> Judged:
    """The dashboard's raw verdict (a RollingWindow of ``window_s``, the engine) every ``stride`` ticks of
    each stretch between gaps and at the last tick of each stretch, streamed batch by batch. ``stride``
    None: from ``resolution_s`` (see :func:`resolution_stride`). ``diagnose FILE`` smooths these into
    segments (:func:`diagnose_trace`); ``diagnose DIR --summary`` counts them."""
    warn: list[str] = []
    nominal, why = _trusted_interval(src.t, src.meta_interval_s)
    if why:
        warn.append(why)
    ivs, dropped = _trusted_ticks(src.t, src.interval, nominal)
    if dropped:
        warn.append(f"{dropped} ticks' interval_s disagree with their timestamps and are ignored")
    n = src.n
    if stride is None:
        stride = resolution_stride(n, nominal, resolution_s)
    if n == 0:
        return Judged(np.zeros(0, dtype=np.int64), [], [0], np.zeros(0, dtype=np.int64), nominal, ivs, stride, warn)
    starts = [0, *(int(i) for i in _gap_starts(src.t, nominal))]
    points = _points(n, starts, stride)
    capacity = _capacity(window_s, nominal, n)
    group_of = np.searchsorted(np.asarray(starts), points, side="right") - 1

    cols = RecordingColumns()
    raws: list[Verdict] = []
    stored: list[Headroom | None] = []
    k = 0  # next point
    read = 0
    for batch in src.batches():
        if batch.num_rows == 0:
            continue
        cols.push(batch, ivs[read: read + batch.num_rows], keep=capacity - 1)
        read += batch.num_rows
        while k < points.size and points[k] < read:
            p = int(points[k])
            lo = max(p - capacity + 1, starts[int(group_of[k])])
            raws.append(diagnose(cols.view(lo, p + 1), thresholds, src.host.cpu_count))
            stored.append(_stored_at(batch, p - (read - batch.num_rows)))
            k += 1
        if progress is not None and read < n:
            progress(read, n)
    if progress is not None:
        progress(n, n)
    if src.out_of_range:  # worded as the reader words it for a file read whole
        total = sum(src.out_of_range.values())
        worst = ", ".join(f"{f} {c}" for f, c in sorted(src.out_of_range.items(), key=lambda kv: -kv[1])[:3])
        warn.append(f"{total} values out of range ignored (read as n/a; {worst})")
    if k < points.size:
        raise UserError(f"{src.path}: the file holds fewer ticks than its index says ({read} of {n}): "
                        "it may be damaged; try `gpu-triage recover`")
    return Judged(points, raws, starts, group_of, nominal, ivs, stride, warn, stored)


def _stored_at(batch: pa.RecordBatch, row: int) -> Headroom | None:
    """The headroom the recording stored with its verdict at ``row`` of ``batch`` (trace v4), None where none."""
    if "verdict" not in batch.schema.names:
        return None
    got = batch.column("verdict")[row].as_py()
    if not isinstance(got, dict) or got.get("pattern") is None or got.get("bottleneck") is None:
        return None
    sample: VerdictSample = build_record(VerdictSample, got)  # its words cleaned as every recording's
    return stored_headroom(sample)


def verdicts(ticks: list[Tick], interval_s: float, thresholds: Thresholds, window_s: float,
             cpu_count: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> list[tuple[Tick, Verdict, Verdict]]:
    """(tick, raw verdict, shown verdict) for every tick: the live judge (:class:`~gpu_triage.verdicts.judge.
    Judge`) fed the recording's ticks one by one, as the dashboard, the recorders and the exporter judge them.

    ``progress(done, total)`` is called every 500 ticks: a day of 2 s ticks takes minutes to diagnose."""
    judge = Judge(thresholds, window_s, interval_s, cpu_count, capacity=_capacity(window_s, interval_s, len(ticks)))
    out: list[tuple[Tick, Verdict, Verdict]] = []
    for tick in ticks:
        j = judge.take(tick)
        if j.raw is None or j.shown is None:
            raise RuntimeError(f"diagnosing the tick at {tick.ts} failed: {j.error}") from j.cause
        out.append((tick, j.raw, j.shown))
        if progress is not None and len(out) % 500 == 0 and len(out) < len(ticks):
            progress(len(out), len(ticks))
    if progress is not None and out:
        progress(len(out), len(ticks))  # the last call ends the line
    return out


def _capacity(window_s: float, interval_s: float, n_ticks: int) -> int:
    """The dashboard's window size (window.window_capacity), never more rows than the recording has ticks:
    whatever a file's metadata claims, what is allocated is bounded by what is really there."""
    return min(window_capacity(window_s, interval_s)[0], max(2, n_ticks))


@dataclass(slots=True)
class LoadedTrace:
    ticks: list[Tick]
    interval_s: float
    host: HostInfo
    notice: str | None = None  # the reader's word on a crash leftover or a torn last tick


def load_trace(path: Path) -> LoadedTrace:
    """Read a trace-v1 file (Parquet or a crash leftover) through the project's reader, as Python ticks (for
    small recordings and tests; ``diagnose`` streams with :func:`iter_batches`); UserError if bad."""
    from gpu_triage.trace.reader import open_trace

    tf = open_trace(path)
    return LoadedTrace(list(tf.ticks(0, tf.n)), float(tf.interval_s), tf.host, tf.notice)
