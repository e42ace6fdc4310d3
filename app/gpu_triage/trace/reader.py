"""Open a recording: a trace-v1 Parquet file, or the Arrow stream a killed recorder left.

Opening keeps the data as one Arrow table and converts rows to :class:`~gpu_triage.model.Tick` only when
asked (``tick(i)``, ``ticks(a, b)``): a day of 8 cards at 2 s (43,200 rows) opens in a fraction of a
second and any position is a slice away. Readers accept older and newer writers: columns and struct fields
they do not know are ignored, missing optional columns read as null; only ``ts`` is required. Anything
else (not a trace, truncated, empty, wrong schema number) is a :class:`UserError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpu_triage.errors import UserError
from gpu_triage.model import SCHEMA_VERSION, HostInfo, Tick
from gpu_triage.trace.schema import (
    COLUMNS,
    META_HOST,
    META_INTERVAL,
    META_SCHEMA,
    REQUIRED_STRUCT_FIELDS,
    TRACE_SCHEMA,
    TS_TYPE,
    rows_to_ticks,
)
from gpu_triage.trace.writer import STREAM_SUFFIX, stream_path_for

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
    ) -> None:
        self.path = path
        self.table = table  # normalised: exactly the trace-v1 columns, in order
        self.host = host
        self.interval_s = interval_s
        self.recovered = recovered  # True: read from a crash leftover stream, not a finished Parquet
        self.notice = notice  # one line for the user about how the file was read, or None
        ts = table.column("ts")
        self.timestamps: np.ndarray = (
            pc.cast(ts, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / 1e6
        )

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


def open_trace(path: Path | str) -> TraceFile:
    """Open a Parquet recording or a leftover ``.arrows`` stream; UserError (exit 2) on anything else."""
    path = Path(path).expanduser()
    notice = None
    if not path.exists():
        stream = stream_path_for(path)
        if stream.is_file():
            notice = (
                f"{path} does not exist but {stream.name} does (a recording that did not finish): "
                f"reading that; `gpu-triage recover {stream}` makes the Parquet"
            )
            path = stream
        else:
            raise UserError(f"{path}: no such file: check the path")
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a recording: give a .parquet file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if not head:
        raise UserError(f"{path} is empty (0 bytes): not a gpu-triage recording")

    recovered = False
    try:
        if head.startswith(PARQUET_MAGIC):
            table = pq.read_table(path)
        elif head.startswith(ARROW_FILE_MAGIC):
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_file(source).read_all()
        else:
            table, complete = read_stream_table(path)
            recovered = True
            if not complete and notice is None:
                notice = f"{path}: the last tick was cut short (recorder stopped mid-write) and is skipped"
    except UserError:
        raise
    except Exception as exc:  # pyarrow raises many types for damaged files; the user needs one line
        raise UserError(f"{path}: not a readable gpu-triage recording ({_short(exc)})") from exc

    return _build_trace(path, table, recovered=recovered, notice=notice)


def read_stream_table(path: Path) -> tuple[pa.Table, bool]:
    """Every complete batch of an Arrow IPC stream, and whether the stream ended cleanly.

    A torn last batch (the recorder was killed while writing it) is dropped. Raises UserError when not
    even the schema can be read.
    """
    batches: list[pa.RecordBatch] = []
    complete = True
    try:
        with pa.OSFile(str(path), "rb") as source:
            reader = pa.ipc.open_stream(source)
            schema = reader.schema
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError, EOFError, pa.ArrowException):
                    complete = False
                    break
    except UserError:
        raise
    except Exception as exc:
        raise UserError(
            f"{path}: not a gpu-triage recording (neither Parquet nor an Arrow stream: {_short(exc)})"
        ) from exc
    # One batch per tick: combine so that slicing (seek) does not walk tens of thousands of chunks.
    if not batches:
        return pa.Table.from_batches([], schema=schema), complete
    # concat_batches measured 2.5x faster than Table.combine_chunks on 10,000 one-tick batches.
    return pa.Table.from_batches([pa.concat_batches(batches)]).replace_schema_metadata(schema.metadata), complete


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _build_trace(path: Path, table: pa.Table, *, recovered: bool, notice: str | None) -> TraceFile:
    meta = table.schema.metadata or {}
    version = meta.get(META_SCHEMA)
    if version is not None and version.decode(errors="replace") != SCHEMA_VERSION:
        raise UserError(
            f"{path} uses trace schema {version.decode(errors='replace')!r}; this gpu-triage reads schema "
            f"{SCHEMA_VERSION}: use a gpu-triage version that matches the recorder"
        )
    if "ts" not in table.column_names:
        raise UserError(f"{path} has no 'ts' column: not a gpu-triage recording (trace v1 needs ts)")
    table = _normalise(path, table)
    if table.num_rows == 0:
        raise UserError(f"{path} holds no ticks (0 rows): nothing to read")

    host = HostInfo()
    raw_host = meta.get(META_HOST)
    if raw_host:
        try:
            obj = json.loads(raw_host)
            if isinstance(obj, dict):
                host = HostInfo.from_json_obj(obj)
        except (ValueError, TypeError, AttributeError):
            notice = notice or f"{path}: host metadata is unreadable and is ignored"
    interval_s = _nominal_interval(meta, table)
    return TraceFile(path, table, host, interval_s, recovered=recovered, notice=notice)


def _normalise(path: Path, table: pa.Table) -> pa.Table:
    """Exactly the trace-v1 columns in order: unknown ones dropped, missing ones null, ts as UTC us."""
    columns: list[pa.ChunkedArray] = []
    n = table.num_rows
    for name in COLUMNS:
        want = TRACE_SCHEMA.field(name).type
        if name not in table.column_names:
            columns.append(pa.chunked_array([pa.nulls(n, type=want)], type=want))
            continue
        col = table.column(name)
        if name == "ts":
            col = _as_ts(path, col)
        elif name in REQUIRED_STRUCT_FIELDS:
            _check_struct_list(path, name, col.type)
        elif not _compatible_scalar(col.type, want):
            raise UserError(f"{path}: column {name!r} has type {col.type}, expected {want}: not a trace-v1 file")
        columns.append(col)
    out = pa.Table.from_arrays(columns, names=list(COLUMNS)).replace_schema_metadata(table.schema.metadata)
    if out.column("ts").null_count:
        out = out.filter(pc.is_valid(out.column("ts")))
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


def _nominal_interval(meta: dict[bytes, bytes], table: pa.Table) -> float:
    raw = meta.get(META_INTERVAL)
    if raw:
        try:
            v = float(raw)
            if v > 0 and np.isfinite(v):
                return v
        except ValueError:
            pass
    intervals = table.column("interval_s").drop_null()
    if len(intervals):
        v = float(np.median(intervals.to_numpy()))
        if v > 0 and np.isfinite(v):
            return v
    if table.num_rows >= 2:
        ts = pc.cast(table.column("ts"), pa.int64()).to_numpy(zero_copy_only=False)
        d = np.diff(ts) / 1e6
        d = d[d > 0]
        if len(d):
            return float(np.median(d))
    return 2.0


__all__ = ["STREAM_SUFFIX", "TraceFile", "open_trace", "read_stream_table"]
