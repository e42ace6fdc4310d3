"""A tick whose job or process part holds a value its column cannot hold (an id past u32 from a pulse file, a
negative pid from a source's bug) is recorded without that part: its cards, cores and disks are not lost
with it. Only a tick whose cards themselves cannot be encoded is skipped."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_triage.model import HostInfo, JobRank, JobSample, ProcSample
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter
from tests.ui_ticks import make_tick

BAD_JOB = JobSample(source="pulse", samples_per_s=100.0, ranks=[JobRank(rank=2**40, samples_per_s=100.0)])
BAD_PROC = ProcSample(pid=-5, gpu_index=0, name="python")


def _record(path: Path, ticks: list) -> list:
    writer = TraceWriter(path, HostInfo(hostname="h"), 2.0, convert_in_child=False)
    for tick in ticks:
        writer.append(tick)
    writer.close()
    return open_trace(path).ticks()


def test_a_tick_with_an_unencodable_job_keeps_its_cards(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = make_tick(0, gpus=2, cores=4)
    bad = replace(make_tick(1, gpus=2, cores=4), job=BAD_JOB)
    with caplog.at_level(logging.ERROR, logger="gpu_triage.trace.writer"):
        back = _record(tmp_path / "job.parquet", [good, bad, make_tick(2, gpus=2, cores=4)])
    assert len(back) == 3
    assert back[1].job is None
    assert [g.util_pct for g in back[1].gpus] == [g.util_pct for g in bad.gpus]
    assert back[1].cpu_pct == pytest.approx(bad.cpu_pct)
    assert "recorded without its job part" in caplog.text
    assert "1 ticks of" in caplog.text and "without their job or process part" in caplog.text


def test_a_tick_with_an_unencodable_process_keeps_its_cards_and_its_job(tmp_path: Path) -> None:
    job = JobSample(source="pulse", samples_per_s=100.0, ranks=[JobRank(rank=0, samples_per_s=100.0)])
    bad = replace(make_tick(0, gpus=2, cores=4), procs=[BAD_PROC], job=job)
    back = _record(tmp_path / "procs.parquet", [bad])
    assert len(back) == 1 and back[0].procs == []
    assert [g.util_pct for g in back[0].gpus] == [g.util_pct for g in bad.gpus]


def test_a_tick_whose_cards_cannot_be_encoded_is_skipped_and_the_rest_recorded(tmp_path: Path) -> None:
    tick = make_tick(1, gpus=2, cores=4)
    broken = replace(tick, gpus=[replace(tick.gpus[0], index=-1)], job=BAD_JOB)
    back = _record(tmp_path / "cards.parquet", [make_tick(0, gpus=2, cores=4), broken, make_tick(2, gpus=2, cores=4)])
    assert [t.ts for t in back] == [make_tick(0).ts, make_tick(2).ts]
