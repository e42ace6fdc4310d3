"""Trace v2: the job column round-trips, version-1 files still read, a stream leftover keeps it too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpu_triage.data import H200_TRACE_2S
from gpu_triage.model import GpuSample, HostInfo, JobRank, JobSample, Tick
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _ticks() -> list[Tick]:
    job = JobSample(
        source="pulse", samples_per_s=1280.0, steps_per_s=10.0, step_time_s=0.1, data_wait_pct=82.0,
        since_progress_s=0.05, steps=None, loss=None,
        ranks=[JobRank(0, 0, 2, 111, 640.0, 10.0, 0.1, 82.0, 0.05), JobRank(1, 1, 2, 112, 640.0, 10.0, 0.1, 3.0, 0.04)],
    )
    log_job = JobSample(source="log:tqdm", samples_per_s=None, steps_per_s=9.5, step_time_s=None, steps=120)
    return [
        Tick(ts=T0, interval_s=2.0, gpus=[GpuSample(0, util_pct=40.0)], job=job),
        Tick(ts=T0 + timedelta(seconds=2), interval_s=2.0, gpus=[GpuSample(0, util_pct=41.0)], job=None),
        Tick(ts=T0 + timedelta(seconds=4), interval_s=2.0, gpus=[GpuSample(0, util_pct=42.0)], job=log_job),
    ]


def test_job_column_round_trips_through_parquet_and_the_crash_stream(tmp_path: Path) -> None:
    ticks = _ticks()
    w = TraceWriter(tmp_path / "run.parquet", HostInfo(hostname="h"), 2.0)
    for t in ticks:
        w.append(t)
    w.abort()  # killed: the stream is what is left
    leftover = open_trace(tmp_path / "run.parquet")
    assert leftover.recovered and leftover.ticks() == ticks

    w = TraceWriter(tmp_path / "ok.parquet", HostInfo(hostname="h"), 2.0)
    for t in ticks:
        w.append(t)
    trace = open_trace(w.close())
    got = trace.ticks()
    assert got == ticks
    assert got[0].job is not None and got[0].job.ranks[0].data_wait_pct == 82.0 and got[1].job is None


def test_version_1_files_read_with_no_job() -> None:
    trace = open_trace(H200_TRACE_2S)
    assert pq.ParquetFile(H200_TRACE_2S).schema_arrow.metadata[b"gpu_triage.schema"] == b"1"
    assert "job" in trace.table.column_names and trace.table.column("job").null_count == trace.n
    assert all(t.job is None for t in trace.ticks(0, 50))


def test_a_job_struct_from_another_version_is_fitted(tmp_path: Path) -> None:
    # a later writer with an extra job field and an extra rank field: read, extras dropped
    rows = [{"ts": T0, "job": {"source": "pulse", "samples_per_s": 5.0, "future": 1,
                               "ranks": [{"rank": 0, "data_wait_pct": 12.5, "future_rank": 2}]}}]
    path = tmp_path / "later.parquet"
    pq.write_table(pa.Table.from_pylist(rows).replace_schema_metadata({b"gpu_triage.schema": b"2"}), path)
    job = open_trace(path).tick(0).job
    assert job is not None and job.samples_per_s == 5.0 and job.ranks[0].rank == 0
    assert job.ranks[0].data_wait_pct == 12.5 and job.step_time_s is None


def test_impossible_job_values_read_as_na_and_are_counted(tmp_path: Path) -> None:
    bad = JobSample(source="pulse", samples_per_s=-5.0, steps_per_s=float("nan"), step_time_s=0.1,
                    data_wait_pct=400.0, since_progress_s=float("inf"), loss=float("nan"),
                    ranks=[JobRank(0, 0, 1, 7, 640.0, 10.0, 0.1, -3.0, 0.5)])
    w = TraceWriter(tmp_path / "bad.parquet", HostInfo(hostname="h"), 2.0)
    w.append(Tick(ts=T0, interval_s=2.0, gpus=[GpuSample(0, util_pct=40.0)], job=bad))
    w.append(Tick(ts=T0 + timedelta(seconds=2), interval_s=2.0, gpus=[GpuSample(0, util_pct=40.0)], job=None))
    trace = open_trace(w.close())
    job = trace.tick(0).job
    assert job is not None and job.step_time_s == 0.1 and job.ranks[0].samples_per_s == 640.0
    assert (job.samples_per_s, job.steps_per_s, job.data_wait_pct, job.since_progress_s) == (None, None, None, None)
    assert job.ranks[0].data_wait_pct is None
    assert trace.tick(1).job is None
    assert "5 values out of range ignored" in (trace.notice or "")
