"""Running the CLI in a child process and reading what it cost: wall time and peak resident memory (the
child's own ``ru_maxrss`` from ``wait4``, not the test process's), for tests that bound a hostile input's
time and memory in their assertions."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

APP = str(Path(__file__).resolve().parent.parent / "app")


@dataclass(frozen=True)
class Ran:
    rc: int
    out: str
    err: str
    seconds: float
    peak_mib: float
    killed: bool  # it ran past the limit and was killed


def run_cli(argv: list[str], *, limit_s: float, env: dict[str, str] | None = None, cwd: str | None = None) -> Ran:
    """``python -m gpu_triage ARGV`` in a child, killed after ``limit_s``; its output, time and peak RSS."""
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = APP + os.pathsep + child_env.get("PYTHONPATH", "")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "gpu_triage", *argv], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, env=child_env, cwd=cwd)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(limit_s, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Ran(proc.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                   seconds, usage.ru_maxrss / 1024, killed.is_set())
