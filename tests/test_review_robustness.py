"""Bad surroundings never cost a recording or print a traceback: stdout that goes away, closed outright,
or a reader that left (`| head`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
