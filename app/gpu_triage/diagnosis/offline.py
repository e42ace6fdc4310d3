"""``gpu-triage diagnose FILE``: the live diagnosis replayed over a recording, tick by tick.

Each tick goes into a :class:`RollingWindow` of ``window_s`` and is diagnosed exactly as the dashboard would
(:func:`verdicts` also gives the live tracker's shown verdict). Segments do not use the live hysteresis,
which must stay causal and so lags: with the whole recording at hand, the raw verdicts are smoothed in both
directions (:func:`smoothed_keys`) and consecutive equal verdicts merged. The segments cover the trace end
to end with no gap: each ends where the next begins.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, cast, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpu_triage.diagnosis.engine import Finding, Verdict, diagnose, format_confidence
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.tracker import VerdictTracker
from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, JobSample, ProcSample, Tick, _job_from_row
from gpu_triage.trace.schema import INTERVAL_RANGE_S
from gpu_triage.window import (
    DISK_FIELDS,
    GPU_FIELDS,
    RollingWindow,
    WindowView,
    _widen,
    window_capacity,
)


@dataclass(slots=True, kw_only=True)
class Segment(Finding):
    """A stretch of a recording and what the offline reading says of it (the verdict's fields: Finding)."""

    start: datetime  # start of the first tick's interval
    end: datetime  # end of the last tick's interval
    ticks: int = 0

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


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def verdicts(ticks: list[Tick], interval_s: float, thresholds: Thresholds, window_s: float,
             cpu_count: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> list[tuple[Tick, Verdict, Verdict]]:
    """(tick, raw verdict, shown verdict) for every tick, as the dashboard would have computed them.

    ``progress(done, total)`` is called every 500 ticks: a day of 2 s ticks takes minutes to diagnose."""
    window = RollingWindow(_capacity(window_s, interval_s, len(ticks)))
    tracker = VerdictTracker(thresholds)
    out: list[tuple[Tick, Verdict, Verdict]] = []
    for tick in ticks:
        window.append(tick)
        view = window.view()
        raw = diagnose(view, thresholds, cpu_count)
        shown = tracker.update(tick.ts.timestamp(), raw, view)
        out.append((tick, raw, shown))
        if progress is not None and len(out) % 500 == 0 and len(out) < len(ticks):
            progress(len(out), len(ticks))
    if progress is not None and out:
        progress(len(out), len(ticks))  # the last call ends the line
    return out


def _capacity(window_s: float, interval_s: float, n_ticks: int) -> int:
    """The dashboard's window size (window.window_capacity), never more rows than the recording has ticks:
    whatever a file's metadata claims, what is allocated is bounded by what is really there."""
    return min(window_capacity(window_s, interval_s)[0], max(2, n_ticks))


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
    n = len(t)
    hold_s = thresholds.hold_s
    confirm_s = max(thresholds.regime_min_s, 3 * interval_s)
    pat = [r.pattern for r in raws]
    bot = [r.bottleneck for r in raws]
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


# -- the streaming, columnar diagnosis ---------------------------------------------------------------------
#
# A recording is read in row batches (a Parquet row group at a time) and turned into numpy columns (time x
# card per field) with vectorised Arrow calls; a buffer keeps the last window's rows and the batch being
# read. The engine runs at chosen ticks ("points") on a WindowView sliced from that buffer, exactly the
# view a RollingWindow would give at that tick. Memory is bounded by the batch and the window, not by the
# recording; time by the number of points (the engine costs milliseconds per call, the reading microseconds
# per tick).

MAX_POINTS = 1500  # default budget of engine calls per recording; see resolution_stride
GAP_INTERVALS = 5.0  # a step longer than this many intervals (and than MIN_GAP_S) is a gap in the recording
MIN_GAP_S = 1.0
BATCH_ROWS = 4096  # rows read at a time: 1,024 cost 70 % more CPU (per-call overhead), 8,192 ~100 MB more RSS
PROC_AHEAD = 512  # process lists converted from Arrow at a time (see _Columns._procs)
MAX_INTERVAL_S = 86400.0  # no tick covers more than a day: anything longer in the metadata is not believed


def resolution_stride(n_ticks: int, interval_s: float, resolution_s: float | None) -> int:
    """Every how many ticks the engine runs: every tick up to MAX_POINTS ticks; beyond that, spread
    MAX_POINTS evaluations over the recording (a day of 2 s ticks: every 29th tick, about one per minute).
    ``resolution_s`` asks for one evaluation per that many seconds instead (0: every tick)."""
    if resolution_s is not None:
        return max(1, int(resolution_s / interval_s)) if interval_s > 0 and resolution_s > 0 else 1
    return max(1, math.ceil(n_ticks / MAX_POINTS))


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

    def entries(self) -> list[Segment | Gap]:
        """Segments and gaps in time order."""
        return sorted([*self.segments, *self.gaps], key=lambda e: (e.start, isinstance(e, Segment)))

    @property
    def recorded_s(self) -> float:
        return sum(max((s.end - s.start).total_seconds(), 0.0) for s in self.segments)


@dataclass(slots=True)
class TraceSource:
    """A recording ready to stream: its timestamps and intervals up front, the rest batch by batch."""

    path: Path
    host: HostInfo
    n: int
    t: np.ndarray  # (n,) seconds since the epoch
    interval: np.ndarray  # (n,) the recorded per-tick interval, NaN where missing
    meta_interval_s: float | None  # the file's nominal interval (metadata), None if absent
    batches: Callable[[], Iterator[pa.RecordBatch]]  # normalised trace-v1 batches, rows in order
    notice: str | None = None
    out_of_range: dict[str, int] = field(default_factory=dict)  # filled while batches() streams: field -> count
    # the reader's TraceFile of the first rows (of every row where the file was read whole): its host metadata
    # and first tick, for what `compare` reports of a run without reading the file again
    head: Any = None


def _trusted_interval(t: np.ndarray, meta: float | None) -> tuple[float, str | None]:
    """The file's interval: the metadata's when the timestamps agree with it (within a factor 2), else the
    timestamps' median step; with one tick, the metadata bounded to a sane range."""
    steps = np.diff(t)
    steps = steps[steps > 0]
    ok_meta = meta is not None and INTERVAL_RANGE_S[0] <= meta <= INTERVAL_RANGE_S[1]  # else the reader said so
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
    limit = max(GAP_INTERVALS * nominal, MIN_GAP_S)
    return np.flatnonzero(np.diff(t) > limit) + 1


def trusted_interval(t: np.ndarray, meta_interval_s: float | None) -> float:
    """The interval ``diagnose`` trusts for a recording, without the gap search of :func:`stretch_starts`."""
    return _trusted_interval(t, meta_interval_s)[0]


def stretch_starts(t: np.ndarray, meta_interval_s: float | None) -> tuple[np.ndarray, float]:
    """The ticks that begin a new stretch after a gap, with the interval trusted as ``diagnose`` trusts it.

    The one definition of a gap: ``replay`` splits its window at the same ticks as the offline segments."""
    nominal, _ = _trusted_interval(t, meta_interval_s)
    return _gap_starts(t, nominal), nominal


def _as_float(arr: pa.Array) -> np.ndarray:
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan)
    return np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def _list_layout(col: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array | None]:
    """(row of each value, position inside its row, the values) of a list column; nulls hold nothing."""
    n = len(col)
    if pa.types.is_null(col.type) or n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), None
    lengths = np.asarray(pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    total = int(lengths.sum())
    rows = np.repeat(np.arange(n), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows, np.arange(total) - starts, pc.list_flatten(col)


_PROC_FIELDS = (
    "pid", "gpu_index", "name", "gpu_mem_bytes", "cpu_pct", "workers", "workers_cpu_pct", "worker_pids", "sm_pct",
)  # fmt: skip


def _field(values: pa.Array, name: str) -> pa.Array | None:
    typ = values.type
    if not pa.types.is_struct(typ) or typ.get_field_index(name) < 0:
        return None
    return pc.struct_field(values, name)


def _pylist(arr: pa.Array) -> list[Any]:
    """``arr.to_pylist()``; a list column through its flat values and offsets, which is 5x faster (the
    worker pids of every process were most of the conversion of the process lists)."""
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)) or arr.null_count == len(arr):
        plain: list[Any] = arr.to_pylist()
        return plain
    offs = np.asarray(arr.offsets)  # into arr.values, which ignores a slice: only the range used is read
    base = int(offs[0])
    rel = (offs - base).tolist()  # rebased once: the slices below are a third cheaper without the subtractions
    flat = arr.values.slice(base, rel[-1]).to_pylist()
    out: list[Any] = [flat[a:b] for a, b in itertools.pairwise(rel)]
    if arr.null_count:
        for i in np.flatnonzero(np.asarray(arr.is_null().to_numpy(zero_copy_only=False))).tolist():
            out[i] = None
    return out


def _fill_runs(rows: list[Any], a: int, b: int, missing: object, convert: Callable[[int, int], list[Any]]) -> None:
    """Convert in place, run by run, the rows a..b-1 still holding the ``missing`` marker: each row is converted
    once, and a run of neighbours in one call (one ``to_pylist`` per run, not per row)."""
    i = a
    while i < b:
        if rows[i] is not missing:
            i += 1
            continue
        j = i
        while j < b and rows[j] is missing:
            j += 1
        rows[i:j] = convert(i, j)
        i = j


class _Columns:
    """Consecutive ticks as numpy columns. Columns of cards, cores and disks keep their place from batch
    to batch (new ones are appended), and remember the row where each first appeared, so that a view at a
    tick shows exactly the columns a RollingWindow would have at that tick."""

    def __init__(self) -> None:
        self.row0 = 0  # global row of the buffer's first row
        self.t = np.zeros(0)
        self.interval = np.zeros(0)
        self.iowait = np.zeros(0)
        self.mem_used = np.zeros(0)
        self.mem_total = np.zeros(0)
        self.gpu = {f: np.zeros((0, 0)) for f in GPU_FIELDS}
        self.cpu = np.zeros((0, 0))
        self.disk = {f: np.zeros((0, 0)) for f in DISK_FIELDS}
        self.gpu_cols: dict[int, int] = {}
        self.gpu_first: list[int] = []
        self.cpu_first: list[int] = []
        self.disk_cols: dict[str, int] = {}
        self.disk_first: list[int] = []
        self.procs: pa.Array | None = None
        self._proc_rows: list[list[ProcSample] | None] = []  # converted on demand, aligned with the rows
        # trace v2's job column, kept as Arrow like the procs and converted only for the rows a view reads
        # (the job rules read the judged stretch); None: a v1 file, or a batch with no job at all
        self.job: pa.Array | None = None
        self._job_rows: list[Any] = []  # JobSample or None per row; False: not converted yet

    @property
    def rows(self) -> int:
        return int(self.t.shape[0])

    def push(self, batch: pa.RecordBatch, interval: np.ndarray, keep: int) -> None:
        """Append ``batch`` (its per-tick intervals already trusted), keeping only the last ``keep`` rows
        before it."""
        n = batch.num_rows
        base = self.row0 + self.rows  # global row of the batch's first row
        drop = max(0, self.rows - keep)

        def cat(old: np.ndarray, new: np.ndarray) -> np.ndarray:
            old = old[drop:]
            if old.ndim == 2 and old.shape[1] < new.shape[1]:
                old = _widen(old, new.shape[1])
            return np.concatenate([old, new]) if old.shape[0] else new

        ts = pc.cast(batch.column("ts"), pa.int64()).to_numpy(zero_copy_only=False)
        new_t = np.asarray(ts, dtype=np.float64) / 1e6
        # cards
        rows, _pos, values = _list_layout(batch.column("gpus"))
        gpu_new = {f: np.full((n, 0), np.nan) for f in GPU_FIELDS}
        if values is not None and len(values):
            index_arr = _field(values, "index")
            idx = np.asarray(_as_float(index_arr) if index_arr is not None else np.full(len(values), np.nan))
            valid = ~np.isnan(idx)
            idx_i = np.where(valid, idx, -1).astype(np.int64)
            uniq, first = np.unique(idx_i[valid], return_index=True)
            vrows = rows[valid]
            for k in np.argsort(first, kind="stable"):
                card = int(uniq[k])
                if card not in self.gpu_cols:
                    self.gpu_cols[card] = len(self.gpu_cols)
                    self.gpu_first.append(base + int(vrows[first[k]]))
            cols = np.full(idx_i.shape, -1, dtype=np.int64)
            for card, col in self.gpu_cols.items():
                cols[idx_i == card] = col
            width = len(self.gpu_cols)
            for f in GPU_FIELDS:
                a = np.full((n, width), np.nan)
                arr = _field(values, f)
                if arr is not None:
                    a[rows[valid], cols[valid]] = _as_float(arr)[valid]
                gpu_new[f] = a
        else:
            gpu_new = {f: np.full((n, len(self.gpu_cols)), np.nan) for f in GPU_FIELDS}
        # cores
        rows, pos, values = _list_layout(batch.column("cpu_pct"))
        if values is not None and len(values):
            width = int(pos.max()) + 1
            for c in range(len(self.cpu_first), width):
                self.cpu_first.append(base + int(rows[pos == c][0]))
        cpu_new = np.full((n, len(self.cpu_first)), np.nan)
        if values is not None and len(values):
            cpu_new[rows, pos] = _as_float(values)
        # disks
        rows, _pos, values = _list_layout(batch.column("disks"))
        names = _field(values, "name") if values is not None else None
        if values is not None and names is not None and len(values):
            enc = pc.dictionary_encode(names)
            codes = np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
            dic = enc.dictionary.to_pylist()
            for code, name in enumerate(dic):
                if name not in self.disk_cols:
                    self.disk_cols[name] = len(self.disk_cols)
                    self.disk_first.append(base + int(rows[np.argmax(codes == code)]))
            lookup = np.array([self.disk_cols[name] for name in dic] + [-1], dtype=np.int64)
            cols = lookup[codes]
            ok = cols >= 0
            disk_new = {}
            for f in DISK_FIELDS:
                a = np.full((n, len(self.disk_cols)), np.nan)
                arr = _field(values, f)
                if arr is not None:
                    a[rows[ok], cols[ok]] = _as_float(arr)[ok]
                disk_new[f] = a
        else:
            disk_new = {f: np.full((n, len(self.disk_cols)), np.nan) for f in DISK_FIELDS}

        self.t = cat(self.t, new_t)
        self.interval = cat(self.interval, interval)
        self.iowait = cat(self.iowait, _as_float(batch.column("iowait_pct")))
        self.mem_used = cat(self.mem_used, _as_float(batch.column("host_mem_used_bytes")))
        self.mem_total = cat(self.mem_total, _as_float(batch.column("host_mem_total_bytes")))
        self.gpu = {f: cat(self.gpu[f], gpu_new[f]) for f in GPU_FIELDS}
        self.cpu = cat(self.cpu, cpu_new)
        self.disk = {f: cat(self.disk[f], disk_new[f]) for f in DISK_FIELDS}
        procs = batch.column("procs")
        if self.procs is not None and drop < len(self.procs):
            old = self.procs.slice(drop)
            self.procs = pa.concat_arrays([old, procs]) if old.type == procs.type else procs
        else:
            self.procs = procs
        job = batch.column("job") if "job" in batch.schema.names else None
        if job is not None and job.null_count == len(job):
            job = None  # v1 files and runs with no job source: nothing to keep or convert
        old_job = self.job.slice(drop) if self.job is not None and drop < len(self.job) else None
        if job is None and old_job is None:
            self.job = None
        else:
            filler = job.type if job is not None else old_job.type  # type: ignore[union-attr]
            old = old_job if old_job is not None else pa.nulls(len(self._job_rows) - drop, filler)
            new = job if job is not None else pa.nulls(n, filler)
            self.job = pa.concat_arrays([old, new]) if old.type == new.type else \
                pa.concat_arrays([pa.nulls(len(old), new.type), new])
        self.row0 += drop
        self._proc_rows = self._proc_rows[drop:] + [None] * n
        self._job_rows = self._job_rows[drop:] + [False] * n

    def _procs(self, lo: int, hi: int) -> list[list[ProcSample]]:
        """Process lists of global rows lo..hi-1, each converted once, when a view first needs it.

        When a row must be converted, the rows up to PROC_AHEAD past it are converted in the same call: the
        next views read the rows after these (the window slides forward), and a conversion costs a dozen
        Arrow calls whatever its length (one call per view for the judged stretch, one more for the window's
        first row that the engine's ``procs_known`` reads, were 18 % of ``diagnose DIR --summary``)."""
        a, b = lo - self.row0, hi - self.row0
        rows = self._proc_rows
        try:
            first = rows.index(None, a, b)  # the first row not converted yet (a C loop: a generator was 2 %)
        except ValueError:
            pass
        else:
            _fill_runs(rows, first, min(len(rows), max(b, first + PROC_AHEAD)), None, self._convert_procs)
        return [r if r is not None else [] for r in rows[a:b]]

    def _convert_procs(self, a: int, b: int) -> list[list[ProcSample]]:
        """Buffer rows a..b-1 of the procs column as ProcSample lists: one to_pylist per field, not per row."""
        if self.procs is None or pa.types.is_null(self.procs.type):
            return [[] for _ in range(b - a)]
        part = self.procs.slice(a, b - a)
        rows, _pos, values = _list_layout(part)
        if values is None or not len(values):
            return [[] for _ in range(b - a)]
        cols = []
        for name in _PROC_FIELDS:
            arr = _field(values, name)
            col = _pylist(arr) if arr is not None else [None] * len(values)
            if name in ("workers_cpu_pct", "worker_pids") and None in col:
                col = [x if x is not None else [] for x in col]  # a list each, never None
            cols.append(col)
        # positional, in _PROC_FIELDS' order (ProcSample's own), built by map in C and cut into rows by the
        # rows' value counts (values are in row order): a Python loop appending row by row was 4 %
        objs = list(map(ProcSample, *cols))
        bounds = [0, *np.cumsum(np.bincount(rows, minlength=b - a)).tolist()]
        return [objs[x:y] for x, y in itertools.pairwise(bounds)]

    def _jobs(self, lo: int, hi: int) -> list[JobSample | None]:
        """The jobs of global rows lo..hi-1 (None: no job source at that tick), each converted once."""
        a, b = lo - self.row0, hi - self.row0
        rows = self._job_rows
        job = self.job
        if job is None:
            return [None] * (b - a)
        _fill_runs(rows, a, b, False, lambda i, j: [_job_from_row(r) for r in job.slice(i, j - i).to_pylist()])
        return [r if r is not False else None for r in rows[a:b]]

    def view(self, lo: int, hi: int) -> WindowView:
        """The window of global rows lo..hi-1, as RollingWindow.view() would give it at row hi-1."""
        a, b = lo - self.row0, hi - self.row0
        last = hi - 1
        g = sum(1 for r in self.gpu_first if r <= last)
        c = sum(1 for r in self.cpu_first if r <= last)
        d = sum(1 for r in self.disk_first if r <= last)
        by_col = sorted(self.gpu_cols, key=self.gpu_cols.__getitem__)[:g]
        order = np.argsort(np.asarray(by_col, dtype=int), kind="stable")
        in_order = bool(np.all(order == np.arange(order.size)))
        # Slices, not copies, where they are contiguous already (a RollingWindow's view is contiguous: the
        # same memory layout, so numpy reduces in the same order): the buffer's arrays are never written in
        # place (push concatenates into new ones), so a slice stays as safe to keep as a copy. 2 % of the
        # summary was these copies.
        keep = np.ascontiguousarray
        return WindowView(
            t=self.t[a:b],
            interval_s=self.interval[a:b],
            gpu={f: (keep(v[a:b, :g]) if in_order else v[a:b, :g][:, order]) for f, v in self.gpu.items()},
            gpu_indexes=[by_col[i] for i in order],
            cpu=keep(self.cpu[a:b, :c]),
            iowait=self.iowait[a:b],
            host_mem_used=self.mem_used[a:b],
            host_mem_total=self.mem_total[a:b],
            disk={f: keep(v[a:b, :d]) for f, v in self.disk.items()},
            disk_names=sorted(self.disk_cols, key=self.disk_cols.__getitem__)[:d],
            procs=cast("list[list[ProcSample]]", _LazyProcs(self, lo, hi)),
            jobs=cast("list[JobSample | None]", _LazyJobs(self, lo, hi)),
        )


class _LazyProcs(Sequence[list[ProcSample]]):
    """The process lists of a view's rows, converted from Arrow only for the rows the engine reads (it
    reads the judged stretch, the last few seconds; converting the whole window was a third of the time).
    Valid while the buffer it reads from holds those rows: during the engine call it was made for."""

    def __init__(self, cols: _Columns, lo: int, hi: int) -> None:
        self._cols, self._lo, self._hi = cols, lo, hi

    def _rows(self, a: int, b: int) -> list[Any]:
        return self._cols._procs(a, b)

    def __len__(self) -> int:
        return self._hi - self._lo

    @overload
    def __getitem__(self, i: int) -> list[ProcSample]: ...
    @overload
    def __getitem__(self, i: slice) -> list[list[ProcSample]]: ...

    def __getitem__(self, i: int | slice) -> list[ProcSample] | list[list[ProcSample]]:
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if b <= a:
                return []
            rows = self._rows(self._lo + a, self._lo + b)
            return rows[::step] if step != 1 else rows
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._rows(self._lo + i, self._lo + i + 1)[0]  # type: ignore[no-any-return]


class _LazyJobs(_LazyProcs):
    """The jobs of a view's rows (trace v2), converted from Arrow only where the job rules read them."""

    def _rows(self, a: int, b: int) -> list[Any]:
        return self._cols._jobs(a, b)


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

    cols = _Columns()
    raws: list[Verdict] = []
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
    return Judged(points, raws, starts, group_of, nominal, ivs, stride, warn)


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
    starts, points, group_of, raws = jd.starts, jd.points, jd.group_of, jd.raws

    segs: list[Segment] = []
    gaps: list[Gap] = []
    pt = src.t[points]
    for gi, a in enumerate(starts):
        sel = np.flatnonzero(group_of == gi)
        if sel.size == 0:
            continue
        g_raws = [raws[i] for i in sel]
        g_t = [float(x) for x in pt[sel]]
        keys = smoothed_keys(g_t, g_raws, thresholds, nominal * stride)
        begin = first_start(src, jd, a)
        if segs:
            gaps.append(Gap(segs[-1].end, max(begin, segs[-1].end)))
        group_segs: list[Segment] = []
        members: list[list[Verdict]] = []
        prev = a - 1
        for j, (raw, key) in enumerate(zip(g_raws, keys, strict=True)):
            p = int(points[sel[j]])
            covered = p - prev
            prev = p
            end = _dt(src.t[p])
            if group_segs and (group_segs[-1].pattern, group_segs[-1].bottleneck) == key:
                group_segs[-1].end = end
                group_segs[-1].ticks += covered
                members[-1].append(raw)
                continue
            start = group_segs[-1].end if group_segs else begin  # contiguous inside a stretch
            group_segs.append(Segment(key[0], key[1], [], 0.0, [], [], start=start, end=end, ticks=covered))
            members.append([raw])
        for seg, group in zip(group_segs, members, strict=True):
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
        segs.extend(group_segs)
    return Timeline(segs, gaps, nominal, n, stride, warn)


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), tz=UTC)


# -- reading ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class LoadedTrace:
    ticks: list[Tick]
    interval_s: float
    host: HostInfo
    notice: str | None = None  # the reader's word on a crash leftover or a torn last tick


def load_trace(path: Path) -> LoadedTrace:
    """Read a trace-v1 file (Parquet or a crash leftover) through the project's reader, as Python ticks (for
    small recordings and tests; ``diagnose`` streams with :func:`open_source`); UserError if bad."""
    from gpu_triage.trace.reader import open_trace

    tf = open_trace(path)
    return LoadedTrace(list(tf.ticks(0, tf.n)), float(tf.interval_s), tf.host, tf.notice)


def _meta_interval(meta: dict[bytes, bytes] | None) -> float | None:
    from gpu_triage.trace.layout import META_INTERVAL

    raw = (meta or {}).get(META_INTERVAL)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def source_from_trace(tf: Any, batch_rows: int = BATCH_ROWS) -> TraceSource:
    """A TraceSource over an already opened TraceFile (its table is in memory: crash leftovers, compare)."""
    table = tf.table  # the reader has sorted it, dropped repeated timestamps and nulled impossible values
    t = np.asarray(tf.timestamps, dtype=np.float64)
    notice = tf.notice
    interval = _as_float(table.column("interval_s").combine_chunks())
    meta = _meta_interval(table.schema.metadata)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from table.to_batches(max_chunksize=batch_rows)

    return TraceSource(tf.path, tf.host, int(t.size), t, interval, meta, batches, notice, head=tf)


def open_source(path: Path, batch_rows: int = BATCH_ROWS) -> TraceSource:
    """Open a recording for streaming: a Parquet file is read ``batch_rows`` rows at a time (only its
    timestamps and intervals up front); anything else goes through the project's reader whole."""
    from gpu_triage.trace import reader

    tf_path = Path(path).expanduser()
    is_parquet = False
    try:
        if tf_path.is_file():
            with tf_path.open("rb") as fh:
                is_parquet = fh.read(4) == reader.PARQUET_MAGIC
    except OSError:
        pass  # the reader says what is wrong with it
    if not is_parquet:
        return source_from_trace(reader.open_trace(tf_path), batch_rows)
    try:
        # pre_buffer (the default) keeps every column chunk read so far: the whole file in memory by the end
        pf = pq.ParquetFile(tf_path, pre_buffer=False)
        meta = pf.schema_arrow.metadata
        head = next(pf.iter_batches(batch_size=16), None)
        if head is None:
            raise UserError(f"{tf_path} holds no ticks (0 rows): nothing to read")
        # the reader's own checks (schema number, ts, column types) and host metadata, on the first rows
        first = reader._build_trace(tf_path, pa.Table.from_batches([head]).replace_schema_metadata(meta),
                                    recovered=False, notices=[])
        names = pf.schema_arrow.names
        cols = pq.read_table(tf_path, columns=[c for c in ("ts", "interval_s") if c in names])
        ts = reader._as_ts(tf_path, cols.column("ts"))
        iv = cols.column("interval_s") if "interval_s" in names else pa.chunked_array([pa.nulls(len(ts), pa.float64())])
        # the same cleaning as every batch gets below, so that rows line up
        small, _ = reader._in_range(pa.table({"ts": ts, "interval_s": iv}))
        small = small.filter(pc.is_valid(small.column("ts")))
        t = pc.cast(small.column("ts"), pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / 1e6
        interval = _as_float(small.column("interval_s").combine_chunks())
    except UserError:
        raise
    except Exception as exc:  # pyarrow raises many types for damaged files; the user needs one line
        raise UserError(f"{tf_path}: not a readable gpu-triage recording ({reader._short(exc)})") from exc
    if t.size > 1 and not np.all(np.diff(t) > 0):  # out of order: read whole, sorted
        return source_from_trace(reader.open_trace(tf_path), batch_rows)

    out_of_range: dict[str, int] = {}

    def batches() -> Iterator[pa.RecordBatch]:
        out_of_range.clear()
        try:
            for b in pf.iter_batches(batch_size=batch_rows, use_threads=False):
                # the reader's own normalisation and range checks, one batch at a time
                table = reader._normalise(tf_path, pa.Table.from_batches([b]).replace_schema_metadata(meta))
                table, counts = reader._in_range(table)
                for k, v in counts.items():
                    out_of_range[k] = out_of_range.get(k, 0) + v
                if table.column("ts").null_count:
                    table = table.filter(pc.is_valid(table.column("ts")))
                yield from table.combine_chunks().to_batches()
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"{tf_path}: damaged part of the recording ({reader._short(exc)})") from exc

    # the head's own count of out-of-range values is replaced by the whole file's (see diagnose_trace)
    notices = [x for x in first.notices if "values out of range ignored" not in x]
    return TraceSource(tf_path, first.host, int(t.size), t, interval, _meta_interval(meta), batches,
                       "; ".join(notices) or None, out_of_range, head=first)


# -- the command ---------------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """``42 s``, ``3 min 20 s``, ``3 h 12 min``, ``2 d 5 h``: what a reader takes in at a glance."""
    s = max(0.0, float(seconds))
    if s < 100:
        return f"{s:.0f} s"
    m = int(s // 60)
    if m < 60:
        return f"{m} min {int(s - 60 * m)} s" if s - 60 * m >= 1 else f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    if d >= 365:
        return f"{d} d ({d / 365.25:.1f} years)"
    return f"{d} d {h} h" if h else f"{d} d"


def _local(ts: datetime, tz: tzinfo | None) -> datetime:
    """``ts`` in ``tz``; None: this machine's local zone (what the TZ variable says)."""
    return ts.astimezone(tz) if tz is not None else ts.astimezone()


def _clock(entries: list[Segment | Gap], today: datetime | None = None, tz: tzinfo | None = UTC) -> str:
    """strftime format for the times: the date too when the recording spans days or is not from today
    (days as they fall in ``tz``; None: the local zone)."""
    if not entries:
        return "%H:%M:%S"
    return clock_format(entries[0].start, entries[-1].end, today, tz)


def clock_format(first: datetime, last: datetime, today: datetime | None = None, tz: tzinfo | None = UTC) -> str:
    """strftime format for the times of a recording from ``first`` to ``last`` (``replay`` uses it too),
    days as they fall in ``tz`` (None: the local zone)."""
    first, last = _local(first, tz), _local(last, tz)
    today = _local(today or datetime.now(UTC), tz)
    same_day = first.date() == last.date() == today.date()
    return "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"


def render_timeline(path: Path, tl: Timeline, today: datetime | None = None, tz: tzinfo | None = None) -> str:
    """The plain-text report of ``gpu-triage diagnose``: one block per segment, one line per gap. Times in
    ``tz`` (None: the local zone, ``diagnose --utc``: UTC), each named by its zone's abbreviation."""
    entries = tl.entries()
    fmt = _clock(entries, today, tz)

    def span(start: datetime, end: datetime) -> str:
        a, b = _local(start, tz), _local(end, tz)
        return f"{a:{fmt}} - {b:{fmt}} {b.tzname() or b.strftime('%z')}"

    n = len(tl.segments)
    head = f"{path}: {tl.ticks} ticks of {tl.interval_s:g} s, {n} segment{'' if n == 1 else 's'}"
    if tl.gaps:
        head += f", {len(tl.gaps)} gap{'s' if len(tl.gaps) > 1 else ''} ({human_duration(sum(g.seconds for g in tl.gaps))})"
    if tl.stride > 1:
        head += f"; judged every {tl.stride} ticks ({human_duration(tl.stride * tl.interval_s)})"
    lines = [head]
    for e in entries:
        lines.append("")
        if isinstance(e, Gap):
            lines.append(f"— gap {human_duration(e.seconds)} — ({span(e.start, e.end)}: nothing recorded)")
            continue
        dur = human_duration((e.end - e.start).total_seconds())
        gpus = ", ".join(map(str, e.gpus)) if e.gpus else "-"
        lines.append(f"{span(e.start, e.end)} ({dur})  {e.pattern} / {e.bottleneck}  "
                     f"cards {gpus}  {format_confidence(e.confidence)}")
        lines.extend(f"  - {x}" for x in e.evidence)
        lines.extend(f"  > {x}" for x in e.advice)
    return "\n".join(lines)
