"""When the terminal goes away (an SSH session drops: the pty closes and the kernel sends SIGHUP), the
dashboard exits cleanly and closes the recording it was making as a valid Parquet file."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

from gpu_triage.trace.reader import open_trace

APP = Path(__file__).resolve().parents[1] / "app"


def _drain(fd: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                if not os.read(fd, 65536):
                    return
            except OSError:
                return


@pytest.mark.skipif(sys.platform != "linux", reason="pty and SIGHUP semantics of Linux")
def test_closing_the_terminal_ends_the_dashboard_and_keeps_a_valid_recording(tmp_path: Path) -> None:
    target = tmp_path / "session.parquet"
    stream = Path(str(target) + ".partial.arrows")
    argv = [sys.executable, "-m", "gpu_triage", "--record", str(target), "--interval", "0.2", "demo", "healthy"]
    env = {**os.environ, "PYTHONPATH": str(APP), "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stream.exists():
            _drain(fd, 0.2)  # keep reading so the app never blocks on a full terminal
        assert stream.exists(), "the dashboard never started recording"
        _drain(fd, 2.0)  # a few ticks at 0.2 s
        os.close(fd)  # the terminal goes away: SIGHUP to the session
        fd = -1
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        assert status is not None and time.monotonic() < deadline, "the dashboard did not exit after SIGHUP"
    finally:
        if fd >= 0:
            os.close(fd)
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    assert target.exists() and not stream.exists(), "the recording was not closed as a Parquet file"
    trace = open_trace(target)
    assert trace.n >= 2 and not trace.recovered
