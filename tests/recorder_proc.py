"""A real `gpu-triage record` in a child process (the simulated source), and a poll of its live stream: shared by
the recorder tests that need a second process (crash safety, the stream's lock)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from gpu_triage.errors import UserError
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.stream import stream_path_for


def start_recorder(target: Path, interval_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "record", "-o", str(target), "--source", "sim:healthy",
         "--interval", str(interval_s), "--gpus", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_ticks(proc: subprocess.Popen[str], target: Path, at_least: int) -> int:
    """Poll the live stream (read while being written) until it holds ``at_least`` ticks (60 s at most)."""
    stream = stream_path_for(target)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if stream.exists():
            try:
                n = open_trace(stream).n
            except UserError:
                n = 0  # the schema is not written yet
            if n >= at_least:
                return n
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the recorder produced no ticks")
