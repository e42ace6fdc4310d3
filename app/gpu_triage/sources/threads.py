"""Every thread of a process from /proc, with no rights beyond reading it: name, CPU share, state and the kernel
function it sleeps in.

Why: how many threads are busy tells a Python loop (one) from CPU compute in the training process (many:
intra-op, OpenMP), and a thread's wait channel tells what an idle one waits on: ``hrtimer_nanosleep`` (a
sleep), ``wait_woken`` / ``sk_wait_data`` (a socket), ``futex`` (a lock or a queue), ``pipe_read``. Seen on
a real H200 job (docs/h200.md): AdamW on the CPU kept 16 threads busy, a pure-Python loop one, a job waiting on
another service sat in ``wait_woken``. ``wchan`` reads "0" for a running thread and may be hidden (kernel
settings): then it is None, never a guess.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MAX_THREADS = 1024  # a process with more is read to this bound each tick


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    tid: int
    comm: str  # the kernel's thread name (15 bytes: "pt_data_worker", "python3")
    state: str  # R running, S sleeping, D uninterruptible (IO), Z, T, ...
    wchan: str | None  # the kernel function it waits in; None where running or unreadable
    cpu_pct: float | None  # share of one core since the last read (None on the first)


def _read(path: str, limit: int = 4096) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat(data: bytes) -> tuple[str, str, int, int] | None:
    """comm, state, CPU ticks and start time from a task's stat line (comm may hold spaces and ')')."""
    try:
        comm = data[data.index(b"(") + 1 : data.rindex(b")")].decode("utf-8", "replace")
        f = data[data.rindex(b")") + 2 :].split()
        return comm, f[0].decode("ascii", "replace"), int(f[11]) + int(f[12]), int(f[19])
    except (ValueError, IndexError):
        return None


class ThreadReader:
    """Reads a process's threads; CPU shares come from the ticks since this reader's last look at each thread
    (keyed by its start time too, so a reused tid starts afresh)."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._last: dict[tuple[int, int, int], tuple[float, int]] = {}

    def read(self, pid: int, now: float) -> list[ThreadInfo] | None:
        """The threads of ``pid``; None when the process is gone or hidden."""
        base = f"{self.proc_root}/{pid}/task"
        try:
            tids = sorted(int(t) for t in os.listdir(base) if t.isdigit())[:MAX_THREADS]
        except OSError:
            return None
        out = []
        seen = set()
        for tid in tids:
            raw = _read(f"{base}/{tid}/stat")
            parsed = _stat(raw) if raw else None
            if parsed is None:
                continue  # the thread ended between the listing and the read
            comm, state, ticks, start = parsed
            key = (pid, tid, start)
            seen.add(key)
            prev = self._last.get(key)
            self._last[key] = (now, ticks)
            cpu = None
            if prev is not None and now > prev[0]:
                cpu = max(0.0, (ticks - prev[1]) / _CLK_TCK / (now - prev[0]) * 100.0)
            w = _read(f"{base}/{tid}/wchan", 128)
            wchan = w.decode("ascii", "replace").strip() if w else None
            out.append(ThreadInfo(tid, comm, state, None if wchan in (None, "", "0") else wchan, cpu))
        for key in [k for k in self._last if k[0] == pid and k not in seen]:
            del self._last[key]  # threads that ended: the cache stays the size of the live threads
        return out

    def forget(self, pid: int) -> None:
        for key in [k for k in self._last if k[0] == pid]:
            del self._last[key]


def busy_threads(threads: list[ThreadInfo], min_pct: float = 20.0) -> int:
    """Threads that used at least ``min_pct`` of a core since the last read."""
    return sum(1 for t in threads if t.cpu_pct is not None and t.cpu_pct >= min_pct)
