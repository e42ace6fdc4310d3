"""Open a recording: a trace-v1 Parquet file, or the Arrow stream a killed recorder left.

Opening keeps the data as one Arrow table and converts rows to :class:`~gpu_triage.model.Tick` only when
asked (``tick(i)``, ``ticks(a, b)``): a day of 8 cards at 2 s (43,200 rows) opens in a fraction of a
second and any position is a slice away. Readers accept older and newer writers: columns and struct fields
they do not know are ignored, missing optional columns read as null; only ``ts`` is required. Anything
else (not a trace, truncated, empty, wrong schema number) is a :class:`UserError` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpu_triage.errors import UserError
from gpu_triage.model import READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION, HostInfo, Tick
from gpu_triage.trace.bounds import bound_column, check_footer, host_metadata
from gpu_triage.trace.layout import META_HOST, META_INTERVAL, META_SCHEMA
from gpu_triage.trace.ranges import in_range
from gpu_triage.trace.row_codec import host_from_json
from gpu_triage.trace.schema import (
    COLUMNS,
    RECORDED_INTERVAL_RANGE_S,
    REQUIRED_STRUCT_FIELDS,
    TRACE_SCHEMA,
    TS_TYPE,
    rows_to_ticks,
)
from gpu_triage.trace.stream import (
    STREAM_SUFFIX,
    StreamRead,
    checked_name,
    checked_open,
    read_stream,
    read_stream_table,
    regular_file,
    shown,
    stream_holder,
    stream_path_for,
)

PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"


class TraceFile:
    """One opened recording. Rows stay in Arrow until asked for; see the module docstring."""

    def __init__(
        self,
        path: Path,
        table: pa.Table,
        host: HostInfo,
        interval_s: float,
        *,
        recovered: bool = False,
        notice: str | None = None,
        notices: list[str] | None = None,
        out_of_range: dict[str, int] | None = None,
        duplicates_dropped: int = 0,
        reordered: bool = False,
    ) -> None:
        self.path = path
        self.table = table  # normalised: trace-v1 columns in order, sorted by ts, no repeated ts, values in range
        self.host = host
        self.interval_s = interval_s  # plausible (RECORDED_INTERVAL_RANGE_S): metadata, else derived from timestamps
        self.recovered = recovered  # True: read from a crash leftover stream, not a finished Parquet
        # what the user should hear about how the file was read, each said once, one line each
        self.notices: list[str] = list(notices or ([notice] if notice else []))
        self.out_of_range: dict[str, int] = dict(out_of_range or {})  # "gpus.util_pct" -> values read as null
        self.duplicates_dropped = duplicates_dropped  # ticks dropped for repeating an earlier tick's ts
        self.reordered = reordered  # the file's ticks were not in time order and were sorted
        self.damaged_at: int | None = None  # a stream: where unreadable bytes begin (see stream.read_stream)
        self.file: BinaryIO | None = None  # the file it was read from, open (stream.checked_open)
        ts = table.column("ts")
        self.timestamps: np.ndarray = (
            pc.cast(ts, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / 1e6
        )

    @property
    def notice(self) -> str | None:
        """Every notice on one line (what diagnose, compare, recover and the replay banner show), or None."""
        return "; ".join(self.notices) if self.notices else None

    @property
    def n(self) -> int:
        return self.table.num_rows

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def duration_s(self) -> float:
        return float(self.timestamps[-1] - self.timestamps[0]) if self.n else 0.0

    def tick(self, i: int) -> Tick:
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"tick {i} out of range 0..{self.n - 1}")
        return rows_to_ticks(self.table.slice(i, 1))[0]

    def ticks(self, start: int = 0, stop: int | None = None) -> list[Tick]:
        start, stop, _ = slice(start, stop).indices(self.n)
        if stop <= start:
            return []
        return rows_to_ticks(self.table.slice(start, stop - start))

    def iter_ticks(self, chunk: int = 512) -> Iterator[Tick]:
        """Every tick in order, converting ``chunk`` rows at a time."""
        for start in range(0, self.n, chunk):
            yield from self.ticks(start, start + chunk)

    def index_at(self, t_seconds: float) -> int:
        """Index of the last tick at or before ``t_seconds`` (epoch seconds), clamped to the file."""
        i = int(np.searchsorted(self.timestamps, t_seconds, side="right")) - 1
        return min(max(i, 0), max(self.n - 1, 0))


def open_trace(path: Path | str, fh: BinaryIO | None = None) -> TraceFile:
    """Open a Parquet recording or a leftover ``.arrows`` stream; UserError (exit 2) on anything else.

    The file is opened once (:func:`~gpu_triage.trace.stream.checked_open`: a link refused, a FIFO refused
    without waiting for a writer, a regular file checked on its descriptor) and read through that
    descriptor only, so a name swapped meanwhile changes nothing. A stream that a live recorder is writing
    is read as it stands, read-only. ``fh``: the file already opened so, read from its start.
    """
    path = checked_name(path, what="cannot read", hint="give a recording's file name")
    notices: list[str] = []
    if fh is None and not regular_file(path):
        stream = stream_path_for(path)
        if regular_file(stream):
            held = stream_holder(stream)
            if held is not None:  # `recover` refuses a stream whose recorder is alive: no advice to run it
                notices.append(f"{shown(path)} does not exist yet; {held} now: reading the ticks so far")
            else:
                notices.append(
                    f"{shown(path)} does not exist but {stream.name} does (a recording that did not finish): "
                    f"reading that; `gpu-triage recover {stream}` makes the Parquet"
                )
            path = stream
        else:
            raise UserError(f"{shown(path)}: no such file: check the path")
    fh = fh if fh is not None else checked_open(path)
    try:
        fh.seek(0)
        head = fh.read(8)
        fh.seek(0)
    except OSError as exc:
        raise UserError(f"{shown(path)}: cannot read ({exc.strerror or exc})") from exc
    if not head:
        raise UserError(f"{shown(path)} is empty (0 bytes): not a gpu-triage recording")

    recovered = False  # a Parquet or Arrow file; streams return from read_leftover
    try:
        if head.startswith(PARQUET_MAGIC):
            pf = pq.ParquetFile(fh)
            check_footer(pf, shown(path))
            table = pf.read()
        elif head.startswith(ARROW_FILE_MAGIC):
            table = pa.ipc.open_file(fh).read_all()
        else:
            return read_leftover(path, notices, fh)[1]
    except UserError:
        raise
    except Exception as exc:  # pyarrow raises many types for damaged files; the user needs one line
        raise UserError(f"{shown(path)}: not a readable gpu-triage recording ({_short(exc)})") from exc

    trace = _build_trace(path, table, recovered=recovered, notices=notices)
    trace.file = fh
    return trace


def read_leftover(path: Path, notices: list[str] | None = None,
                  fh: BinaryIO | None = None) -> tuple[StreamRead, TraceFile]:
    """A stream as read (every good batch, untouched: what ``recover`` writes) and as a checked TraceFile;
    ``fh``: the stream already opened (:func:`~gpu_triage.trace.stream.checked_open`)."""
    notices = list(notices or [])
    got = read_stream(path, fh)
    line = got.damage_line(path)
    if line and (got.damaged_at is not None or not notices):
        notices.append(line)
    trace = _build_trace(path, got.table, recovered=True, notices=notices)
    trace.damaged_at = got.damaged_at
    return got, trace


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _build_trace(path: Path, table: pa.Table, *, recovered: bool, notices: list[str]) -> TraceFile:
    meta = table.schema.metadata or {}
    version = meta.get(META_SCHEMA)
    if version is not None and version.decode(errors="replace") not in READABLE_SCHEMA_VERSIONS:
        raise UserError(
            f"{shown(path)} uses trace schema {version.decode(errors='replace')!r}; this gpu-triage reads schemas "
            f"{', '.join(READABLE_SCHEMA_VERSIONS)} (writes {SCHEMA_VERSION}): use a gpu-triage version that "
            "matches the recorder"
        )
    if "ts" not in table.column_names:
        raise UserError(f"{shown(path)} has no 'ts' column: not a gpu-triage recording (trace v1 needs ts)")
    table = _normalise(path, table)
    table, out_of_range = in_range(table)
    table = table.filter(pc.is_valid(table.column("ts"))) if table.column("ts").null_count else table
    if table.num_rows == 0:
        damage = next((line for line in notices if "damaged at byte" in line), None)
        raise UserError(damage or f"{shown(path)} holds no ticks (0 rows): nothing to read")
    table, reordered, duplicates = _in_time_order(table)
    if out_of_range:
        total = sum(out_of_range.values())
        worst = ", ".join(f"{k} {v}" for k, v in sorted(out_of_range.items(), key=lambda kv: -kv[1])[:3])
        notices.append(f"{total} values out of range ignored (read as n/a; {worst})")
    if reordered:
        notices.append("ticks were out of time order: sorted by time")
    if duplicates:
        notices.append(f"{duplicates} ticks repeating an earlier tick's timestamp dropped")

    host = HostInfo()
    if meta.get(META_HOST):
        obj = host_metadata(meta)  # None past MAX_HOST_META_BYTES, or no JSON object
        try:
            if obj is None:
                raise ValueError("not a JSON object of at most MAX_HOST_META_BYTES")
            host = host_from_json(obj)
        except (ValueError, TypeError, AttributeError):
            notices.append(f"{shown(path)}: host metadata is unreadable and is ignored")
    interval_s, said = _nominal_interval(meta, table)
    if said:
        notices.append(said)
    return TraceFile(
        path,
        table,
        host,
        interval_s,
        recovered=recovered,
        notices=notices,
        out_of_range=out_of_range,
        duplicates_dropped=duplicates,
        reordered=reordered,
    )


def _in_time_order(table: pa.Table) -> tuple[pa.Table, bool, int]:
    """Rows sorted by ts (stable) and a tick repeating an earlier one's exact timestamp dropped: nothing
    downstream ever sees a negative or zero duration. Returns the table, whether it was reordered and how
    many rows were dropped."""
    ts = pc.cast(table.column("ts"), pa.int64()).to_numpy(zero_copy_only=False)
    if len(ts) < 2:
        return table, False, 0
    step = np.diff(ts)
    reordered = bool((step < 0).any())
    if reordered:
        order = np.argsort(ts, kind="stable")
        table = table.take(pa.array(order))
        ts = ts[order]
        step = np.diff(ts)
    repeats = step == 0
    duplicates = int(repeats.sum())
    if duplicates:
        table = table.filter(pa.array(np.concatenate(([True], ~repeats))))
    if reordered or duplicates:
        table = table.combine_chunks()
    return table, reordered, duplicates


def _normalise(path: Path, table: pa.Table) -> pa.Table:
    """Exactly the trace-v1 columns in order: unknown ones dropped, missing ones null, ts as UTC us."""
    columns: list[pa.ChunkedArray] = []
    n = table.num_rows
    for name in COLUMNS:
        want = TRACE_SCHEMA.field(name).type
        if name not in table.column_names:
            columns.append(pa.chunked_array([pa.nulls(n, type=want)], type=want))
            continue
        col = bound_column(name, table.column(name))  # the contract's lengths first: nothing longer is ever expanded
        if pa.types.is_null(col.type) and name != "ts":  # all null, as another tool writes it: typed nulls, as
            columns.append(pa.chunked_array([pa.nulls(n, type=want)], type=want))  # a missing column reads
            continue
        if name == "ts":
            col = _as_ts(path, col)
        elif name in ("job", "verdict"):
            col = _job_column(path, col, want, name)
        elif name in REQUIRED_STRUCT_FIELDS:
            _check_struct_list(path, name, col.type)
        elif not _compatible_scalar(col.type, want):
            raise UserError(f"{path}: column {name!r} has type {col.type}, expected {want}: not a trace-v1 file")
        columns.append(col)
    out = pa.Table.from_arrays(columns, names=list(COLUMNS)).replace_schema_metadata(table.schema.metadata)
    if out.column("ts").null_count:
        out = out.filter(pc.is_valid(out.column("ts")))
    return out


def _job_column(path: Path, col: pa.ChunkedArray, want: pa.DataType, name: str = "job") -> pa.ChunkedArray:
    """A struct column (the job, the verdict) as this version's struct: fields it lacks are null, fields it
    does not know dropped."""
    if pa.types.is_null(col.type):
        return pa.chunked_array([pa.nulls(len(col), type=want)], type=want)
    if col.type == want:
        return col
    if not pa.types.is_struct(col.type):
        raise UserError(
            f"{shown(path)}: column {name!r} has type {col.type}, expected a struct: not a gpu-triage trace"
        )
    rows = [_fit_struct(v, want) for v in col.to_pylist()]
    return pa.chunked_array([pa.array(rows, type=want)], type=want)


def _fit_struct(value: object, want: pa.DataType) -> object:
    if not isinstance(value, dict):
        return None
    names = {want.field(i).name for i in range(want.num_fields)}
    out = {k: v for k, v in value.items() if k in names}
    if "ranks" in out and isinstance(out["ranks"], list):
        rank_type = want.field("ranks").type.value_type
        rank_names = {rank_type.field(i).name for i in range(rank_type.num_fields)}
        out["ranks"] = [{k: v for k, v in r.items() if k in rank_names} for r in out["ranks"] if isinstance(r, dict)]
    return out


def _as_ts(path: Path, col: pa.ChunkedArray) -> pa.ChunkedArray:
    typ = col.type
    if pa.types.is_timestamp(typ):
        if typ.tz is None:  # a naive timestamp from another tool: trace v1 says UTC
            col = pc.assume_timezone(col, "UTC")
        return pc.cast(col, TS_TYPE)
    raise UserError(f"{path}: column 'ts' has type {typ}, expected a timestamp: not a trace-v1 file")


def _check_struct_list(path: Path, name: str, typ: pa.DataType) -> None:
    ok = (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and pa.types.is_struct(typ.value_type)
    if ok:
        have = {typ.value_type.field(i).name for i in range(typ.value_type.num_fields)}
        missing = [f for f in REQUIRED_STRUCT_FIELDS[name] if f not in have]
        if not missing:
            return
        raise UserError(f"{path}: column {name!r} lacks field(s) {', '.join(missing)}: not a trace-v1 file")
    if pa.types.is_null(typ):
        return
    raise UserError(f"{path}: column {name!r} has type {typ}, expected a list of structs: not a trace-v1 file")


def _compatible_scalar(have: pa.DataType, want: pa.DataType) -> bool:
    if pa.types.is_null(have):
        return True
    if pa.types.is_list(want):
        return (pa.types.is_list(have) or pa.types.is_large_list(have)) and _compatible_scalar(
            have.value_type, want.value_type
        )
    return pa.types.is_integer(have) or pa.types.is_floating(have)


def _plausible(v: float) -> bool:
    return bool(np.isfinite(v)) and RECORDED_INTERVAL_RANGE_S[0] <= v <= RECORDED_INTERVAL_RANGE_S[1]


def _nominal_interval(meta: dict[bytes, bytes], table: pa.Table) -> tuple[float, str | None]:
    """The file's tick interval, and a line when its metadata had to be overruled.

    Metadata first; an implausible one (under 1 ms, over a day, NaN, inf, not a number) is ignored and the
    median time between ticks taken instead: believed, a metadata interval of 1e-9 s would size the offline
    diagnosis's window for 3e11 ticks. Whatever is returned lies in RECORDED_INTERVAL_RANGE_S.
    """
    from_ts = _median_step(table)
    raw = meta.get(META_INTERVAL)
    if raw:
        try:
            v = float(raw)
        except ValueError:
            v = float("nan")
        if _plausible(v):
            return v, None
        fallback = from_ts if from_ts is not None else _per_tick_interval(table) or 2.0
        fallback = float(np.clip(fallback, *RECORDED_INTERVAL_RANGE_S))
        shown_raw = raw[:40].decode(errors="replace")
        return fallback, (
            f"metadata interval_s {shown_raw!r} is not a plausible tick interval: using {fallback:g} s, "
            + ("the median time between ticks" if from_ts is not None else "the default")
        )
    v = _per_tick_interval(table) or from_ts or 2.0
    return float(np.clip(v, *RECORDED_INTERVAL_RANGE_S)), None


def _per_tick_interval(table: pa.Table) -> float | None:
    intervals = table.column("interval_s").drop_null()  # already in range: see _in_range
    if len(intervals):
        v = float(np.median(intervals.to_numpy()))
        if _plausible(v):
            return v
    return None


def _median_step(table: pa.Table) -> float | None:
    if table.num_rows < 2:
        return None
    ts = pc.cast(table.column("ts"), pa.int64()).to_numpy(zero_copy_only=False)
    d = np.diff(ts) / 1e6
    d = d[d > 0]
    return float(np.median(d)) if len(d) else None


__all__ = ["STREAM_SUFFIX", "TraceFile", "open_trace", "read_leftover", "read_stream_table"]
