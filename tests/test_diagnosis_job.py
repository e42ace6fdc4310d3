"""The job's own clock in the diagnosis: data wait is direct evidence, no progress on busy cards is a hang."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_triage.diagnosis.engine import diagnose
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.model import JobRank, JobSample, Tick
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.window import RollingWindow

TH = Thresholds()


def _ticks(scenario: str, n: int = 40) -> list[Tick]:
    src = SimulatedSource(scenario, gpus=2, seed=1, interval_s=2.0)
    return [src.sample() for _ in range(n)]


def _verdict(ticks: list[Tick]):
    w = RollingWindow(150)
    w.extend(ticks)
    return diagnose(w.view(), TH, 32)


def _with_job(ticks: list[Tick], **job: object) -> list[Tick]:
    out = []
    for t in ticks:
        ranks = [JobRank(0, 0, 2, 10, 300.0, 4.0, 0.25, job.get("data_wait_pct"), job.get("since_progress_s")),
                 JobRank(1, 1, 2, 11, 300.0, 4.0, 0.25, 5.0, job.get("since_progress_s"))]
        out.append(dataclasses.replace(t, job=JobSample(source="pulse", ranks=ranks, **job)))  # type: ignore[arg-type]
    return out


def test_without_job_data_the_verdict_is_unchanged() -> None:
    ticks = _ticks("healthy")
    plain = _verdict(ticks)
    assert all(t.job is None for t in ticks)
    assert "job_samples_per_s" not in plain.facts
    # a job source that says nothing useful (no wait, progressing) changes nothing but the facts
    same = _verdict(_with_job(ticks, samples_per_s=600.0, data_wait_pct=3.0, since_progress_s=0.2, step_time_s=0.25))
    assert (same.pattern, same.bottleneck, same.evidence, same.advice) == (
        plain.pattern, plain.bottleneck, plain.evidence, plain.advice)
    assert same.facts["job_samples_per_s"] == 600.0 and same.facts["job_data_wait_pct"] == 3.0


def test_data_wait_share_names_the_data_pipeline_whatever_the_utilisation() -> None:
    ticks = _ticks("healthy")
    assert _verdict(ticks).bottleneck != "data_pipeline"
    v = _verdict(_with_job(ticks, samples_per_s=600.0, data_wait_pct=82.0, since_progress_s=0.2, step_time_s=0.25))
    assert v.bottleneck == "data_pipeline" and v.confidence >= 0.9
    assert v.evidence[0].startswith("82 % of each step waits for the next batch (the job's own clock, rank 0)")
    assert any("num_workers" in a for a in v.advice)


def test_no_progress_on_busy_cards_is_a_stuck_collective() -> None:
    ticks = _ticks("healthy")
    v = _verdict(_with_job(ticks, samples_per_s=0.0, data_wait_pct=None, since_progress_s=45.0, step_time_s=0.25))
    assert v.bottleneck == "communication"
    assert v.evidence[0].startswith("no progress for 45 s while the cards show")
    assert "stuck collective or a hang" in v.evidence[0]
    assert any("py-spy dump" in a for a in v.advice)


def test_no_progress_on_idle_cards_is_not_called_a_hang() -> None:
    ticks = _ticks("memory_idle")
    v = _verdict(_with_job(ticks, samples_per_s=0.0, since_progress_s=45.0, step_time_s=0.25))
    assert v.bottleneck != "communication"
    assert v.facts["job_since_progress_s"] == pytest.approx(45.0)
