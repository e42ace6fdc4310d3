"""Arrow batches of a recording into the rolling window's columns: a view at a tick is the WindowView a
RollingWindow fed the same ticks would give (tests/test_offline_columns.py checks it)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, cast, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_triage.model import JobSample, ProcSample, _job_from_row
from gpu_triage.trace.batches import as_float
from gpu_triage.window import (
    DISK_FIELDS,
    GPU_FIELDS,
    WindowView,
    _widen,
)

PROC_AHEAD = 512  # process lists converted from Arrow at a time (see _Columns._procs)


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
            for f in GPU_FIELDS:
                a = np.full((n, width), np.nan)
                arr = _field(values, f)
                if arr is not None:
                    a[rows[valid], cols[valid]] = as_float(arr)[valid]
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
            cpu_new[rows, pos] = as_float(values)
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
                    a[rows[ok], cols[ok]] = as_float(arr)[ok]
                disk_new[f] = a
        else:
            disk_new = {f: np.full((n, len(self.disk_cols)), np.nan) for f in DISK_FIELDS}

        self.t = cat(self.t, new_t)
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
