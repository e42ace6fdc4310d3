"""compare: the job's samples/s before -> after, first; scaling efficiency across card counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpu_triage.compare.jobs import compare_job
from gpu_triage.compare.runs import compare_traces
from gpu_triage.compare.text import render_text
from gpu_triage.config import Config
from gpu_triage.data import H200_TRACE_2S
from gpu_triage.model import GpuSample, HostInfo, JobRank, JobSample, Tick
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _record(path: Path, cards: int, rates: list[float | None], wait: float, pulse: bool = True) -> Path:
    w = TraceWriter(path, HostInfo(hostname="h"), 2.0)
    for i, rate in enumerate(rates):
        job = None
        if rate is not None:
            step = 64 * cards / rate if rate else None
            ranks = [JobRank(r, r, cards, 100 + r, rate / cards, rate / cards / 64, step, wait, 0.1)
                     for r in range(cards)] if pulse else []
            job = JobSample(source="pulse" if pulse else "log:tqdm", samples_per_s=rate, steps_per_s=rate / 64 / cards,
                            step_time_s=step, data_wait_pct=wait, ranks=ranks)
        gpus = [GpuSample(g, util_pct=90.0 if g < cards else 0.0) for g in range(2)]
        w.append(Tick(ts=T0 + timedelta(seconds=2 * i), interval_s=2.0, gpus=gpus, job=job))
    return w.close()


def test_samples_per_s_first_and_scaling_efficiency(tmp_path: Path) -> None:
    # one card: 1000 samples/s while it ran (leading and trailing idle ticks do not count, the stall does)
    one = _record(tmp_path / "one.parquet", 1, [None, 0.0, 1000.0, 1000.0, 0.0, 1000.0, 1000.0, 0.0, 0.0], 60.0)
    two = _record(tmp_path / "two.parquet", 2, [1710.0] * 6, 5.0)
    job = compare_job(open_trace(one), open_trace(two))
    assert job is not None
    sps = job["metrics"]["samples_per_s"]
    assert sps["before"] == pytest.approx(800.0)  # 4 x 1000 and one stall of 0 between the first and last progress
    assert sps["after"] == pytest.approx(1710.0) and sps["change_pct"] == pytest.approx(113.75)
    assert job["cards"] == {"before": 1, "after": 2}
    s = job["scaling"]
    assert s["speedup"] == pytest.approx(1710 / 800) and s["efficiency_pct"] == pytest.approx(1710 / 800 / 2 * 100)

    result = compare_traces(open_trace(one), open_trace(two), Config())
    text = render_text(result)
    lines = text.splitlines()
    first_block = lines.index("job (the training's own clock)")
    assert first_block < lines.index("all cards")
    assert lines[first_block + 2].split()[:3] == ["samples/s", "800.0", "1710.0"]
    assert "2 cards give 2.14x one card: 107 % scaling efficiency" in text


def test_cards_from_busy_cards_when_the_log_has_no_ranks(tmp_path: Path) -> None:
    one = _record(tmp_path / "a.parquet", 1, [900.0] * 4, 0.0, pulse=False)
    two = _record(tmp_path / "b.parquet", 2, [1548.0] * 4, 0.0, pulse=False)
    job = compare_job(open_trace(one), open_trace(two))
    assert job is not None and job["cards"] == {"before": 1, "after": 2}
    assert job["scaling"]["efficiency_pct"] == pytest.approx(86.0)


def test_same_cards_no_scaling_and_v1_files_say_na(tmp_path: Path) -> None:
    a = _record(tmp_path / "a.parquet", 1, [900.0] * 4, 70.0)
    b = _record(tmp_path / "b.parquet", 1, [1200.0] * 4, 4.0)
    job = compare_job(open_trace(a), open_trace(b))
    assert job is not None and job["scaling"] is None
    assert job["metrics"]["data_wait_pct"]["change"] == pytest.approx(-66.0)
    v1 = open_trace(H200_TRACE_2S)
    assert compare_job(v1, v1) is None
    result = compare_traces(v1, v1, Config())
    assert result["job"] is None
    # the same file twice: nothing changed, so only --all prints the blocks
    assert "job: n/a (no job data in either recording" in render_text(result, show_all=True)
