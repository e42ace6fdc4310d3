"""The real recorder in a real process: kill -9 loses at most the tick being written, a clean stop (SIGTERM,
SIGINT, SIGHUP) leaves a valid Parquet, and `gpu-triage recover` finishes what a killed recorder left."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from gpu_triage.cli import main
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import stream_path_for
from recorder_proc import start_recorder, wait_for_ticks

INTERVAL = 0.1


def _assert_contiguous(trace) -> None:
    gaps = np.diff(trace.timestamps)
    assert np.allclose(gaps, INTERVAL, atol=1e-3), gaps  # no tick missing in the middle


@pytest.mark.slow
def test_kill_9_keeps_every_tick_but_the_last_and_recover_finishes(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "run.parquet"
    began = time.monotonic()
    proc = start_recorder(target, INTERVAL)
    seen = wait_for_ticks(proc, target, 5)
    proc.send_signal(signal.SIGKILL)
    ran_s = time.monotonic() - began
    proc.communicate(timeout=30)
    assert not target.exists()

    leftover = open_trace(target)  # FILE.parquet missing, FILE.parquet.partial.arrows present
    assert leftover.recovered and "partial.arrows" in (leftover.notice or "")
    assert leftover.n >= seen  # everything that was on disk before the kill is still there
    assert leftover.n <= ran_s / INTERVAL + 1  # and no more than the process can have sampled
    _assert_contiguous(leftover)
    assert {g.index for g in leftover.tick(-1).gpus} == {0, 1}

    capsys.readouterr()
    rc = main(["recover", str(stream_path_for(target))])  # the recorder was the real process; recover runs here
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert f"recovered {leftover.n} ticks" in out.out
    final = open_trace(target)
    assert not final.recovered and not stream_path_for(target).exists()
    assert final.ticks() == leftover.ticks()
    assert final.host.extra["source"] == "sim:healthy"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_clean_stop_writes_a_valid_parquet(tmp_path: Path, sig: signal.Signals) -> None:
    target = tmp_path / "run.parquet"
    proc = start_recorder(target, INTERVAL)
    wait_for_ticks(proc, target, 3)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    match = re.search(r"recorded (\d+) ticks .* to (\S+)", stdout)
    assert match, stdout
    assert Path(match.group(2)) == target
    assert not stream_path_for(target).exists()
    trace = open_trace(target)
    assert trace.n == int(match.group(1)) >= 3
    _assert_contiguous(trace)
    assert "Traceback" not in stderr


def test_fast_duration_and_recover_refuses_to_overwrite(tmp_path: Path, capsys) -> None:
    target = tmp_path / "day.parquet"
    assert main(["record", "-o", str(target), "--source", "sim:data_pipeline", "--fast", "--duration", "60",
                 "--gpus", "3", "--seed", "4"]) == 0
    assert "recorded 30 ticks" in capsys.readouterr().out
    trace = open_trace(target)
    assert trace.n == 30 and trace.interval_s == 2.0
    assert trace.host.extra["source"] == "sim:data_pipeline"
    assert "env" not in trace.host.extra  # this machine's environment says nothing about a simulated one
    # A second recording to the same name would destroy the first: refused.
    assert main(["record", "-o", str(target), "--source", "sim:healthy", "--fast", "--duration", "10"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert open_trace(target).n == 30
