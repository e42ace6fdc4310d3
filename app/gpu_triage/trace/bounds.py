"""The contract's limits on what one tick of a recording may hold (docs/trace-v3.md, "Limits"), applied on read.

Anyone may hand over a recording, and what it holds expands: one string of escapes, 35 KB compressed, was
200 MB in Arrow and 20 GB once cleaned (each escape drawn as a picture, character by character), and 2,000
ticks of 5,000 stack samples each, 14 KB on disk, were ten million Python objects. So, before anything is
cleaned or made into Python objects:

- :func:`check_footer` reads the Parquet footer: a row group whose lists hold more entries than its rows
  times the contract's limits allow (a stack column of 10 million samples for 2,000 ticks) is refused with
  one line, before a byte of it is decoded;
- :func:`bound_column` cuts every string to its field's length and every list to its field's count, in
  Arrow, column by column (the reader runs it on every column it reads, batch by batch);
- :func:`host_metadata` reads the file's host metadata only up to MAX_HOST_META_BYTES.

The limits are far above what the recorder writes (its own bounds are tighter: a sample's frames at most 300
characters, at most 256 samples waiting for a tick), so no real recording is cut.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpu_triage.errors import UserError
from gpu_triage.tracefields import TEXT_LIMIT as TEXT_LIMIT  # every string a tick holds ...

TEXT_LIMITS = {"stacks.frames": 300, "stacks.error": 300, "stacks.thread_list.frames": 300,
               "stacks.thread_list.name": 48}  # ... but these, as the recorder bounds them
#: Entries of each list a tick holds at most (a list not named here: DEFAULT_LIST_LIMIT).
LIST_LIMITS = {
    "gpus": 256, "cpu_pct": 8192, "disks": 1024, "procs": 4096, "nets": 1024, "stacks": 256,
    "job.ranks": 256, "verdict.gpus": 256, "procs.worker_pids": 1024, "procs.workers_cpu_pct": 1024,
    "stacks.thread_list": 16,
}
DEFAULT_LIST_LIMIT = 1024
MAX_HOST_META_BYTES = 256 << 10  # the host metadata (JSON): a 16-card host's is a few KB


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def bound_column(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """``col`` (the column ``name``) with every string cut to its limit and every list to its count; the
    column itself (no copy) where nothing is over."""
    chunks = [bound_array(name, c) for c in col.chunks]
    if all(a is b for a, b in zip(chunks, col.chunks, strict=True)):
        return col
    return pa.chunked_array(chunks, type=col.type)


def bound_array(path: str, arr: pa.Array) -> pa.Array:
    t = arr.type
    if _is_text(t):
        limit = TEXT_LIMITS.get(path, TEXT_LIMIT)
        if len(arr) == arr.null_count or (pc.max(pc.binary_length(arr)).as_py() or 0) <= limit:
            return arr  # bytes at most the limit: characters too
        return pc.utf8_slice_codeunits(arr, 0, limit)
    if _is_list(t):
        limit = LIST_LIMITS.get(path, DEFAULT_LIST_LIMIT)
        if len(arr) and (pc.max(pc.list_value_length(arr)).as_py() or 0) > limit:
            arr = pc.list_slice(arr, 0, limit)
            if arr.type != t:  # list_slice may answer another list type: the column keeps its own
                arr = arr.cast(t)
        first, last = arr.offsets[0].as_py(), arr.offsets[-1].as_py()
        inner = arr.values.slice(first, last - first)
        bounded = bound_array(path, inner) if pa.types.is_struct(inner.type) else bound_array(path + "[]", inner)
        if bounded is inner:
            return arr
        offsets = pc.subtract(arr.offsets, pa.scalar(first, arr.offsets.type))
        return type(arr).from_arrays(offsets, bounded, mask=pc.invert(arr.is_valid()))
    if pa.types.is_struct(t):
        children = [arr.field(i) for i in range(t.num_fields)]
        bounded = [bound_array(f"{path}.{t.field(i).name}", c) for i, c in enumerate(children)]
        if all(a is b for a, b in zip(bounded, children, strict=True)):
            return arr
        return pa.StructArray.from_arrays(bounded, fields=list(t), mask=pc.invert(arr.is_valid()))
    return arr


def check_footer(pf: Any, shown: str) -> None:
    """UserError when a row group of the Parquet file ``pf`` (a ``pyarrow.parquet.ParquetFile``) holds more
    list entries than its rows times the contract's limits: read from the footer, before any decoding."""
    schema = pf.schema
    for g in range(pf.metadata.num_row_groups):
        group = pf.metadata.row_group(g)
        rows = max(group.num_rows, 1)
        for i in range(group.num_columns):
            leaf = schema.column(i)
            if leaf.max_repetition_level == 0:
                continue  # no list above it: one value a row
            levels = _list_paths(leaf.path)
            if len(levels) != leaf.max_repetition_level:  # lists another writer named otherwise: the largest limit
                levels = [""] * leaf.max_repetition_level
            allowed = rows
            for level in levels:
                allowed *= LIST_LIMITS.get(level, max(LIST_LIMITS.values())) if level else max(LIST_LIMITS.values())
            held = group.column(i).num_values
            if held > allowed:
                top = leaf.path.split(".", 1)[0]
                raise UserError(f"{shown}: column {top!r} holds {held:,} entries for {group.num_rows:,} ticks in "
                                f"row group {g}, more than the trace contract allows a tick (docs/trace-v4.md): "
                                "not read (a crafted or damaged file)")


def _list_paths(leaf: str) -> list[str]:
    """The contract's names of the lists above a Parquet leaf: ``procs.list.element.worker_pids.list.element``
    -> ["procs", "procs.worker_pids"]."""
    out: list[str] = []
    names: list[str] = []
    parts = leaf.split(".")
    i = 0
    while i < len(parts):
        if parts[i] == "list" and i + 1 < len(parts) and parts[i + 1] in ("element", "item"):
            out.append(".".join(names))
            i += 2
            continue
        names.append(parts[i])
        i += 1
    return out


def host_metadata(meta: dict[bytes, bytes] | None) -> dict[str, Any] | None:
    """The file's host metadata as a JSON object; None where there is none, it is over MAX_HOST_META_BYTES,
    or it is no JSON object."""
    raw = (meta or {}).get(b"gpu_triage.host")
    if not raw or len(raw) > MAX_HOST_META_BYTES:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None
