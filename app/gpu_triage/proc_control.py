"""Facts about one process of this machine (its user and command line) and sending it a signal, for the
dashboard's process table. Kept out of ui/ (the outside world is reached by the core; the UI only asks).

A signal is never sent to a process the user may not signal: :meth:`ProcControl.why_not` asks the kernel
first (``kill(pid, 0)`` sends nothing and says whether we may) and says why not in words. Nor to a process
other than the one the confirmation named: pids are reused, so the process is pinned when the confirmation
opens (:meth:`ProcControl.pin`) and the signal goes to that one or nowhere.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_triage.proc_columns import short_command
from gpu_triage.safetext import clean, clean_opt

log = logging.getLogger(__name__)

SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


@dataclass(frozen=True, slots=True)
class ProcDetails:
    """Who runs a process and how it was started; None where the system does not say. ``start``: its start
    time (see :func:`proc_start_time`), which with the pid names one process: pids are reused. ``command``:
    the command line as the table's COMMAND column shows it (proc_columns.short_command); ``created``: when
    it started, in seconds since the epoch (its run time is the clock's distance from it)."""

    pid: int
    user: str | None
    cmdline: str | None
    start: float | None = None
    command: str | None = None
    created: float | None = None


@dataclass(slots=True)
class Pinned:
    """One process, held from the moment the confirmation opened until the signal is sent: a pidfd where
    the kernel has them (a signal through it can only reach that process, never one that got its pid
    later), else an open /proc/PID directory (it answers ESRCH once that process is gone, whoever has the
    pid now) and its start time, both checked again right before the signal. The start time alone has
    clock-tick resolution (10 ms): the directory tells apart two processes started within one tick."""

    pid: int
    start: float
    details: ProcDetails
    fd: int | None = None  # the pidfd
    proc_dir: int | None = None  # /proc/PID opened as a directory, without a pidfd

    def close(self) -> None:
        for fd in (self.fd, self.proc_dir):
            if fd is not None:
                os.close(fd)
        self.fd = self.proc_dir = None

    def gone(self) -> bool:
        """The process has exited (its /proc directory says so); False when it is there or cannot tell."""
        if self.proc_dir is None:
            return False
        try:
            os.stat("stat", dir_fd=self.proc_dir)
        except OSError:
            return True
        return False


def gone(pid: int) -> str:
    return f"the process has exited: nothing sent (PID {pid} may belong to another process now)"


def proc_start_time(pid: int, proc_root: str = "/proc") -> float | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of /proc/PID/stat); None: no such process.

    Read straight from /proc, as ``ps`` does: psutil's create_time() reads the same field and rounds it
    through the boot time. The name (field 2) may hold spaces and parentheses, so fields are counted
    after its last ')'."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as fh:
            raw = fh.read(4096)
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return float(fields[19])  # field 22 of the file: 20th after the name
    except (IndexError, ValueError):
        return None


class ProcControl:
    """Details and signals for processes of this machine. psutil, ``os.kill`` and the start-time reader are
    injected for tests (a fake kill is a fake kernel: pidfds are then off unless asked for)."""

    def __init__(
        self,
        psutil_module: Any = None,
        kill: Callable[[int, int], None] = os.kill,
        own_pid: int | None = None,
        start_time: Callable[[int], float | None] | None = None,
        pidfd: bool | None = None,
    ) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self._psutil = psutil_module
        self._kill = kill
        self._own_pid = os.getpid() if own_pid is None else own_pid
        self._procfs = start_time is None and os.path.isdir("/proc/self")  # injected: a fake /proc, no dirs
        if start_time is None:
            start_time = proc_start_time if self._procfs else self._psutil_start
        self._start = start_time
        has_pidfd = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
        self._pidfd = has_pidfd and (kill is os.kill if pidfd is None else pidfd)
        self._cache: dict[tuple[int, float], ProcDetails] = {}

    def _psutil_start(self, pid: int) -> float | None:
        try:
            return float(self._psutil.Process(pid).create_time())
        except (self._psutil.NoSuchProcess, self._psutil.AccessDenied, self._psutil.ZombieProcess):
            return None

    def details(self, pid: int) -> ProcDetails:
        """User and full command line, cached per (pid, start time): a process's owner and argv do not
        change, but its pid goes to another process once it has exited."""
        start = self._start(pid)
        if start is None:
            return ProcDetails(pid, None, None)
        cached = self._cache.get((pid, start))
        if cached is not None:
            return cached
        user: str | None = None
        cmdline: str | None = None
        command: str | None = None
        created: float | None = None
        try:
            proc = self._psutil.Process(pid)
            user = clean_opt(proc.username())
            argv = [str(a) for a in proc.cmdline()]
            cmdline = clean(" ".join(argv)) or None  # anyone's argv: escapes made visible
            command = short_command(argv)
            created = float(proc.create_time())
        except (self._psutil.NoSuchProcess, self._psutil.AccessDenied, self._psutil.ZombieProcess) as exc:
            log.debug("details of pid %d: %s", pid, exc)
            return ProcDetails(pid, user, cmdline, start, command)  # not cached: it may answer next time
        if self._start(pid) != start:  # it exited while we read and another took its pid: whose argv?
            return ProcDetails(pid, None, None)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[(pid, start)] = ProcDetails(pid, user, cmdline, start, command, created)
        return self._cache[(pid, start)]

    def rss(self, pid: int) -> int | None:
        """The process's resident host memory now, in bytes; None when it is gone or hidden from us."""
        try:
            return int(self._psutil.Process(pid).memory_info().rss)
        except (self._psutil.NoSuchProcess, self._psutil.AccessDenied, self._psutil.ZombieProcess) as exc:
            log.debug("rss of pid %d: %s", pid, exc)
            return None

    def why_not(self, pid: int) -> str | None:
        """Why ``pid`` may not be signalled, in words; None when it may."""
        if pid <= 1:
            return f"PID {pid} is not a process to stop"
        if pid == self._own_pid:
            return "that is gpu-triage itself: press q to quit"
        try:
            self._kill(pid, 0)
        except ProcessLookupError:
            return f"PID {pid} has already exited"
        except PermissionError:
            owner = self.details(pid).user or "another user"
            return f"you may not signal PID {pid}: it belongs to {owner} and you are {_me()} (its owner or root may)"
        return None

    def pin(self, pid: int) -> Pinned | str:
        """Hold the process now at ``pid`` for a later :meth:`send`; a str says why it cannot be signalled."""
        reason = self.why_not(pid)
        if reason is not None:
            return reason
        start = self._start(pid)
        if start is None:
            return f"PID {pid} has already exited"
        fd: int | None = None
        if self._pidfd:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                return f"PID {pid} has already exited"
            except OSError as exc:  # a kernel without pidfds (before 5.3), a seccomp filter
                log.info("no pidfd for pid %d (%s): checking /proc/%d before the signal", pid, exc, pid)
        proc_dir: int | None = None
        if fd is None and self._procfs:
            try:
                proc_dir = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                return f"PID {pid} has already exited"
        pinned = Pinned(pid, start, self.details(pid), fd, proc_dir)
        # replaced while we looked: the start time read again, the details' own
        if self._start(pid) != start or pinned.details.start not in (None, start) or pinned.gone():
            pinned.close()
            return f"PID {pid} has already exited"
        return pinned

    def send(self, target: Pinned, name: str) -> str | None:
        """Send SIGTERM or SIGKILL to the pinned process; None when sent, else what went wrong (the
        process has exited: nothing is sent, whoever has its pid now)."""
        pid, sig = target.pid, SIGNALS[name]
        try:
            if target.fd is not None:
                signal.pidfd_send_signal(target.fd, sig)
            else:
                # the window between this check and the signal is the one a pidfd closes; without
                # pidfds it is as narrow as it can be made: one /proc read
                if target.gone() or self._start(pid) != target.start:
                    return gone(pid)
                self._kill(pid, sig)
        except ProcessLookupError:
            return gone(pid)
        except OSError as exc:
            log.warning("%s to pid %d failed: %s", name, pid, exc)
            return f"{name} to PID {pid} failed: {exc.strerror or exc}"
        log.info("sent %s to pid %d (started at %s)", name, pid, target.start)
        return None


def _me() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "this user"
