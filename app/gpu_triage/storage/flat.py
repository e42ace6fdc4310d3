"""A day of one host as tables: the hourly files merged into one trace table (ticks in order, each once,
every tick's verdict), and the flat per-card table the fleet's queries read.

The flat table is one row per (host, ts, gpu): ``host`` (string) and ``date`` (Date, the tick's UTC day)
are columns inside the file, not only directory names, so that DuckDB, polars and pyarrow read the same
types from the same files (a ``date=`` directory is a DATE to DuckDB and a string to the other two). Then
every numeric field of the card (``GpuSample``, docs/trace-v2.md) and the tick's verdict: its pattern,
bottleneck and mechanism.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_triage.model import GpuSample, VerdictSample, trace_fields
from gpu_triage.trace.schema import TRACE_SCHEMA

VERDICT_TYPE = TRACE_SCHEMA.field("verdict").type
GPU_FIELDS = tuple(f.name for f in trace_fields(GpuSample) if f.numeric and f.name != "index")
VERDICT_FIELDS = ("pattern", "bottleneck", "mechanism")
_GPU_TYPE = TRACE_SCHEMA.field("gpus").type.value_type


def flat_schema() -> pa.Schema:
    """The flat table's columns, in order (the card's index is ``gpu``)."""
    fields = [pa.field("host", pa.string()), pa.field("date", pa.date32()),
              TRACE_SCHEMA.field("ts"), pa.field("gpu", pa.uint16())]
    fields += [_GPU_TYPE.field(name) for name in GPU_FIELDS]
    fields += [pa.field(name, pa.string()) for name in VERDICT_FIELDS]
    return pa.schema(fields)


FLAT_SCHEMA = flat_schema()


def conform(arr: pa.Array, want: pa.DataType) -> pa.Array:
    """``arr`` as type ``want``: struct fields a file lacks (an older trace) become nulls, fields it has
    in another width are cast, fields it has beyond ``want`` are dropped; nulls stay null at every level."""
    if arr.type == want:
        return arr
    if pa.types.is_struct(want):
        if not pa.types.is_struct(arr.type):
            return pa.nulls(len(arr), want) if arr.null_count == len(arr) else arr.cast(want)
        have = {arr.type.field(i).name for i in range(arr.type.num_fields)}
        children = [conform(arr.field(f.name), f.type) if f.name in have else pa.nulls(len(arr), f.type)
                    for f in want]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(want), mask=mask)
    if pa.types.is_list(want) and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        values = conform(arr.values, want.value_type)
        offsets = arr.offsets.cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, values, type=want,
                                        mask=arr.is_null() if arr.null_count else None)
    return arr.cast(want)


def conform_table(table: pa.Table) -> pa.Table:
    """A reader's table (trace columns in order) with exactly TRACE_SCHEMA's types, one chunk a column."""
    cols = [conform(table.column(f.name).combine_chunks(), f.type) for f in TRACE_SCHEMA]
    return pa.Table.from_arrays(cols, schema=TRACE_SCHEMA)


def merge(tables: list[pa.Table]) -> tuple[pa.Table, int]:
    """Tables of one host's day as one: in time order, each timestamp once (where two files hold the same
    tick, the row that carries a verdict wins). Returns the table and how many repeated ticks were dropped;
    ``tables`` is emptied (its memory is the caller's largest)."""
    table = pa.concat_tables([conform_table(t) for t in tables])
    tables.clear()  # each file's table is in the concatenation now: a day of 8 cards is hundreds of MB
    if table.num_rows == 0:
        return table, 0
    ts = pc.cast(table.column("ts"), pa.int64()).to_numpy(zero_copy_only=False)
    if ts.size < 2 or bool(np.all(np.diff(ts) > 0)):  # the files in name order are in time order: no copy
        return table, 0
    judged = table.column("verdict").is_valid().to_numpy(zero_copy_only=False)
    order = np.lexsort((~judged, ts))
    first = np.ones(order.size, dtype=bool)
    first[1:] = ts[order][1:] != ts[order][:-1]
    keep = order[first]
    return table.take(pa.array(keep)), int(order.size - keep.size)


def fill_verdicts(table: pa.Table, computed: list[VerdictSample]) -> tuple[pa.Table, int]:
    """``table`` with each tick lacking a verdict given the computed one of that tick (one per row, in
    order); the verdicts a file carried are kept. Returns the table and how many were filled."""
    have = table.column("verdict").combine_chunks()
    missing = np.flatnonzero(~have.is_valid().to_numpy(zero_copy_only=False))
    if missing.size == 0:
        return table, 0
    rows = have.to_pylist()
    for i in missing:
        v = computed[int(i)]
        rows[int(i)] = {**{f.name: getattr(v, f.name) for f in trace_fields(VerdictSample)}, "gpus": list(v.gpus)}
    column = pa.array(rows, type=VERDICT_TYPE)
    return table.set_column(table.schema.get_field_index("verdict"), "verdict", column), int(missing.size)


def flat_table(table: pa.Table, host: str) -> pa.Table:
    """One row per card and tick of a merged day (:func:`merge`), with FLAT_SCHEMA's columns."""
    gpus = table.column("gpus").combine_chunks()
    cards = pc.list_flatten(gpus)
    rows = pc.list_parent_indices(gpus)
    n = len(cards)
    ts = table.column("ts").combine_chunks().take(rows)
    verdict = table.column("verdict").combine_chunks()
    cols: dict[str, pa.Array] = {
        "host": pa.repeat(pa.scalar(host, pa.string()), n),
        "date": pc.cast(ts, pa.date32()),  # the tick's own UTC day (the partition's, for a recorder's file)
        "ts": ts,
        "gpu": cards.field("index"),
    }
    for name in GPU_FIELDS:
        cols[name] = cards.field(name)
    for name in VERDICT_FIELDS:
        cols[name] = verdict.field(name).take(rows)
    return pa.Table.from_arrays([cols[f.name] for f in FLAT_SCHEMA], schema=FLAT_SCHEMA)
