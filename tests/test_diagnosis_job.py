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


def _spinning(ticks: list[Tick]) -> list[Tick]:
    """NCCL kernels waiting in a collective: GPU-Util stays high on a few SMs (real hang: SM 1-18 %)."""
    for t in ticks:
        for g in t.gpus:
            g.sm_active_pct = 15.0
    return ticks


def test_no_progress_on_busy_cards_is_a_stuck_collective() -> None:
    ticks = _spinning(_ticks("healthy"))
    v = _verdict(_with_job(ticks, samples_per_s=0.0, data_wait_pct=None, since_progress_s=45.0, step_time_s=0.25))
    assert v.bottleneck == "hung_collective"
    assert v.evidence[0].startswith("no progress for 45 s while the cards show")
    assert "stuck collective or a hang" in v.evidence[0]
    assert any("py-spy dump" in a for a in v.advice)


def test_no_progress_on_idle_cards_is_not_called_a_hang() -> None:
    ticks = _ticks("memory_idle")
    v = _verdict(_with_job(ticks, samples_per_s=0.0, since_progress_s=45.0, step_time_s=0.25))
    assert v.bottleneck != "hung_collective"
    assert v.facts["job_since_progress_s"] == pytest.approx(45.0)


def test_no_progress_is_judged_against_the_jobs_own_step_time() -> None:
    """No step for 10 of its steps (and at least no_progress_min_s) is no progress: 6 s is a hang for a job
    of 0.25 s steps, not for one of 2 s steps (max(5 s, 10 x 2 s) = 20 s)."""
    ticks = _spinning(_ticks("healthy"))
    fast = _verdict(_with_job(ticks, samples_per_s=0.0, since_progress_s=6.0, step_time_s=0.25))
    slow = _verdict(_with_job(ticks, samples_per_s=0.0, since_progress_s=6.0, step_time_s=2.0))
    assert fast.bottleneck == "hung_collective" and fast.mechanism == "hung_collective"
    assert slow.mechanism != "hung_collective" and not any("no progress" in e for e in slow.evidence)


def test_busy_sms_without_steps_are_not_called_a_hang() -> None:
    """Between training steps a job may evaluate: real kernels (SM activity high), no step counted."""
    v = _verdict(_with_job(_ticks("healthy"), samples_per_s=0.0, since_progress_s=45.0, step_time_s=0.25))
    assert v.bottleneck != "hung_collective" and v.mechanism != "hung_collective"


def test_a_stale_data_wait_is_not_evidence() -> None:
    """The share a job reports after its last step describes steps that no longer happen: not used once no
    step came for max(1 s, 3 steps, 2 ticks) = 4 s at 2 s ticks (SM busy: not the hang rule either)."""
    ticks = _ticks("healthy")
    fresh = _verdict(_with_job(ticks, samples_per_s=600.0, data_wait_pct=82.0, since_progress_s=0.2,
                               step_time_s=0.25))
    stale = _verdict(_with_job(ticks, samples_per_s=0.0, data_wait_pct=82.0, since_progress_s=4.5,
                               step_time_s=0.25))
    assert fresh.bottleneck == "data_pipeline"
    assert stale.bottleneck != "data_pipeline" and stale.facts["job_data_wait_pct"] != stale.facts["job_data_wait_pct"]
    assert not any("waits for the next batch" in e for e in stale.evidence)


def test_a_measured_low_data_wait_rules_out_a_loader_read_from_the_host() -> None:
    """A loader read from the cores (the simulated data_pipeline) is ruled out when the job's own steps
    measurably do not wait for data; an unmeasured wait (None) rules nothing out."""
    ticks = _ticks("data_pipeline")
    plain = _verdict(ticks)
    assert plain.bottleneck == "data_pipeline"
    low = _verdict(_with_job(ticks, samples_per_s=600.0, data_wait_pct=3.0, since_progress_s=0.2, step_time_s=0.25))
    unknown = _verdict(_with_job(ticks, samples_per_s=600.0, data_wait_pct=None, since_progress_s=0.2,
                                 step_time_s=0.25))
    assert low.bottleneck != "data_pipeline"
    assert any("of each step waits for the next batch" in e and "not the input pipeline" in e for e in low.evidence)
    assert unknown.bottleneck == "data_pipeline"
