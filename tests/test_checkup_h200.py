"""Issue #16's baseline on 2 real H200s (2026-11-30, docs/checkup.md "Figures"), from the files kept.

`gpu-triage baseline --gpus 2 --seconds 20` (small MLP): its JSON and its recording with the ranks' pulse
(re-recorded at 21:52 UTC once the baseline reported its data wait as a measured 0 %).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpu_triage.config import Config
from gpu_triage.offline.judge import load_trace, verdicts
from gpu_triage.trace.reader import open_trace

DATA = Path(__file__).parent / "data"
REC = DATA / "h200x2-baseline-small-1s.parquet"


def test_the_recorded_pulse_agrees_with_the_baselines_own_figures() -> None:
    runs = {r["world_size"]: r for r in json.loads((DATA / "h200x2-baseline-small.json").read_text())["runs"]}
    assert runs[2]["backend"] == "nccl" and runs[1]["device_name"] == "NVIDIA H200"
    ticks = list(open_trace(REC).ticks())
    for world in (1, 2):
        rates = [t.job.samples_per_s for t in ticks if t.job and t.job.samples_per_s and len(t.job.ranks) == world]
        assert len(rates) >= 15
        assert statistics.fmean(rates) == pytest.approx(runs[world]["samples_per_s"], rel=0.02)
    eff = runs[2]["samples_per_s"] / (2 * runs[1]["samples_per_s"])
    assert eff == pytest.approx(0.68, abs=0.005)


def test_a_baseline_with_no_input_pipeline_is_not_called_the_data_pipeline() -> None:
    cfg = Config()
    tr = load_trace(REC)
    res = verdicts(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    running = [v for t, v, _s in res if t.job and t.job.samples_per_s]
    assert running and not any(v.bottleneck == "data_pipeline" for v in running)


def test_a_measured_low_data_wait_rules_the_loader_out_of_the_baseline() -> None:
    """The same real recording with the pulse's data wait as the baseline now reports it (a measured 0 %:
    pulse.step(n, data_wait_s=0.0)): the job's clock rules the data pipeline out whatever the process's
    core says; no num_workers=0 evidence is shown, and the verdict names what the rest supports."""
    cfg = Config()
    tr = load_trace(REC)
    for t in tr.ticks:
        if t.job is not None and t.job.source == "pulse" and t.job.steps_per_s:
            t.job.data_wait_pct = 0.0
            for r in t.job.ranks:
                r.data_wait_pct = 0.0
    res = verdicts(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    running = [v for t, v, _s in res if t.job and t.job.samples_per_s]
    assert len(running) >= 15
    assert not any(v.bottleneck == "data_pipeline" for v in running)
    assert not any("num_workers" in e for v in running for e in v.evidence)
    assert all(v.facts["job_data_wait_pct"] == 0.0 for v in running if not v.pattern == "collecting")
