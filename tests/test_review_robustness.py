"""Bad surroundings never cost a recording or print a traceback: stdout that goes away, closed outright,
or a reader that left (`| head`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.recording.headless import record_source
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.reader import open_trace
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_doctor_with_stdout_closed_gives_no_traceback(tmp_path: Path) -> None:
    # a torch that will not import, first on the path: the doctor's torch probe (a child python) answers at
    # once instead of spending seconds importing the real one, which is not what this test is about
    (tmp_path / "torch.py").write_text("raise ImportError('not imported in this test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_triage", "doctor", "--json"],
        stderr=subprocess.PIPE, text=True, preexec_fn=_close_stdout, env=env,
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
def test_option_values_out_of_range_are_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
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


def _null_trace(path: Path, *, sm: bool, util: bool) -> Path:
    """A pre-Hopper recording (no SM activity, no NVLink, no clocks), or one whose every GPU field is null."""
    from datetime import UTC, datetime, timedelta

    from gpu_triage.model import DiskSample, GpuInfo, GpuSample, HostInfo, ProcSample, Tick
    from gpu_triage.trace.writer import TraceWriter

    host = HostInfo(hostname="old", cpu_count=4, gpus=[GpuInfo(index=0), GpuInfo(index=1)])
    writer = TraceWriter(path, host, 2.0)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(120):
        busy = (i // 10) % 2 == 1
        gpus = [
            GpuSample(index=k, util_pct=(90.0 if busy else 5.0) if util else None,
                      sm_active_pct=(80.0 if busy else 2.0) if sm else None,
                      mem_used_bytes=10**9 if util else None, mem_total_bytes=16 * 10**9 if util else None)
            for k in range(2)
        ]
        writer.append(Tick(ts=t0 + timedelta(seconds=2 * i), interval_s=2.0, gpus=gpus, cpu_pct=[30.0] * 4,
                           disks=[DiskSample("sda")], procs=[ProcSample(pid=7, gpu_index=0)]))
    return writer.close()


@pytest.mark.slow
def test_unsupported_fields_are_null_and_na_in_diagnose_and_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    old = _null_trace(tmp_path / "old.parquet", sm=False, util=True)
    blank = _null_trace(tmp_path / "blank.parquet", sm=False, util=False)
    for argv, says in (
        (["diagnose", str(old)], "SM activity not available"),
        (["diagnose", str(blank)], "no GPU data"),
        (["compare", str(blank), str(old), "--all"], "n/a"),  # --all: n/a beside n/a is no change
    ):
        assert main(argv) == 0
        text = capsys.readouterr().out
        assert not re.search(r"\bnan\b", text, re.IGNORECASE), (argv, text)
        assert says in text
    compared = text
    sm_line = next(ln for ln in compared.splitlines() if ln.strip().startswith("SM active mean"))
    # before, after, change: never 0 (a percentage's change is in points, its relative column left blank)
    assert sm_line.split()[-3:] == ["n/a"] * 3
    assert main(["compare", str(blank), str(old), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # strict JSON: NaN would not even parse in other tools
    sm = result["overall"]["sm_active_mean_pct"]
    assert {k: sm[k] for k in ("before", "after", "change", "change_pct")} == dict.fromkeys(
        ("before", "after", "change", "change_pct"))
    assert sm["changed"] is False  # n/a beside n/a is not a change
    util = result["overall"]["util_mean_pct"]
    assert util["before"] is None and util["after"] == pytest.approx(47.5) and util["change"] is None
    assert main(["diagnose", str(blank), "--json"]) == 0
    segments = json.loads(capsys.readouterr().out)["segments"]
    assert segments and all(s["pattern"] == "idle" for s in segments)


def _killed_recording(target: Path) -> Path:
    """What `kill -9` of a recorder leaves: the stream beside ``target``, no Parquet."""
    from gpu_triage.trace.writer import TraceWriter

    source = SimulatedSource("healthy", gpus=1, cores=2, interval_s=2.0)
    writer = TraceWriter(target, source.host_info(), 2.0)
    for _ in range(20):
        writer.append(source.sample())
    writer.abort()  # stop without the Parquet step, as a killed recorder does: only the stream stays
    assert not target.exists() and stream_path_for(target).exists()
    return target


async def test_replay_of_a_killed_recording_opens_the_leftover_and_says_so(tmp_path: Path) -> None:
    import argparse

    from gpu_triage.config import Config
    from gpu_triage.ui.run import build_app

    target = _killed_recording(tmp_path / "run.parquet")
    app = build_app("replay", argparse.Namespace(file=str(target), speed=1.0), Config())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert app.replay.n == 20
        assert "partial.arrows" in app.query_one("#header").shown_plain


def test_diagnose_of_a_killed_recording_says_what_it_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    target = _killed_recording(tmp_path / "run.parquet")
    assert main(["diagnose", str(target), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ticks"] == 20  # stdout stays pure JSON
    assert "partial.arrows" in captured.err and "gpu-triage recover" in captured.err


def test_recover_of_a_directory_says_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs.parquet").mkdir()
    assert main(["recover", str(tmp_path / "runs.parquet")]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and err.count("\n") == 1
