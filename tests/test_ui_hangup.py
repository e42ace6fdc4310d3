"""The dashboard ends cleanly, closing the recording it was making as a valid Parquet file, when its
terminal goes away (an SSH session drops: the pty closes and the kernel sends SIGHUP) and when it is told
to stop (`kill PID` from a scheduler, systemd or a script: SIGTERM)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from gpu_triage.errors import UserError
from gpu_triage.trace.reader import open_trace

pytestmark = pytest.mark.slow  # real subprocesses, each seconds long: outside the inner loop

APP = Path(__file__).resolve().parents[1] / "app"


def _drain(fd: int, seconds: float) -> None:
    """Read what the app draws, so that it never blocks on a full terminal."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                if not os.read(fd, 65536):
                    return
            except OSError:
                return


def _text(drawn: bytes) -> bytes:
    """What a terminal shows of ``drawn``, roughly: its text without the escape sequences between."""
    return re.sub(rb"\x1b\[[0-9;?<>=$]*[ -/]*[@-~]", b"", drawn)


def _ticks_in(stream: Path) -> int:
    """The ticks a recorder's stream holds so far (0 while it holds none: read as it is being written)."""
    try:
        return open_trace(stream).n
    except UserError:
        return 0


@pytest.mark.skipif(sys.platform != "linux", reason="pty and signal semantics of Linux")
@pytest.mark.parametrize("ending", ["terminal closed (SIGHUP)", "SIGTERM"])
def test_the_dashboard_ends_cleanly_and_keeps_a_valid_recording(tmp_path: Path, ending: str) -> None:
    target = tmp_path / "session.parquet"
    stream = Path(str(target) + ".partial.arrows")
    argv = [sys.executable, "-m", "gpu_triage", "--record", str(target), "--interval", "0.2", "demo", "healthy"]
    env = {**os.environ, "PYTHONPATH": str(APP), "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    status = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stream.exists():
            _drain(fd, 0.2)
        assert stream.exists(), "the dashboard never started recording"
        while time.monotonic() < deadline and _ticks_in(stream) < 2:  # a few ticks recorded, however busy the box
            _drain(fd, 0.2)
        assert _ticks_in(stream) >= 2, "the dashboard recorded fewer than 2 ticks"
        if ending == "SIGTERM":
            os.kill(pid, signal.SIGTERM)
        else:
            os.close(fd)
            fd = -1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if fd >= 0:
                _drain(fd, 0.1)
            else:
                time.sleep(0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
        assert status is not None and os.WIFEXITED(status), f"the dashboard did not exit ({ending})"
    finally:
        if fd >= 0:
            os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    assert target.exists() and not stream.exists(), "the recording was not closed as a Parquet file"
    trace = open_trace(target)
    assert trace.n >= 2 and not trace.recovered


@pytest.mark.skipif(sys.platform != "linux", reason="pty and signal semantics of Linux")
@pytest.mark.parametrize("ending", ["q", "terminal closed (SIGHUP)"])
def test_a_fast_sampler_with_a_week_long_window_stays_small_and_obeys(ending: str) -> None:
    """`demo healthy --gpus 16 --interval 0.05 --window 604800` (each value within its range) grew to 10 GB
    and ignored q and SIGHUP. The window is now capped and the buffers grow with the ticks."""
    argv = [sys.executable, "-m", "gpu_triage", "--interval", "0.05", "--window", "604800",
            "demo", "healthy", "--gpus", "16"]
    env = {**os.environ, "PYTHONPATH": str(APP), "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    status = rusage = None
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b"window capped" not in seen:
            if select.select([fd], [], [], 0.1)[0]:
                seen = (seen + os.read(fd, 65536))[-200_000:]
        assert b"window capped at" in seen, "the screen does not say that the window was capped"
        # q or the hangup comes while the sampler runs at its pace: once the diagnosis says the window holds a
        # second (20 ticks at 0.05 s, frames drawn between them), however slowly the box got there
        held = re.compile(rb"collecting \(([1-9][0-9]*) s of")
        while time.monotonic() < deadline and not held.search(_text(seen)):
            if select.select([fd], [], [], 0.1)[0]:
                seen = (seen + os.read(fd, 65536))[-200_000:]
        assert held.search(_text(seen)), "the diagnosis never said the window holds a second of ticks"
        if ending == "q":
            os.write(fd, b"q")
        else:
            os.close(fd)
            fd = -1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if fd >= 0:
                _drain(fd, 0.1)
            else:
                time.sleep(0.1)
            done, status, rusage = os.wait4(pid, os.WNOHANG)
            if done:
                break
        assert status is not None and done, f"the dashboard did not exit on {ending}"
    finally:
        if fd >= 0:
            os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    assert rusage is not None and rusage.ru_maxrss < 1_000_000, f"peak memory {rusage.ru_maxrss} KB"
