"""Values a recording cannot hold made null, and counted: each field's physical range (schema.FIELD_RANGES).

A GPU-Util of 250 %, a negative byte count or a year-300000 timestamp is not a measurement: the reader reads
it as n/a ("unsupported hardware fields are null, never 0") and says how many it met, per field.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_triage.trace.schema import FIELD_RANGES, TS_RANGE_US


def _bad_mask(arr: pa.Array, lo: float, hi: float) -> pa.Array | None:
    """True where a numeric value lies outside [lo, hi] or is NaN/inf; None when every value is fine."""
    if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)) or arr.null_count == len(arr):
        return None
    if pa.types.is_integer(arr.type):  # compared as integers: uint64 past 2**53 does not convert to float
        info = np.iinfo(arr.type.to_pandas_dtype())
        low, high = max(int(lo), int(info.min)), min(int(hi), int(info.max))
        inside = pc.and_(pc.greater_equal(arr, pa.scalar(low, arr.type)), pc.less_equal(arr, pa.scalar(high, arr.type)))
    else:
        # typed scalars: pa.scalar(float) without a type tries to import dateutil on every call (0.1 ms each,
        # 4 % of `diagnose DIR --summary`); compared as doubles either way
        low_s, high_s = pa.scalar(float(lo), pa.float64()), pa.scalar(float(hi), pa.float64())
        inside = pc.and_(pc.greater_equal(arr, low_s), pc.less_equal(arr, high_s))  # NaN: false
    bad = pc.fill_null(pc.invert(inside), False)
    return bad if pc.any(bad).as_py() else None


def _clean_values(arr: pa.Array, lo: float, hi: float, counts: dict[str, int], key: str) -> pa.Array:
    """``arr`` with out-of-range values as null (elementwise inside a list), counted under ``key``."""
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        first, last = arr.offsets[0].as_py(), arr.offsets[-1].as_py()
        inner = arr.values.slice(first, last - first)
        values = _clean_values(inner, lo, hi, counts, key)
        if values is inner:
            return arr
        offsets = pc.subtract(arr.offsets, pa.scalar(first, arr.offsets.type))
        return type(arr).from_arrays(offsets, values, mask=pc.invert(arr.is_valid()))
    bad = _bad_mask(arr, lo, hi)
    if bad is None:
        return arr
    counts[key] = counts.get(key, 0) + int(pc.sum(bad).as_py())
    return pc.if_else(bad, pa.scalar(None, arr.type), arr)


def _clean_struct_list(
    arr: pa.Array, ranges: dict[str, tuple[float, float]], counts: dict[str, int], col: str
) -> pa.Array:
    """A list<struct> column with each ranged field cleaned by :func:`_clean_values`."""
    is_list = pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
    if not is_list or not pa.types.is_struct(arr.type.value_type):
        return arr
    first, last = arr.offsets[0].as_py(), arr.offsets[-1].as_py()
    structs = arr.values.slice(first, last - first)
    children, changed = [], False
    for i, field in enumerate(structs.type):
        child = structs.field(i)
        if field.name in ranges:
            new = _clean_values(child, *ranges[field.name], counts, f"{col}.{field.name}")
            changed = changed or new is not child
            child = new
        children.append(child)
    if not changed:
        return arr
    structs = pa.StructArray.from_arrays(children, fields=list(structs.type), mask=pc.invert(structs.is_valid()))
    offsets = pc.subtract(arr.offsets, pa.scalar(first, arr.offsets.type))
    return type(arr).from_arrays(offsets, structs, mask=pc.invert(arr.is_valid()))


def _clean_struct(arr: pa.Array, name: str, counts: dict[str, int]) -> pa.Array:
    """A struct column (trace v2's job, v3's verdict) with its ranged fields and each rank's cleaned like the
    other columns."""
    if not pa.types.is_struct(arr.type):
        return arr
    children, changed = [], False
    ranges = FIELD_RANGES[name]
    for field, child in zip(arr.type, arr.flatten(), strict=True):
        if field.name in ranges:
            new = _clean_values(child, *ranges[field.name], counts, f"{name}.{field.name}")
        elif field.name == "ranks":
            new = _clean_struct_list(child, FIELD_RANGES["job.ranks"], counts, "job.ranks")
        else:
            new = child
        changed = changed or new is not child
        children.append(new)
    if not changed:
        return arr
    return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=pc.invert(arr.is_valid()))


def in_range(table: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """Every value outside its field's physical range (schema.FIELD_RANGES) as null, and how many per field.

    Timestamps outside TS_RANGE_US become null too (the caller drops those rows): a year-300000 tick is
    no tick, and converting it to a datetime would raise.
    """
    counts: dict[str, int] = {}
    for name in table.column_names:
        col = table.column(name)
        if col.null_count == len(col):
            continue
        chunks: list[pa.Array] = []
        for chunk in col.chunks:
            if name == "ts":
                raw = chunk.cast(pa.int64())
                bad = _bad_mask(raw, *TS_RANGE_US)
                if bad is not None:
                    counts["ts"] = counts.get("ts", 0) + int(pc.sum(bad).as_py())
                    chunk = pc.if_else(bad, pa.scalar(None, chunk.type), chunk)
            elif name in ("job", "verdict"):
                chunk = _clean_struct(chunk, name, counts)
            elif name in FIELD_RANGES:
                chunk = _clean_struct_list(chunk, FIELD_RANGES[name], counts, name)
            elif name in FIELD_RANGES[""]:
                chunk = _clean_values(chunk, *FIELD_RANGES[""][name], counts, name)
            chunks.append(chunk)
        if counts:
            table = table.set_column(table.column_names.index(name), name, pa.chunked_array(chunks, type=col.type))
    return table, counts
