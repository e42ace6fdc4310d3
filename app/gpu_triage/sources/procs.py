"""The processes on each GPU, their CPU use, and their child processes (DataLoader workers).

Why: a GPU waiting on its input pipeline shows as a training process whose workers are pegged (or too
few), and workers re-spawned every epoch show as changing pids. So for each (process, card) pair we
report the process's own CPU % (100 = one core) and each descendant's CPU % and pid.

Cost is kept bounded for a box with hundreds of workers:
- CPU % comes from CPU-time deltas against the previous tick (on Linux read from /proc/PID/stat, one
  read per process per tick; elsewhere psutil's ``cpu_times()``), with a cached ``psutil.Process`` per pid
  for its start time and name (read once); a process born since the last tick is measured from
  its creation time, so new workers get a real figure on their first tick instead of a fake 0.
- pids are reused: the cache holds a pid's process only while its start time (read with its CPU seconds)
  stays the same; another start time is another process, read afresh.
- Descendants are found on Linux through ``/proc/PID/task/TID/children`` (reads only the family of
  each GPU process), and elsewhere through psutil's ``children(recursive=True)``.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_triage.model import ProcSample
from gpu_triage.nvmlwrap import GpuLost, Nvml
from gpu_triage.safetext import clean_opt
from gpu_triage.sources.owner import Owner, OwnerReader

_MAX_DESCENDANTS = 4096  # a runaway fork tree must not make one tick unbounded
_NO_OWNER = Owner()


def _read_all(path: str) -> bytes:
    """A whole procfs file through os.open/os.read: a children file is read per thread per tick, and
    pathlib's objects plus a text wrapper cost several times the syscalls (benchmarks/bench_procs.py).
    Read to the end (an empty read), as read_text did: a procfs read may return less than asked for. Most
    children files are empty, so that is one read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def proc_children(pid: int, proc_root: str | os.PathLike[str] = "/proc") -> list[int] | None:
    """Direct children of ``pid`` from procfs (every thread's children file); None when unavailable."""
    task_dir = f"{os.fspath(proc_root)}/{pid}/task"
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    children: list[int] = []
    found_file = False
    for tid in tids:
        try:
            data = _read_all(f"{task_dir}/{tid}/children")
        except OSError:
            continue  # the thread ended (ENOENT/ESRCH), or the kernel lacks CONFIG_PROC_CHILDREN
        found_file = True
        if data:
            children.extend(map(int, data.split()))
    return children if found_file else None


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # the unit of /proc/PID/stat's times


def proc_cpu_seconds(pid: int, proc_root: str | os.PathLike[str] = "/proc") -> float | None:
    """User + system CPU seconds of ``pid`` from /proc/PID/stat (what psutil's cpu_times() reads, at about
    half its cost per call); None when the process is gone or hidden from us."""
    got = proc_cpu_and_start(pid, proc_root)
    return None if got is None else got[0]


def proc_cpu_and_start(pid: int, proc_root: str | os.PathLike[str] = "/proc") -> tuple[float, int | None] | None:
    """:func:`proc_cpu_seconds` and the process's start time (clock ticks since boot; None if the line is
    cut short), from one read: the start time says whether ``pid`` is still the process seen before."""
    try:
        data = _read_all(f"{os.fspath(proc_root)}/{pid}/stat")
        fields = data[data.rindex(b")") + 2 :].split()  # after "pid (comm) ": comm may hold spaces and ")"
        # utime, stime, starttime: fields 14, 15 and 22 of proc(5)
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK, int(fields[19]) if len(fields) > 19 else None
    except (OSError, ValueError, IndexError):
        return None


def descendants_procfs(pid: int, proc_root: str | os.PathLike[str] = "/proc") -> list[int] | None:
    """All descendants of ``pid`` (breadth first), or None when procfs cannot tell."""
    first = proc_children(pid, proc_root)
    if first is None:
        return None
    out: list[int] = []
    seen = {pid}
    queue = deque(first)
    while queue and len(out) < _MAX_DESCENDANTS:
        child = queue.popleft()
        if child in seen:
            continue
        seen.add(child)
        out.append(child)
        queue.extend(proc_children(child, proc_root) or ())
    return out


@dataclass
class _Tracked:
    proc: Any  # psutil.Process
    create_time: float | None
    cpu_s: float | None  # user+system seconds at the last reading
    at: float  # our clock at the last reading
    seen_tick: int
    name: str | None = None  # read once: a process's name rarely changes, and each read is a /proc read
    start: int | None = None  # /proc start time (ticks), first read: a different one is another process
    read_start: int | None = None  # the start time read with this tick's CPU seconds


class GpuProcessReader:
    """Per tick: which processes use which card, with their CPU and their workers' CPU."""

    def __init__(
        self,
        nvml: Nvml,
        cards: list[tuple[int, Any]],
        psutil_module: Any | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        use_procfs: bool | None = None,
        proc_root: str | os.PathLike[str] = "/proc",
        owners: OwnerReader | None = None,
    ) -> None:
        if psutil_module is None:
            import psutil as psutil_module  # noqa: PLC0415 - injected in tests
        self.nvml = nvml
        self.cards = cards  # (NVML index, handle)
        self.ps: Any = psutil_module
        self._clock = clock
        self._wall = wall_clock
        self._tracked: dict[int, _Tracked] = {}
        self._util_since: dict[int, int] = {}  # card index -> newest process-utilization sample seen (µs)
        self._tick = 0
        self._last_wall: float | None = None
        if use_procfs is None:
            use_procfs = Path("/proc/self/task").is_dir() and getattr(psutil_module, "LINUX", False)
        self._use_procfs = use_procfs
        self._proc_root = proc_root  # a fake tree in tests and benchmarks
        # whose job each GPU process is, from its cgroup and environment (procfs: Linux only)
        self._owners = owners if owners is not None else (OwnerReader(proc_root) if use_procfs else None)
        self._no_such = getattr(psutil_module, "NoSuchProcess", ProcessLookupError)
        self._denied = getattr(psutil_module, "AccessDenied", PermissionError)
        self._gone = (self._no_such, self._denied, getattr(psutil_module, "ZombieProcess", self._no_such))

    def sample(self, lost: Iterable[int] = ()) -> list[ProcSample]:
        self._tick += 1
        per_card, sm = self._read_cards(set(lost))
        gpu_pids = {pid for _, procs in per_card for pid in procs}
        now = self._clock()
        family_cache: dict[int, list[int]] = {}
        cpu_cache: dict[int, float | None] = {}
        out: list[ProcSample] = []
        for index, procs in per_card:
            for pid, gpu_mem in sorted(procs.items()):
                if pid not in cpu_cache:
                    cpu_cache[pid] = self._cpu_pct(pid, now)
                if pid not in family_cache:
                    family_cache[pid] = [c for c in self._descendants(pid) if c not in gpu_pids]
                workers = family_cache[pid]
                worker_cpu: list[float] = []
                worker_pids: list[int] = []
                for child in workers:
                    if child not in cpu_cache:
                        cpu_cache[child] = self._cpu_pct(child, now)
                    value = cpu_cache[child]
                    if value is not None:  # None: it exited or is hidden from us; leave it out
                        worker_pids.append(child)
                        worker_cpu.append(value)
                owner = self._owner(pid)
                out.append(
                    ProcSample(
                        pid=pid,
                        gpu_index=index,
                        name=clean_opt(self._name(pid)),  # another user chose it: no escapes drawn
                        gpu_mem_bytes=gpu_mem,
                        cpu_pct=cpu_cache[pid],
                        workers=len(worker_pids),
                        workers_cpu_pct=worker_cpu,
                        worker_pids=worker_pids,
                        sm_pct=sm.get((index, pid)),
                        user=owner.user,
                        slurm_job=owner.slurm_job,
                        pod_uid=owner.pod_uid,
                        pod_name=owner.pod_name,
                        pod_namespace=owner.pod_namespace,
                        container=owner.container,
                    )
                )
        # forget processes not seen this tick, so the cache cannot grow without bound
        for pid in [p for p, t in self._tracked.items() if t.seen_tick != self._tick]:
            del self._tracked[pid]
        self._last_wall = self._wall()
        return out

    def _read_cards(
        self, lost: set[int]
    ) -> tuple[list[tuple[int, dict[int, int | None]]], dict[tuple[int, int], float]]:
        """Each readable card's processes (pid -> GPU memory), and each process's smUtil by (card, pid)."""
        per_card: list[tuple[int, dict[int, int | None]]] = []
        sm: dict[tuple[int, int], float] = {}  # (card, pid) -> smUtil
        for index, handle in self.cards:
            if index in lost or handle is None:
                continue
            try:
                procs = self._gpu_processes(handle)
                per_card.append((index, procs))
                if procs:  # every card with a process: each one's own share, as nvitop shows it (_sm_by_pid)
                    sm.update(((index, pid), v) for pid, v in self._sm_by_pid(index, handle).items())
            except GpuLost:
                continue  # the GPU reader marks the card lost on its own next call
        return per_card, sm

    def _sm_by_pid(self, index: int, handle: Any) -> dict[int, float]:
        """pid -> the mean smUtil of the driver's samples within this tick (NVML's per-process utilisation:
        the share of the card's time one of the process's kernels ran). Empty when there is none: the driver
        answers NOT_FOUND until a process has a sample, and a card or binding without the call answers
        nothing; either way "no data" (None), never 0.

        Read for every card that runs a process: a user of nvitop reads each process's GPU use in its table,
        on a shared card (every rank on cuda:0, a notebook beside a job) it says which of them keeps the card
        busy, and a figure from the driver beats one inferred from the card's GPU-Util. The call costs 2.1 ms
        of CPU per card on an H200 (docs/h200.md, docs/performance.md); a card without a process costs
        nothing."""
        since = self._util_since.get(index, 0)
        if self._last_wall is not None:  # the driver keeps older samples: only this tick's count
            since = max(since, int(self._last_wall * 1e6))
        got: dict[int, list[float]] = {}
        newest = since
        for entry in self.nvml.call("nvmlDeviceGetProcessUtilization", handle, since) or []:
            stamp, value = int(entry.timeStamp), entry.smUtil
            if stamp <= since or value is None or not 0 <= value <= 100:  # not newer, or a sentinel
                continue
            got.setdefault(int(entry.pid), []).append(float(value))
            newest = max(newest, stamp)
        self._util_since[index] = newest
        return {pid: sum(values) / len(values) for pid, values in got.items()}

    def _gpu_processes(self, handle: Any) -> dict[int, int | None]:
        """pid -> GPU memory (None when the driver hides it), compute and graphics merged."""
        procs: dict[int, int | None] = {}
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for entry in self.nvml.call(fn, handle) or []:
                pid = int(entry.pid)
                mem = getattr(entry, "usedGpuMemory", None)
                if mem is not None and mem >= (1 << 64) - 1:  # NVML_VALUE_NOT_AVAILABLE in older bindings
                    mem = None
                if pid in procs and procs[pid] is not None:
                    mem = max(procs[pid] or 0, mem or 0)
                procs[pid] = mem
        return procs

    def _process(self, pid: int) -> _Tracked | None:
        tracked = self._tracked.get(pid)
        if tracked is not None:
            tracked.seen_tick = self._tick
            return tracked
        try:
            proc = self.ps.Process(pid)
            create_time = proc.create_time()
        except self._gone:
            return None
        tracked = _Tracked(proc=proc, create_time=create_time, cpu_s=None, at=0.0, seen_tick=self._tick)
        try:
            tracked.name = proc.name()
        except self._gone:
            tracked.name = None
        self._tracked[pid] = tracked
        return tracked

    def _cpu_pct(self, pid: int, now: float) -> float | None:
        tracked = self._process(pid)
        if tracked is None:
            return None
        cpu_s = self._cpu_seconds(tracked, pid)
        if cpu_s is None:
            self._tracked.pop(pid, None)
            return None
        if not self._same_process(tracked):
            # the pid went to another process since the last tick: the cached name, start time and CPU
            # baseline are the old one's (its CPU seconds against the new one's would give a wrong figure)
            self._tracked.pop(pid, None)
            fresh = self._process(pid)
            if fresh is None:
                return None
            fresh.start = fresh.read_start = tracked.read_start
            tracked = fresh
        elif tracked.start is None:
            tracked.start = tracked.read_start
        prev_s, prev_at = tracked.cpu_s, tracked.at
        tracked.cpu_s, tracked.at = cpu_s, now
        if prev_s is not None:
            elapsed = now - prev_at
            return max(0.0, 100.0 * (cpu_s - prev_s) / elapsed) if elapsed > 0 else None
        # First sight. Born since our last tick: measure from its birth (a new worker's real load).
        # Older than that, or on our very first tick: no baseline yet, so no figure.
        wall = self._wall()
        if self._last_wall is not None and tracked.create_time is not None and tracked.create_time >= self._last_wall:
            age = wall - tracked.create_time
            return max(0.0, 100.0 * cpu_s / age) if age > 0.05 else None
        return None

    def _same_process(self, tracked: _Tracked) -> bool:
        """Is the pid still the process first seen under it? On Linux the start time read with its CPU
        seconds says (no extra read); elsewhere psutil's is_running() compares creation times."""
        if self._use_procfs:
            return tracked.start is None or tracked.read_start is None or tracked.start == tracked.read_start
        if tracked.cpu_s is None:  # first sight: nothing cached yet
            return True
        try:
            return bool(tracked.proc.is_running())
        except self._gone:
            return False

    def _cpu_seconds(self, tracked: _Tracked, pid: int) -> float | None:
        """Per process per tick: on Linux straight from /proc/PID/stat (psutil's cpu_times() reads the same
        file with more Python around it), elsewhere through psutil. None: it exited or is hidden."""
        if self._use_procfs:
            got = proc_cpu_and_start(pid, self._proc_root)
            if got is None:
                return None
            tracked.read_start = got[1]
            return got[0]
        try:
            times = tracked.proc.cpu_times()
        except self._gone:
            return None
        return float(times.user) + float(times.system)

    def _descendants(self, pid: int) -> list[int]:
        if self._use_procfs:
            found = descendants_procfs(pid, self._proc_root)
            if found is not None:
                return found
        tracked = self._process(pid)
        if tracked is None:
            return []
        try:
            return [child.pid for child in tracked.proc.children(recursive=True)][:_MAX_DESCENDANTS]
        except self._gone:
            return []

    def _owner(self, pid: int) -> Owner:
        """The process's owner, cached by (pid, start time) in the reader; empty when unknown."""
        if self._owners is None:
            return _NO_OWNER
        tracked = self._tracked.get(pid)
        found = self._owners.owner(pid, tracked.create_time if tracked is not None else None)
        return found if found is not None else _NO_OWNER

    def _name(self, pid: int) -> str | None:
        tracked = self._tracked.get(pid)
        if tracked is not None and tracked.name is not None:
            return tracked.name
        return self.nvml.text("nvmlSystemGetProcessName", pid)  # e.g. another user's process


NO_CARD = -1  # gpu_index of a process in the host-only list: it uses no card (the list is never recorded)


class BusiestProcesses:
    """Host-only mode (no GPU/driver): the processes that used the most CPU since the previous call, as htop
    shows them, so that the process table still says who keeps the machine busy. Not part of a tick (nor of
    a recording): the trace's process rows are GPU processes."""

    def __init__(
        self, psutil_module: Any | None = None, *, clock: Callable[[], float] = time.monotonic, top: int = 10
    ) -> None:
        if psutil_module is None:
            import psutil as psutil_module  # noqa: PLC0415 - injected in tests
        self.ps: Any = psutil_module
        self._clock = clock
        self.top = top
        self._before: dict[tuple[int, float | None], float] = {}
        self._at: float | None = None
        self.latest: list[ProcSample] = []
        self.everyone: list[ProcSample] = []  # every process with a figure, busiest first: what a filter searches

    def sample(self) -> list[ProcSample]:
        now = self._clock()
        seen: dict[tuple[int, float | None], tuple[float, str | None]] = {}
        for proc in self.ps.process_iter(["pid", "name", "cpu_times", "create_time"]):
            info = getattr(proc, "info", None) or {}
            times = info.get("cpu_times")
            if times is None:  # hidden from us (another user's, on some systems) or gone
                continue
            # (pid, start time): a pid reused by a new process is not the old one
            cpu_s = float(times.user) + float(times.system)
            seen[(int(info["pid"]), info.get("create_time"))] = (cpu_s, info.get("name"))
        busy: list[tuple[float, int, str | None]] = []
        if self._at is not None and now > self._at:
            elapsed = now - self._at
            for key, (cpu_s, name) in seen.items():
                before = self._before.get(key)
                if before is not None:
                    busy.append((max(0.0, 100.0 * (cpu_s - before) / elapsed), key[0], name))
        self._before = {key: cpu_s for key, (cpu_s, _) in seen.items()}
        self._at = now
        busy.sort(key=lambda b: (-b[0], b[1]))
        self.everyone = [
            ProcSample(pid=pid, gpu_index=NO_CARD, name=clean_opt(name), gpu_mem_bytes=None, cpu_pct=cpu, workers=None)
            for cpu, pid, name in busy
        ]
        self.latest = self.everyone[: self.top]
        return self.latest
