"""A day of one host as one table: the hourly files merged into one trace table (ticks in order, each once,
every tick with its verdict), all of it in Arrow (no row becomes a Python object but the verdicts the engine
computes for ticks recorded without one).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_triage.model import VerdictSample
from gpu_triage.trace.schema import TRACE_SCHEMA

VERDICT_TYPE = TRACE_SCHEMA.field("verdict").type


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
    """A reader's table (trace columns in order) with exactly TRACE_SCHEMA's types. A table that has them
    already (every file this version's recorder writes) is returned as it is, not copied: combining the
    chunks of a day's nested columns cost as much as reading the files."""
    if table.schema.remove_metadata() == TRACE_SCHEMA:
        return table.replace_schema_metadata(None)
    cols = [conform(table.column(f.name).combine_chunks(), f.type) for f in TRACE_SCHEMA]
    return pa.Table.from_arrays(cols, schema=TRACE_SCHEMA)


def merge(tables: list[pa.Table]) -> tuple[pa.Table, int]:
    """Tables of one host's day (each through :func:`conform_table`) as one: in time order, each timestamp
    once (where two files hold the same tick, the row that carries a verdict wins). Returns the table and how
    many repeated ticks were dropped; ``tables`` is emptied (its memory is the caller's largest)."""
    table = pa.concat_tables(tables)  # no copy: the chunks stay where the reader put them
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
    order); the verdicts a file carried are kept. Returns the table and how many were filled. Only the
    missing rows are built; the column is then one ``take`` over the stored and the built verdicts."""
    have = table.column("verdict").combine_chunks()
    missing = np.flatnonzero(~have.is_valid().to_numpy(zero_copy_only=False))
    if missing.size == 0:
        return table, 0
    picked = [computed[int(i)] for i in missing]
    gpus_t = VERDICT_TYPE.field("gpus").type
    lengths = np.fromiter((len(v.gpus) for v in picked), dtype=np.int32, count=len(picked))
    offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int32)))
    cards = pa.array([g for v in picked for g in v.gpus], gpus_t.value_type)
    built = pa.StructArray.from_arrays(
        [pa.ListArray.from_arrays(pa.array(offsets), cards, type=gpus_t) if f.name == "gpus"
         else pa.array([getattr(v, f.name) for v in picked], f.type) for f in VERDICT_TYPE],
        fields=list(VERDICT_TYPE))
    where = np.arange(len(have), dtype=np.int64)
    where[missing] = len(have) + np.arange(missing.size)
    column = pa.concat_arrays([have, built]).take(pa.array(where))
    return table.set_column(table.schema.get_field_index("verdict"), "verdict", column), int(missing.size)
