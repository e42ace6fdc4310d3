"""A job's rate is a measured figure: one that is no finite number within trace v2's physical range (a log
line's rate of 330 digits reads as infinity, a pulse file's counters are the job's to write) is no
measurement, and a rate that reaches the diagnosis anyway never makes it fail."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.diagnosis.host_evidence import WorkersRec
from gpu_triage.offline.judge import load_trace, verdicts
from gpu_triage.sources.job import LogTracker
from gpu_triage.sources.joblog import parse_line

STARVED = Path(__file__).parent / "data" / "h200x2-joblog-1card-starved-1s.parquet"  # 1 worker, starved
HUGE = "9" * 330


def test_a_330_digit_rate_from_a_tqdm_line_is_no_measurement_and_the_diagnosis_goes_on(tmp_path: Path) -> None:
    line = f" 40%|████      | 2000/5000 [00:10<00:15, {HUGE}.00img/s]"
    r = parse_line(line)
    assert r is not None and r.fmt == "tqdm" and r.step == 2000 and r.samples_per_s is None
    log = tmp_path / "train.log"
    log.write_text(line + "\n")
    job = LogTracker(log, batch_size=32).sample(now=5.0, interval_s=1.0)
    assert job is not None and job.steps == 2000 and job.samples_per_s is None
    # the real starved run, every tick carrying that line's reading in place of the job's own rate; and the
    # rate as the line spells it, where a job figure reaches the engine some other way
    trace, cfg = load_trace(STARVED), Config()
    for rate in (r.samples_per_s, math.inf, float(HUGE), 1e308):
        ticks = [t if t.job is None else dataclasses.replace(t, job=dataclasses.replace(t.job, samples_per_s=rate))
                 for t in trace.ticks]
        judged = verdicts(ticks, trace.interval_s, cfg.thresholds, cfg.window_s, trace.host.cpu_count)
        assert len(judged) == len(ticks)
        assert any("DataLoader(num_workers=" in a for _t, raw, _s in judged for a in raw.advice), rate


def test_the_other_formats_and_the_inverse_rate_are_bounded_too() -> None:
    for line in (f" 40%|████      | 2000/5000 [00:10<00:15, {HUGE}.00it/s]",
                 " 40%|████      | 2000/5000 [00:10<00:15, 1e-320s/img]",  # its inverse: infinity
                 "epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=1.0, CurrSamplesPerSec=1e400, x=1",
                 "{'train_runtime': 1.0, 'train_samples_per_second': 1e308, 'train_steps_per_second': 1e300, "
                 "'epoch': 1.0}"):
        r = parse_line(line)
        assert r is not None, line
        assert r.samples_per_s is None and r.steps_per_s is None, (line, r)
    r = parse_line(" 40%|████      | 2000/5000 [00:10<00:15, 123.40img/s]")  # an ordinary rate stays
    assert r is not None and r.samples_per_s == 123.4


def test_a_pulse_files_counters_cannot_give_an_infinite_rate(tmp_path: Path) -> None:
    from gpu_triage.sources.pulsereader import PulseReader, _RankState

    state = _RankState()
    PulseReader._update(state, {"t": 100.0, "steps": 0, "samples": 0})
    PulseReader._update(state, {"t": 100.5, "steps": 10**12, "samples": 10**30})
    assert state.samples_per_s is None and state.steps_per_s is None
    PulseReader._update(state, {"t": 101.5, "steps": 10**12 + 20, "samples": 10**30 + 640})
    assert (state.steps_per_s, state.samples_per_s) == (20.0, 640.0)  # measured figures stay


def test_a_rate_past_any_measurement_leaves_the_recommendation_without_it() -> None:
    rec = WorkersRec(lo=8, hi=16, now=1, state="too_few", cores=64, procs=1, idle_cores=40, gpu_pct=26.0, pegged=1)
    for rate in (math.inf, 1e308, 1e13):
        with_it = rec.with_rate(rate, 93.0, 26.0)
        assert with_it is rec, rate
        assert with_it.recommended() >= 2 and with_it.line() is not None
    assert rec.with_rate(457.0, 93.0, 26.0).recommended() == 4  # a measured rate is still used
