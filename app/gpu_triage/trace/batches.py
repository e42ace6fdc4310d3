"""The public streaming reader of a recording: its timestamps and intervals up front, the rest batch by batch.

:func:`iter_batches` opens a Parquet recording for streaming (``batch_rows`` rows at a time, each batch
normalised and range-checked as :func:`~gpu_triage.trace.reader.open_trace` checks a whole file);
anything else (a crash leftover, a file out of order) is read whole through the reader. The offline
diagnosis (``gpu_triage.offline``) and ``compare`` read recordings through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo
from gpu_triage.trace.bounds import check_footer
from gpu_triage.trace.ranges import in_range
from gpu_triage.trace.stream import checked_open, shown

BATCH_ROWS = 4096  # rows read at a time: 1,024 cost 70 % more CPU (per-call overhead), 8,192 ~100 MB more RSS


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
    # the recording open (trace.stream.checked_open), for whatever else reads it (the owners): never its name again
    file: Any = None


def as_float(arr: pa.Array) -> np.ndarray:
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan)
    return np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def meta_interval(meta: dict[bytes, bytes] | None) -> float | None:
    from gpu_triage.trace.layout import META_INTERVAL

    raw = (meta or {}).get(META_INTERVAL)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def batches_of(tf: Any, batch_rows: int = BATCH_ROWS) -> TraceSource:
    """A TraceSource over an already opened TraceFile (its table is in memory: crash leftovers, compare)."""
    table = tf.table  # the reader has sorted it, dropped repeated timestamps and nulled impossible values
    t = np.asarray(tf.timestamps, dtype=np.float64)
    notice = tf.notice
    interval = as_float(table.column("interval_s").combine_chunks())
    meta = meta_interval(table.schema.metadata)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from table.to_batches(max_chunksize=batch_rows)

    return TraceSource(tf.path, tf.host, int(t.size), t, interval, meta, batches, notice, head=tf,
                       file=getattr(tf, "file", None))


def iter_batches(path: Path, batch_rows: int = BATCH_ROWS) -> TraceSource:
    """Open a recording for streaming: a Parquet file is read ``batch_rows`` rows at a time (only its
    timestamps and intervals up front); anything else goes through the project's reader whole."""
    from gpu_triage.trace import reader

    tf_path = Path(path).expanduser()
    try:
        regular = tf_path.is_file()
    except OSError:  # a name too long to look up
        regular = False
    if not regular:  # a missing file, a leftover stream, a FIFO, a bad name: the reader says which
        return batches_of(reader.open_trace(tf_path), batch_rows)
    # opened once and read through this descriptor only: the name may be a FIFO or another file a moment later
    fh = checked_open(tf_path)
    try:
        is_parquet = fh.read(4) == reader.PARQUET_MAGIC
    except OSError:
        is_parquet = False  # the reader says what is wrong with it
    if not is_parquet:
        return batches_of(reader.open_trace(tf_path, fh), batch_rows)
    try:
        # pre_buffer (the default) keeps every column chunk read so far: the whole file in memory by the end
        fh.seek(0)
        pf = pq.ParquetFile(fh, pre_buffer=False)
        check_footer(pf, shown(tf_path))  # lists past the contract's limits: refused before anything is decoded
        meta = pf.schema_arrow.metadata
        head = next(pf.iter_batches(batch_size=16), None)
        if head is None:
            raise UserError(f"{tf_path} holds no ticks (0 rows): nothing to read")
        # the reader's own checks (schema number, ts, column types) and host metadata, on the first rows
        first = reader._build_trace(tf_path, pa.Table.from_batches([head]).replace_schema_metadata(meta),
                                    recovered=False, notices=[])
        names = pf.schema_arrow.names
        cols = pf.read(columns=[c for c in ("ts", "interval_s") if c in names], use_threads=False)
        ts = reader._as_ts(tf_path, cols.column("ts"))
        iv = cols.column("interval_s") if "interval_s" in names else pa.chunked_array([pa.nulls(len(ts), pa.float64())])
        # the same cleaning as every batch gets below, so that rows line up
        small, _ = in_range(pa.table({"ts": ts, "interval_s": iv}))
        small = small.filter(pc.is_valid(small.column("ts")))
        t = pc.cast(small.column("ts"), pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64) / 1e6
        interval = as_float(small.column("interval_s").combine_chunks())
    except UserError:
        raise
    except Exception as exc:  # pyarrow raises many types for damaged files; the user needs one line
        raise UserError(f"{tf_path}: not a readable gpu-triage recording ({reader._short(exc)})") from exc
    if t.size > 1 and not np.all(np.diff(t) > 0):  # out of order: read whole, sorted
        return batches_of(reader.open_trace(tf_path, fh), batch_rows)

    out_of_range: dict[str, int] = {}

    def batches() -> Iterator[pa.RecordBatch]:
        out_of_range.clear()
        try:
            for b in pf.iter_batches(batch_size=batch_rows, use_threads=False):
                # the reader's own normalisation and range checks, one batch at a time
                table = reader._normalise(tf_path, pa.Table.from_batches([b]).replace_schema_metadata(meta))
                table, counts = in_range(table)
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
    return TraceSource(tf_path, first.host, int(t.size), t, interval, meta_interval(meta), batches,
                       "; ".join(notices) or None, out_of_range, head=first, file=fh)
