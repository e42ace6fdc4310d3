"""The log parsers on real logs from the H200 machine (tests/data/joblogs/, README there: how each was made,
the library versions, and the job's own count printed at the end as `TRUE samples/s`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_triage.sources.job import LogTracker
from gpu_triage.sources.joblog import Reading, parse_line
from gpu_triage.sources.logfollower import LogFollower

DATA = Path(__file__).parent / "data" / "joblogs"


def _readings(name: str) -> list[tuple[str, Reading | None]]:
    lines = LogFollower(DATA / name, tail_start=1 << 40, budget=1 << 40).poll()
    return [(line, parse_line(line)) for line in lines]


def _true(name: str) -> float:
    m = re.search(r"TRUE samples/s: ([0-9.]+)", (DATA / name).read_text(errors="replace"))
    assert m
    return float(m.group(1))


def test_tqdm_bars_with_their_counters_rates_and_losses() -> None:
    rs = _readings("tqdm.log")
    bars = [(line, r) for line, r in rs if line.startswith(("Epoch ", "slow steps"))]
    unread = [line for line, r in bars if r is None]
    assert all("?it/s" in line for line in unread)  # only bars drawn before tqdm has a rate
    read = [r for _, r in bars if r is not None]
    assert len(read) > 4000 and {r.fmt for r in read} == {"tqdm"}  # "Epoch 0:" is tqdm's desc, not Lightning
    epoch1 = [r for line, r in bars if r is not None and line.startswith("Epoch 1")]
    assert [r.step for r in epoch1] == sorted(r.step for r in epoch1 if r.step is not None)
    assert epoch1[-1].step == epoch1[-1].total == 2000 and epoch1[-1].loss == pytest.approx(2.3348)
    slow = [r for line, r in bars if r is not None and line.startswith("slow steps")]
    assert slow[-1].step_time_s == 1.32  # the log's own "TRUE slow phase: 1.32 s/it"


def test_tqdm_counter_gives_the_rate_between_two_ticks() -> None:
    # the tracker follows the real bars as a log; its rate between two reads is the counter's advance
    tr = LogTracker(DATA / "tqdm.log", batch_size=128)
    tr.follower.tail_start = tr.follower.budget = 1 << 40
    job = tr.sample(now=100.0, interval_s=2.0)
    assert job is not None and job.source == "log:tqdm" and job.steps == 8  # the newest line: "slow steps 8/8"
    assert job.step_time_s == 1.32 and job.samples_per_s == pytest.approx(128 / 1.32)


def test_hf_trainer_string_values_and_its_own_samples_per_s() -> None:
    rs = _readings("hf_trainer.log")
    dicts = [r for line, r in rs if r is not None and r.fmt == "hf_trainer"]
    losses = [r for r in dicts if r.samples_per_s is None]
    assert len(losses) == 20 and all(r.loss is not None and r.epoch is not None for r in losses)  # every 50 of 1000
    summary = [r for r in dicts if r.samples_per_s is not None]
    assert summary and summary[-1].samples_per_s == pytest.approx(_true("hf_trainer.log"), rel=1e-3)
    bars = [r for _, r in rs if r is not None and r.fmt == "tqdm"]
    assert bars[-1].step == 1000 and bars[-1].total == 1000


def test_hf_trainer_log_followed_keeps_the_rate_and_takes_the_loss(tmp_path: Path) -> None:
    tr = LogTracker(DATA / "hf_trainer.log", batch_size=32)
    tr.follower.tail_start = tr.follower.budget = 1 << 40
    job = tr.sample(now=1.0, interval_s=2.0)
    assert job is not None and job.samples_per_s == pytest.approx(1826.083) and job.loss == pytest.approx(6.8582, 1e-4)


def test_lightning_rich_final_frame() -> None:
    rs = _readings("lightning.log")
    read = [r for _, r in rs if r is not None]
    assert len(read) == 1 and read[0].fmt == "lightning"
    assert (read[0].step, read[0].total, read[0].steps_per_s) == (84, 300, 228.96)


def test_imagenet_example_meters_give_exact_span_figures(tmp_path: Path) -> None:
    rs = [r for _, r in _readings("imagenet_example.log") if r is not None]
    assert len(rs) == 23 and {r.fmt for r in rs} == {"imagenet"}
    first, last = rs[0], rs[-1]
    assert (first.step, last.step, last.total) == (1, 221, 5005)
    assert (last.avg_step_time_s, last.avg_data_time_s) == (0.111, 0.044)
    # followed as it was written: the first batch's line at one tick, the rest by the next; the running means
    # of the two lines give the step time and the data wait over the span between them
    real = (DATA / "imagenet_example.log").read_bytes()
    cut = real.index(b"Epoch: [0][  11/5005]")
    log = tmp_path / "train.log"
    log.write_bytes(real[:cut])
    tr = LogTracker(log, batch_size=256)
    first_job = tr.sample(now=0.0, interval_s=2.0)
    assert first_job is not None and first_job.step_time_s == 4.249
    with open(log, "ab") as fh:
        fh.write(real[cut:])
    job = tr.sample(now=25.0, interval_s=2.0)
    assert job is not None
    total_t, total_d = 0.111 * 221 - 4.249, 0.044 * 221 - 2.220
    assert job.step_time_s == pytest.approx(total_t / 220)
    assert job.data_wait_pct == pytest.approx(100 * total_d / total_t)  # 37 %: the loader was part of each step
    assert job.samples_per_s == pytest.approx(256 * 220 / 25.0)  # the counter's advance over the 25 s between


def test_lightning_tqdm_bar_with_its_logger_version() -> None:
    # Lightning 2.6.6's TQDMProgressBar with the default logger: "Epoch 17:  64%|...| 192/300 [00:00<00:00,
    # 246.55it/s, v_num=0, train_loss=0.000653]", every step, 18 epochs of 300 steps in 20 s
    rs = _readings("lightning_tqdm.log")
    read = [r for line, r in rs if r is not None and line.startswith("Epoch ")]
    # the bar of the very first step has no postfix yet (nothing logged): that one reads as plain tqdm
    assert len(read) > 5000 and {r.fmt for r in read[1:]} == {"lightning"} and read[0].step == 1
    assert {r.total for r in read} == {300} and max(r.step or 0 for r in read) == 300
    assert all(r.loss is None or r.loss < 1.0 for r in read[-100:])
    # the bar's own smoothed rate against the job's count (TRUE: 33,861.7 samples/s at batch 128 = 264.5 it/s;
    # the bar restarts its clock every epoch and read 246 it/s at the end)
    assert read[-1].steps_per_s == pytest.approx(_true("lightning_tqdm.log") / 128, rel=0.1)


def test_lightning_tqdm_log_followed_gives_the_jobs_samples_per_s() -> None:
    tr = LogTracker(DATA / "lightning_tqdm.log", batch_size=128)
    tr.follower.tail_start = tr.follower.budget = 1 << 40
    job = tr.sample(now=1.0, interval_s=2.0)
    assert job is not None and job.source == "log:lightning"
    assert job.samples_per_s == pytest.approx(_true("lightning_tqdm.log"), rel=0.1)
