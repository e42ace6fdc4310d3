"""Unfinished recordings in a dataset or beside a file: named, and told apart (being recorded now, or left by
a killed recorder), and one recorder per host in a dataset."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.errors import UserError
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.storage.dataset import DatasetWriter
from gpu_triage.trace.writer import TraceWriter

START = datetime(2026, 1, 5, 12, tzinfo=UTC)


def _source() -> SimulatedSource:
    return SimulatedSource("healthy", gpus=2, seed=1, interval_s=2.0, start=START)


def _recording(root: Path, ticks: int = 5) -> tuple[DatasetWriter, SimulatedSource]:
    src = _source()
    writer = DatasetWriter(root, src.host_info(), 2.0, hostname="gpu01")
    for _ in range(ticks):
        writer.append(src.sample())
    return writer, src


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_dataset_holding_only_a_leftover_names_it_and_says_recover(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer, _src = _recording(tmp_path / "fleet")
    stream = writer.stream_path
    writer.abort()  # what a SIGKILL leaves: the stream, no lock
    err = _one_line_error(["diagnose", str(tmp_path / "fleet")], capsys)
    assert "no recording in it" not in err
    assert str(stream) in err and f"gpu-triage recover {stream}" in err


def test_a_dataset_being_recorded_says_so_and_does_not_advise_recover(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer, _src = _recording(tmp_path / "fleet")
    try:
        err = _one_line_error(["diagnose", str(tmp_path / "fleet")], capsys)
        assert writer.stream_path.name in err and "being recorded by pid" in err and "recover" not in err
    finally:
        writer.abort()


def test_diagnose_while_a_recorder_writes_does_not_advise_recover(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _source()
    target = tmp_path / "run.parquet"
    writer = TraceWriter(target, src.host_info(), 2.0)
    try:
        for _ in range(40):
            writer.append(src.sample())
        assert main(["diagnose", str(target)]) == 0
        err = capsys.readouterr().err
        assert "being recorded by pid" in err and "recover" not in err
    finally:
        writer.abort()
    # the same stream once its recorder is gone (the lock went with it): recover is the way
    assert main(["diagnose", str(target)]) == 0
    assert f"gpu-triage recover {writer.stream_path}" in capsys.readouterr().err


def test_a_second_recorder_of_one_host_in_one_dataset_is_refused(tmp_path: Path) -> None:
    first, src = _recording(tmp_path / "fleet")
    try:
        with pytest.raises(UserError) as caught:
            DatasetWriter(tmp_path / "fleet", src.host_info(), 2.0, hostname="gpu01")
        line = str(caught.value)
        assert "\n" not in line and "being recorded by pid" in line and "one recorder per host" in line
        DatasetWriter(tmp_path / "fleet", src.host_info(), 2.0, hostname="gpu02")  # another host: fine
    finally:
        first.close()
    again = DatasetWriter(tmp_path / "fleet", src.host_info(), 2.0, hostname="gpu01")  # one after the other
    again.append(src.sample())
    again.close()


def test_a_leftover_of_a_killed_recorder_does_not_block_the_next(tmp_path: Path) -> None:
    first, src = _recording(tmp_path / "fleet")
    first.abort()
    DatasetWriter(tmp_path / "fleet", src.host_info(), 2.0, hostname="gpu01").abort()


def test_a_rotation_that_cannot_make_its_partition_ends_the_last_file_whole(tmp_path: Path) -> None:
    src = SimulatedSource("healthy", gpus=2, seed=1, interval_s=2.0, start=datetime(2026, 1, 5, 23, 58, tzinfo=UTC))
    writer = DatasetWriter(tmp_path / "fleet", src.host_info(), 2.0, hostname="gpu01")
    (tmp_path / "fleet" / "host=gpu01").mkdir(parents=True)
    (tmp_path / "fleet" / "host=gpu01" / "date=2026-01-06").write_text("in the way")
    ticks = 0
    with pytest.raises(UserError, match="date=2026-01-06 is not a directory"):
        for _ in range(120):  # across midnight
            writer.append(src.sample())
            ticks += 1
    day = tmp_path / "fleet" / "host=gpu01" / "date=2026-01-05"
    assert list(day.glob("*.partial.arrows")) == []  # converted, not left for recover
    (only,) = day.glob("*.parquet")
    from gpu_triage.trace.reader import open_trace

    assert open_trace(only).n == ticks
