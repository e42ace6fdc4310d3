"""Bad surroundings never cost a recording or print a traceback: stdout that goes away, closed outright,
or a reader that left (`| head`)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_triage.cli import main

from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.record import record_source
from gpu_triage.trace.writer import stream_path_for


class _GoneStdout:
    """A stdout whose reader has left: every write fails the way a closed pipe does."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


def test_a_recording_survives_its_stdout_going_away(tmp_path: Path) -> None:
    target = tmp_path / "run.parquet"
    out = _GoneStdout()
    source = SimulatedSource("healthy", gpus=2, cores=4, interval_s=2.0)
    path, ticks = record_source(source, target, 2.0, duration_s=40.0, fast=True, describe_machine=False, out=out)
    assert out.writes >= 1  # it did try to say something
    assert ticks == 20
    assert open_trace(path).n == 20  # every tick reached the Parquet
    assert not stream_path_for(target).exists()


def _close_stdout() -> None:
    os.close(1)  # in the child, before exec: the command starts with no stdout at all (`>&-`)


def test_record_with_stdout_closed_still_writes_the_file(tmp_path: Path) -> None:
    target = tmp_path / "run.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_triage", "record", "-o", str(target), "--source", "sim:healthy",
         "--gpus", "1", "--duration", "20", "--fast"],
        stderr=subprocess.PIPE, text=True, preexec_fn=_close_stdout,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert open_trace(target).n == 10


def test_doctor_with_stdout_closed_gives_no_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_triage", "doctor", "--json"],
        stderr=subprocess.PIPE, text=True, preexec_fn=_close_stdout,
    )
    assert proc.returncode in (0, 1)  # the check-up's own verdict; 2 would be an error
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["record", "-o", "x.parquet", "--source", "sim:healthy", "--duration", "inf", "--fast"], "--duration"),
        (["--interval", "1e-9", "demo", "healthy"], "--interval"),  # was a MemoryError traceback
        (["diagnose", "x.parquet", "--window", "1e12"], "--window"),
        (["replay", "x.parquet", "--speed", "inf"], "--speed"),
    ],
)
def test_option_values_out_of_range_are_one_line(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert says in err.splitlines()[-1] and "Traceback" not in err


@pytest.mark.parametrize("kind", ["existing file", "directory", "leftover stream"])
def test_a_bad_record_target_fails_before_the_dashboard_starts(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "run.parquet"
    if kind == "existing file":
        target.write_bytes(b"PAR1")
    elif kind == "directory":
        target.mkdir()
    else:
        stream_path_for(target).write_bytes(b"")
    assert main(["--record", str(target), "demo", "healthy"]) == 2  # returns: no screen was ever taken
    err = capsys.readouterr().err
    assert err.startswith("gpu-triage: error: ") and err.count("\n") == 1


@pytest.mark.skipif(sys.platform != "linux", reason="pty semantics of Linux")
def test_sigterm_ends_the_dashboard_and_keeps_a_valid_recording(tmp_path: Path) -> None:
    """`kill PID` (a scheduler, systemd, a script) used to kill the dashboard outright, leaving a stream."""
    target = tmp_path / "session.parquet"
    stream = stream_path_for(target)
    argv = [sys.executable, "-m", "gpu_triage", "--record", str(target), "--interval", "0.2", "demo", "healthy"]
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    status = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stream.exists():
            _drain(fd, 0.2)
        assert stream.exists(), "the dashboard never started recording"
        _drain(fd, 1.5)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _drain(fd, 0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
        assert status is not None and os.WIFEXITED(status), "the dashboard did not exit on SIGTERM"
    finally:
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    assert target.exists() and not stream.exists(), "the recording was not closed as a Parquet file"
    assert open_trace(target).n >= 2


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
