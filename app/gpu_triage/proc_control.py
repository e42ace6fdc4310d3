"""Facts about one process of this machine (its user and command line) and sending it a signal, for the
dashboard's process table. Kept out of ui/ (the outside world is reached by the core; the UI only asks).

A signal is never sent to a process the user may not signal: :meth:`ProcControl.why_not` asks the kernel
first (``kill(pid, 0)`` sends nothing and says whether we may) and says why not in words.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


@dataclass(frozen=True, slots=True)
class ProcDetails:
    """Who runs a process and how it was started; None where the system does not say."""

    pid: int
    user: str | None
    cmdline: str | None


class ProcControl:
    """Details and signals for processes of this machine; psutil and ``os.kill`` are injected for tests."""

    def __init__(
        self, psutil_module: Any = None, kill: Callable[[int, int], None] = os.kill, own_pid: int | None = None
    ) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self._psutil = psutil_module
        self._kill = kill
        self._own_pid = os.getpid() if own_pid is None else own_pid
        self._cache: dict[int, ProcDetails] = {}

    def details(self, pid: int) -> ProcDetails:
        """User and full command line (cached per pid: a pid's owner and argv do not change)."""
        if pid in self._cache:
            return self._cache[pid]
        user: str | None = None
        cmdline: str | None = None
        try:
            proc = self._psutil.Process(pid)
            user = proc.username()
            cmdline = " ".join(proc.cmdline()) or None
        except (self._psutil.NoSuchProcess, self._psutil.AccessDenied, self._psutil.ZombieProcess) as exc:
            log.debug("details of pid %d: %s", pid, exc)
            return ProcDetails(pid, user, cmdline)  # not cached: it may answer next time
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[pid] = ProcDetails(pid, user, cmdline)
        return self._cache[pid]

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

    def send(self, pid: int, name: str) -> str | None:
        """Send SIGTERM or SIGKILL; None when sent, else what went wrong."""
        reason = self.why_not(pid)
        if reason is not None:
            return reason
        try:
            self._kill(pid, SIGNALS[name])
        except OSError as exc:
            log.warning("%s to pid %d failed: %s", name, pid, exc)
            return f"{name} to PID {pid} failed: {exc.strerror or exc}"
        log.info("sent %s to pid %d", name, pid)
        return None


def _me() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "this user"
