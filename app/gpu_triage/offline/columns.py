"""Arrow batches of a recording into the rolling window's columns: a view at a tick is the WindowView a
RollingWindow fed the same ticks would give (tests/test_offline_columns.py checks it)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_triage.model import JobSample, NetSample, ProcSample, StackSample
from gpu_triage.trace.batches import as_float
from gpu_triage.trace.row_codec import build_record, job_from_row, stack_from_row
from gpu_triage.window import (
    DISK_FIELDS,
    GPU_FIELDS,
    WindowView,
    widen,
)

PROC_AHEAD = 512  # process lists converted from Arrow at a time (see RecordingColumns._procs)


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


# ProcSample's own fields, in its order: the rows are built positionally from them, and a field the model gains
# (a recording written before it lacks the column: None) is read back without a second list to keep in step
_PROC_FIELDS = tuple(f.name for f in dataclasses.fields(ProcSample))


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
    once, and a run of neighbours in one call (one ``to_pylist`` per run, not per row). The next marker is
    found by ``list.index`` (a C loop): a window read again each tick is converted already, and a Python walk
    over its rows would be most of the cost of reading it."""
    i = a
    while i < b:
        try:
            i = rows.index(missing, i, b)
        except ValueError:
            return
        if rows[i] is not missing:  # equal to the marker, not it: a converted row
            i += 1
            continue
        j = i + 1
        while j < b and rows[j] is missing:
            j += 1
        rows[i:j] = convert(i, j)
        i = j


class _ArrowRows:
    """One column kept as Arrow, aligned with the buffer's rows, each row converted to Python once, when a
    view first reads it (the engine reads the judged stretch, not the whole window). ``arr`` None: no row
    holds a value (a v1 file, a run with no job source), and nothing is kept or converted."""

    __slots__ = ("arr", "convert", "missing", "rows")

    def __init__(self, convert: Callable[[pa.Array], list[Any]], missing: Any) -> None:
        self.arr: pa.Array | None = None
        self.rows: list[Any] = []  # the converted row; False: not converted yet
        self.convert = convert
        self.missing = missing  # what a row without a value reads as

    def push(self, new: pa.Array | None, n: int, drop: int) -> None:
        if new is not None and new.null_count == len(new):
            new = None
        old = self.arr.slice(drop) if self.arr is not None and drop < len(self.arr) else None
        if new is None and old is None:
            self.arr = None
        else:
            filler = new.type if new is not None else old.type  # type: ignore[union-attr]
            old = old if old is not None else pa.nulls(len(self.rows) - drop, filler)
            new = new if new is not None else pa.nulls(n, filler)
            self.arr = pa.concat_arrays([old, new]) if old.type == new.type else \
                pa.concat_arrays([pa.nulls(len(old), new.type), new])
        self.rows = self.rows[drop:] + [False] * n

    def get(self, a: int, b: int) -> list[Any]:
        """Buffer rows a..b-1."""
        arr = self.arr
        if arr is None:
            return [self.missing] * (b - a)
        rows = self.rows
        _fill_runs(rows, a, b, False, lambda i, j: self.convert(arr.slice(i, j - i)))
        return rows[a:b]  # every one converted by now


def _jobs_of(arr: pa.Array) -> list[JobSample | None]:
    return [job_from_row(r) for r in arr.to_pylist()]


def _stacks_of(arr: pa.Array) -> list[list[StackSample]]:
    """Trace v3's stack samples per tick (an entry without its pid, role or phase is not a sample)."""
    keys = ("pid", "role", "phase")
    return [[stack_from_row(x) for x in (r or []) if x and all(x.get(k) is not None for k in keys)]
            for r in arr.to_pylist()]


def _nets_of(arr: pa.Array) -> list[list[NetSample]]:
    # as tick_from_row builds them: an entry without a name is no interface
    return [[build_record(NetSample, x) for x in (r or []) if x and x.get("name") is not None] for r in arr.to_pylist()]


def _swap_of(arr: pa.Array) -> list[tuple[int | None, int | None]]:
    return [(None, None) if r is None else (r["used"], r["total"]) for r in arr.to_pylist()]


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    return batch.column(name) if name in batch.schema.names else None


def _swap_column(batch: pa.RecordBatch) -> pa.Array | None:
    used, total = _column(batch, "host_swap_used_bytes"), _column(batch, "host_swap_total_bytes")
    if used is None and total is None:
        return None
    n = batch.num_rows
    used = used if used is not None else pa.nulls(n, pa.uint64())
    total = total if total is not None else pa.nulls(n, pa.uint64())
    if used.null_count == n and total.null_count == n:
        return None
    return pa.StructArray.from_arrays([used, total], names=["used", "total"])


class RecordingColumns:
    """Consecutive ticks as numpy columns. Columns of cards, cores and disks keep their place from batch
    to batch (new ones are appended), and remember the row where each first appeared, so that a view at a
    tick shows exactly the columns a RollingWindow would have at that tick. Process lists, the job, swap
    and the network interfaces stay Arrow until a view reads their rows."""

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
        self._memo: dict[object, dict[int, tuple[object, object]]] = {}  # WindowView.memo, for all views
        self.job = _ArrowRows(_jobs_of, None)  # trace v2
        self.nets = _ArrowRows(_nets_of, [])
        self.stacks = _ArrowRows(_stacks_of, [])
        self.swap = _ArrowRows(_swap_of, (None, None))

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
                old = widen(old, new.shape[1])
            return np.concatenate([old, new]) if old.shape[0] else new

        ts = pc.cast(batch.column("ts"), pa.int64()).to_numpy(zero_copy_only=False)
        gpu_new = self._gpu_batch(batch, n, base)
        cpu_new = self._cpu_batch(batch, n, base)
        disk_new = self._disk_batch(batch, n, base)
        self.t = cat(self.t, np.asarray(ts, dtype=np.float64) / 1e6)
        self.interval = cat(self.interval, interval)
        self.iowait = cat(self.iowait, as_float(batch.column("iowait_pct")))
        self.mem_used = cat(self.mem_used, as_float(batch.column("host_mem_used_bytes")))
        self.mem_total = cat(self.mem_total, as_float(batch.column("host_mem_total_bytes")))
        self.gpu = {f: cat(self.gpu[f], gpu_new[f]) for f in GPU_FIELDS}
        self.cpu = cat(self.cpu, cpu_new)
        self.disk = {f: cat(self.disk[f], disk_new[f]) for f in DISK_FIELDS}
        procs = batch.column("procs")
        if self.procs is not None and drop < len(self.procs):
            old = self.procs.slice(drop)
            self.procs = pa.concat_arrays([old, procs]) if old.type == procs.type else procs
        else:
            self.procs = procs
        self.job.push(_column(batch, "job"), n, drop)
        self.nets.push(_column(batch, "nets"), n, drop)
        self.stacks.push(_column(batch, "stacks"), n, drop)
        self.swap.push(_swap_column(batch), n, drop)
        self.row0 += drop
        self._proc_rows = self._proc_rows[drop:] + [None] * n

    def _gpu_batch(self, batch: pa.RecordBatch, n: int, base: int) -> dict[str, np.ndarray]:
        """The batch's card fields as (n, cards) arrays, in the buffer's card columns (new cards appended)."""
        rows, _pos, values = _list_layout(batch.column("gpus"))
        if values is None or not len(values):
            return {f: np.full((n, len(self.gpu_cols)), np.nan) for f in GPU_FIELDS}
        index_arr = _field(values, "index")
        idx = np.asarray(as_float(index_arr) if index_arr is not None else np.full(len(values), np.nan))
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
        out: dict[str, np.ndarray] = {}
        for f in GPU_FIELDS:
            a = np.full((n, width), np.nan)
            arr = _field(values, f)
            if arr is not None:
                a[rows[valid], cols[valid]] = as_float(arr)[valid]
            out[f] = a
        return out

    def _cpu_batch(self, batch: pa.RecordBatch, n: int, base: int) -> np.ndarray:
        rows, pos, values = _list_layout(batch.column("cpu_pct"))
        if values is not None and len(values):
            width = int(pos.max()) + 1
            for c in range(len(self.cpu_first), width):
                self.cpu_first.append(base + int(rows[pos == c][0]))
        cpu_new = np.full((n, len(self.cpu_first)), np.nan)
        if values is not None and len(values):
            cpu_new[rows, pos] = as_float(values)
        return cpu_new

    def _disk_batch(self, batch: pa.RecordBatch, n: int, base: int) -> dict[str, np.ndarray]:
        rows, _pos, values = _list_layout(batch.column("disks"))
        names = _field(values, "name") if values is not None else None
        if values is None or names is None or not len(values):
            return {f: np.full((n, len(self.disk_cols)), np.nan) for f in DISK_FIELDS}
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
        out: dict[str, np.ndarray] = {}
        for f in DISK_FIELDS:
            a = np.full((n, len(self.disk_cols)), np.nan)
            arr = _field(values, f)
            if arr is not None:
                a[rows[ok], cols[ok]] = as_float(arr)[ok]
            out[f] = a
        return out

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
            procs=cast("list[list[ProcSample]]", _LazyRows(self._procs, lo, hi)),
            jobs=cast("list[JobSample | None]", _LazyRows(self._rows_of(self.job), lo, hi)),
            swap=cast("list[tuple[int | None, int | None]]", _LazyRows(self._rows_of(self.swap), lo, hi)),
            nets=cast("list[list[NetSample]]", _LazyRows(self._rows_of(self.nets), lo, hi)),
            stacks=cast("list[list[StackSample]]", _LazyRows(self._rows_of(self.stacks), lo, hi)),
            ticks_ever=hi,  # the global row count: a row's number never changes, as in a RollingWindow
            memo=self._memo,
        )

    def _rows_of(self, col: _ArrowRows) -> Callable[[int, int], list[Any]]:
        """``col``'s rows by global row numbers."""
        return lambda lo, hi: col.get(lo - self.row0, hi - self.row0)


class _LazyRows(Sequence[Any]):
    """The rows of a view that stay Arrow in the buffer (process lists, jobs, swap, interfaces), converted
    only for the rows the engine reads (it reads the judged stretch, the last few seconds; converting the
    whole window was a third of the time). Valid while the buffer it reads from holds those rows: during
    the engine call it was made for."""

    __slots__ = ("_fetch", "_hi", "_lo")

    def __init__(self, fetch: Callable[[int, int], list[Any]], lo: int, hi: int) -> None:
        self._fetch, self._lo, self._hi = fetch, lo, hi

    def __len__(self) -> int:
        return self._hi - self._lo

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if b <= a:
                return []
            rows = self._fetch(self._lo + a, self._lo + b)
            return rows[::step] if step != 1 else rows
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._fetch(self._lo + i, self._lo + i + 1)[0]

    def __iter__(self) -> Iterator[Any]:
        # the rows fetched once: Sequence's own __iter__ fetches them one index at a time, a fetch per row, which
        # for a walk over the window's stacks costs a fifth of a tick's diagnosis
        return iter(self._fetch(self._lo, self._hi)) if self._hi > self._lo else iter(())
