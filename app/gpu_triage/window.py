"""The rolling window: the last N ticks, kept as numpy ring buffers so that diagnosis and drawing read
columns (time × card, time × core, time × disk) without walking Python objects on every tick.

Memory is bounded by the capacity whatever the run length: appending is O(cards + cores + disks). The
capacity itself is capped (:data:`MAX_WINDOW_TICKS`) and the buffers grow as ticks arrive, so a long window
at a short interval neither reserves gigabytes up front nor copies them every frame. Missing values (None
in the tick) are NaN here.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gpu_triage.model import (
    DiskSample,
    GpuSample,
    JobSample,
    NetSample,
    ProcSample,
    StackSample,
    Tick,
    trace_fields,
)

# The numeric per-card and per-disk trace fields (all but the card's index and the disk's name), from the
# sample classes in gpu_triage.model: a field added there is a column here.
GPU_FIELDS: tuple[str, ...] = tuple(f.name for f in trace_fields(GpuSample) if f.numeric and not f.required)
DISK_FIELDS: tuple[str, ...] = tuple(f.name for f in trace_fields(DiskSample) if f.numeric and not f.required)

_NAN = float("nan")

# The most ticks a window holds, whatever --window / --interval ask. Why this number: every frame copies the
# window (16 fields x cards + cores + disks per tick, ~3 KB a tick for 16 cards and 128 cores) and the
# diagnosis reads all of it, so 3,600 ticks (10 MB) keeps a frame cheap on a loaded 2-core box, while still
# covering two hours at the default 2 s tick. A screen is at most a few hundred columns wide anyway. Without
# a cap, `demo --gpus 16 --interval 0.05 --window 604800` would ask for 12 million ticks (~10 GB, growing).
MAX_WINDOW_TICKS = 3600
# Rows the buffers start with; they double as ticks arrive, up to the capacity.
FIRST_ROWS = 64


def window_capacity(window_s: float, interval_s: float) -> tuple[int, str | None]:
    """Ticks a window of ``window_s`` at ``interval_s`` holds, capped at :data:`MAX_WINDOW_TICKS`, and the
    line that says so when it is capped (None when it is not)."""
    wanted = window_s / interval_s if interval_s > 0 else math.inf
    if not wanted < MAX_WINDOW_TICKS:  # also inf and NaN (an interval of 0 in a file's metadata)
        span = MAX_WINDOW_TICKS * interval_s
        shown = f"{span / 60:.0f} min" if span >= 120 else f"{span:.0f} s"
        return MAX_WINDOW_TICKS, (
            f"window capped at {MAX_WINDOW_TICKS} ticks ({shown} at {interval_s:g} s; {window_s:g} s asked)"
        )
    return max(2, round(wanted)), None


def _f(v: float | None) -> float:
    return _NAN if v is None else float(v)


@dataclass(slots=True)
class WindowView:
    """An ordered snapshot of the window (oldest first). Arrays are copies: safe to keep."""

    t: np.ndarray  # (T,) seconds since the epoch, end of each tick
    interval_s: np.ndarray  # (T,)
    gpu: dict[str, np.ndarray]  # field -> (T, G)
    gpu_indexes: list[int]  # column j of gpu arrays is NVML index gpu_indexes[j]
    cpu: np.ndarray  # (T, C) busy % per core
    iowait: np.ndarray  # (T,)
    host_mem_used: np.ndarray  # (T,)
    host_mem_total: np.ndarray  # (T,)
    disk: dict[str, np.ndarray]  # field -> (T, D)
    disk_names: list[str]
    procs: list[list[ProcSample]]  # per tick
    jobs: list[JobSample | None] = field(default_factory=list)  # per tick (trace v2); None: no job source
    swap: list[tuple[int | None, int | None]] = field(default_factory=list)  # per tick (v2): used, total bytes
    nets: list[list[NetSample]] = field(default_factory=list)  # per tick (v2): one entry per interface
    stacks: list[list[StackSample]] = field(default_factory=list)  # per tick (v3): the dumps finished in it
    ticks_ever: int = 0  # ticks appended to the window since it started: the newest is number ticks_ever - 1
    # what the diagnosis derives from one tick's Python objects (its process list), shared by the views of one
    # window so that a tick is read once, not at every verdict while it stays in the window: name -> id of
    # the tick's list -> (that list, its value). The list is kept beside its value, so an id reused by a later
    # list never finds a stale value (diagnosis/tickmemo.py). A tick's lists are not changed once appended.
    memo: dict[object, dict[int, tuple[object, object]]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def n(self) -> int:
        return int(self.t.shape[0])

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_indexes)


class RollingWindow:
    """The last ``capacity`` ticks. ``capacity`` is window length / interval (300 s / 2 s = 150)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("window capacity must be at least one tick")
        self.capacity = capacity
        self._count = 0  # ticks appended ever
        self._rows = min(capacity, FIRST_ROWS)  # rows allocated so far: grows to the capacity as ticks come
        rows = self._rows
        self._t = np.full(rows, _NAN)
        self._interval = np.full(rows, _NAN)
        self._iowait = np.full(rows, _NAN)
        self._mem_used = np.full(rows, _NAN)
        self._mem_total = np.full(rows, _NAN)
        self._gpu_cols: dict[int, int] = {}  # NVML index -> column
        self._gpu = {f: np.full((rows, 0), _NAN) for f in GPU_FIELDS}
        self._cpu = np.full((rows, 0), _NAN)
        self._disk_cols: dict[str, int] = {}
        self._disk = {f: np.full((rows, 0), _NAN) for f in DISK_FIELDS}
        self._procs: deque[list[ProcSample]] = deque(maxlen=capacity)
        self._jobs: deque[JobSample | None] = deque(maxlen=capacity)
        self._swap: deque[tuple[int | None, int | None]] = deque(maxlen=capacity)
        self._nets: deque[list[NetSample]] = deque(maxlen=capacity)
        self._stacks: deque[list[StackSample]] = deque(maxlen=capacity)
        self._last: Tick | None = None
        self._memo: dict[object, dict[int, tuple[object, object]]] = {}  # WindowView.memo, for all views

    @property
    def allocated_rows(self) -> int:
        """Rows the buffers hold now (at most the capacity)."""
        return self._rows

    def _grow(self) -> None:
        """Double the rows (up to the capacity). Only before the ring wraps, so rows keep their order."""
        rows = min(self.capacity, 2 * self._rows)

        def grown(a: np.ndarray) -> np.ndarray:
            out = np.full((rows, *a.shape[1:]), _NAN)
            out[: a.shape[0]] = a
            return out

        self._t, self._interval, self._iowait = grown(self._t), grown(self._interval), grown(self._iowait)
        self._mem_used, self._mem_total, self._cpu = grown(self._mem_used), grown(self._mem_total), grown(self._cpu)
        self._gpu = {f: grown(a) for f, a in self._gpu.items()}
        self._disk = {f: grown(a) for f, a in self._disk.items()}
        self._rows = rows

    # -- writing -------------------------------------------------------------------------------
    def clear(self) -> None:
        self.__init__(self.capacity)  # type: ignore[misc]

    def extend(self, ticks: list[Tick]) -> None:
        for tick in ticks[-self.capacity :]:
            self.append(tick)

    def append(self, tick: Tick) -> None:
        if self._count == self._rows < self.capacity:
            self._grow()
        row = self._count % self.capacity
        self._count += 1
        self._last = tick
        self._t[row] = tick.ts.timestamp()
        self._interval[row] = _f(tick.interval_s)
        self._iowait[row] = _f(tick.iowait_pct)
        self._mem_used[row] = _f(tick.host_mem_used_bytes)
        self._mem_total[row] = _f(tick.host_mem_total_bytes)

        for f in GPU_FIELDS:
            self._gpu[f][row, :] = _NAN
        for g in tick.gpus:
            col = self._gpu_cols.get(g.index)
            if col is None:
                col = self._add_gpu(g.index)
            for f in GPU_FIELDS:
                self._gpu[f][row, col] = _f(getattr(g, f))

        ncpu = len(tick.cpu_pct)
        if ncpu > self._cpu.shape[1]:
            self._cpu = widen(self._cpu, ncpu)
        self._cpu[row, :] = _NAN
        if ncpu:
            self._cpu[row, :ncpu] = np.asarray(tick.cpu_pct, dtype=float)

        for f in DISK_FIELDS:
            self._disk[f][row, :] = _NAN
        for d in tick.disks:
            col = self._disk_cols.get(d.name)
            if col is None:
                col = self._add_disk(d.name)
            for f in DISK_FIELDS:
                self._disk[f][row, col] = _f(getattr(d, f))

        self._procs.append(tick.procs)
        self._jobs.append(tick.job)
        self._swap.append((tick.host_swap_used_bytes, tick.host_swap_total_bytes))
        self._nets.append(tick.nets)
        self._stacks.append(tick.stacks)

    def _add_gpu(self, index: int) -> int:
        col = len(self._gpu_cols)
        self._gpu_cols[index] = col
        for f in GPU_FIELDS:
            self._gpu[f] = widen(self._gpu[f], col + 1)
        return col

    def _add_disk(self, name: str) -> int:
        col = len(self._disk_cols)
        self._disk_cols[name] = col
        for f in DISK_FIELDS:
            self._disk[f] = widen(self._disk[f], col + 1)
        return col

    # -- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return min(self._count, self.capacity)

    @property
    def last(self) -> Tick | None:
        return self._last

    def _order(self) -> np.ndarray:
        n = len(self)
        if self._count <= self.capacity:
            return np.arange(n)
        start = self._count % self.capacity
        return (np.arange(n) + start) % self.capacity

    def view(self) -> WindowView:
        idx = self._order()
        gpu_indexes = sorted(self._gpu_cols, key=self._gpu_cols.__getitem__)
        # present GPU columns in NVML index order
        order = np.argsort(np.asarray(gpu_indexes, dtype=int), kind="stable") if gpu_indexes else np.arange(0)
        gpu_sorted = [gpu_indexes[i] for i in order]
        # Cards almost always arrive in index order: then the row gather is the only copy (a second
        # column gather per field copied every (T, G) array twice, every frame).
        in_order = bool(np.all(order == np.arange(order.size)))
        return WindowView(
            t=self._t[idx],
            interval_s=self._interval[idx],
            gpu={f: a[idx] if in_order else a[idx][:, order] for f, a in self._gpu.items()},
            gpu_indexes=gpu_sorted,
            cpu=self._cpu[idx],
            iowait=self._iowait[idx],
            host_mem_used=self._mem_used[idx],
            host_mem_total=self._mem_total[idx],
            disk={f: a[idx] for f, a in self._disk.items()},
            disk_names=sorted(self._disk_cols, key=self._disk_cols.__getitem__),
            procs=list(self._procs),
            jobs=list(self._jobs),
            swap=list(self._swap),
            nets=list(self._nets),
            stacks=list(self._stacks),
            ticks_ever=self._count,
            memo=self._memo,
        )


def widen(a: np.ndarray, cols: int) -> np.ndarray:
    out = np.full((a.shape[0], cols), _NAN)
    out[:, : a.shape[1]] = a
    return out
