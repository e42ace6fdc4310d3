"""The num_workers recommendation from the job's own samples/s, on the real 2-H200 recordings with a job source
(lab/pulse_train.py: 1 DataLoader worker per rank starved, 12 fixed, docs/h200.md "Job pulse on 2
H200s"), recorded with the pulse (samples/s and data wait per rank) and from the tqdm log (samples/s only).

The starved runs get one number above what they had, within the cores, with the job's samples/s in its reason;
the fixed runs get no change. The number agrees with what the fixed run shows: enough workers for the rate the
fixed run reached (the training's own count, *-progress.json) at the rate one starved worker delivered, and no
more than the fixed run used."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_triage.config import Config
from gpu_triage.diagnosis.host_evidence import WorkersRec, least_busy_pct
from gpu_triage.offline.judge import load_trace, verdicts

DATA = Path(__file__).parent / "data"
STARVED = ["1card-starved", "2card-starved", "2card-starved-rerun"]
FIXED = ["1card-fixed", "2card-fixed"]
KINDS = ["pulse", "joblog"]
REC = re.compile(r"^DataLoader\(num_workers=(\d+)\) \(now (\d+)\): ~(\d+) samples/s from ")


def _path(kind: str, name: str) -> Path:
    return DATA / f"h200x2-{kind}-{name}-1s.parquet"


def _label_workers(name: str) -> int:
    """num_workers per rank as the label's what_ran says ("1 DataLoader worker per rank", "12 workers")."""
    lab = json.loads((DATA / f"h200x2-pulse-{name}-1s.labels.json").read_text())[0]
    m = re.search(r"(\d+) (?:DataLoader )?workers?\b", lab["what_ran"])
    assert m is not None, lab["what_ran"]
    return int(m.group(1))


def _true_rate(name: str) -> float | None:
    """The training's own samples/s (its progress file) over its steady stretch: the first 2 s left out, as
    lab/pulse_check.py does; None where the run has none (the 2-card starved run hung at its end)."""
    path = DATA / f"h200x2-pulse-{name}-progress.json"
    if not path.exists():
        return None
    pts = [p for p in json.loads(path.read_text())["points"]]
    pts = [p for p in pts if p[0] >= pts[0][0] + 2.0]
    return float((pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))


@cache
def _run(kind: str, name: str, with_job: bool = True) -> tuple[Any, list[Any]]:
    cfg, tr = Config(), load_trace(_path(kind, name))
    ticks = tr.ticks if with_job else [dataclasses.replace(t, job=None) for t in tr.ticks]
    return tr, verdicts(ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)


def _training_advice(kind: str, name: str) -> list[list[str]]:
    """Each tick's advice (the engine's verdict; the shown one may hold an earlier verdict's) while the job
    trains: a step finished within the last second (its steps take 0.04-0.14 s; after the last one the rate it
    reported is stale), once it has reported its rate for job_rate_min_s (before, the recommendation is the one
    without a job source)."""
    tr, res = _run(kind, name)
    first = next(i for i, (t, _r, _s) in enumerate(res) if t.job is not None and t.job.samples_per_s)
    settled = first + math.ceil(Config().thresholds.job_rate_min_s / tr.interval_s)
    return [raw.advice for t, raw, _shown in res[settled:]
            if t.job is not None and t.job.samples_per_s and (t.job.since_progress_s or 0.0) <= 1.0]


def _rate_lines(kind: str, name: str) -> list[re.Match[str]]:
    return [m for advice in _training_advice(kind, name) for a in advice if (m := REC.match(a)) is not None]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", STARVED)
def test_a_starved_run_gets_more_workers_within_the_cores_with_the_jobs_samples_per_s(kind: str, name: str) -> None:
    tr, _res = _run(kind, name)
    ranks, had = int(name[0]), _label_workers(name)
    lines = _rate_lines(kind, name)
    assert len(lines) >= 10, _training_advice(kind, name)
    for m in lines:
        rec, now = int(m.group(1)), int(m.group(2))
        assert now == had
        assert had < rec <= tr.host.cpu_count // ranks - 1, m.string  # more, and a core per rank left for the step
    # every num_workers line while it trains is this one: no second number, none without the job's rate
    others = [a for advice in _training_advice(kind, name) for a in advice
              if "num_workers=" in a and REC.match(a) is None]
    assert not others, others
    # the reason cites the job's own samples/s: the training's own count where it has one, else what it reported
    cited = statistics.median(float(m.group(3)) for m in lines)
    truth = _true_rate(name)
    if truth is None:
        truth = statistics.median(t.job.samples_per_s for t in tr.ticks if t.job is not None and t.job.samples_per_s)
    assert abs(cited - truth) <= 0.1 * truth, (cited, truth)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", STARVED)
def test_the_number_agrees_with_what_the_fixed_run_used_and_reached(kind: str, name: str) -> None:
    ranks = int(name[0])
    fixed = f"{ranks}card-fixed"
    used = _label_workers(fixed)  # the fixed run's num_workers, which took the data wait under 1 %
    reached = _true_rate(fixed)  # what the GPUs took once fed
    assert reached is not None
    starved = _true_rate(name)
    if starved is None:  # no progress file: the rate the job reported (the pulse agrees with it within 2 %)
        tr, _res = _run("pulse", name)
        starved = statistics.median(t.job.samples_per_s for t in tr.ticks if t.job is not None and t.job.samples_per_s)
    per_worker = starved / (ranks * _label_workers(name))
    enough = math.ceil(reached / ranks / per_worker)  # workers per rank that deliver what the fixed run reached
    recs = [int(m.group(1)) for m in _rate_lines(kind, name)]
    assert max(recs) <= used, recs
    assert statistics.median(recs) >= enough, (recs, enough)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", FIXED)
def test_a_fixed_run_is_not_told_to_change_num_workers(kind: str, name: str) -> None:
    advice = _training_advice(kind, name)
    assert len(advice) >= 20
    for a in (a for tick in advice for a in tick if "num_workers" in a):
        assert a.startswith("keep num_workers="), a


def test_without_a_job_source_the_recommendation_is_todays() -> None:
    _tr, res = _run("pulse", "1card-starved", with_job=False)
    lines = [a for _t, raw, _s in res for a in raw.advice if "num_workers=" in a]
    assert any("each added worker adds a core's worth of input" in a for a in lines), lines
    assert not any("samples/s" in a for a in lines), lines


# -- the arithmetic, on the recommendation itself -------------------------------------------------------------

def _starved(now: int = 4, procs: int = 1, cores: int = 32, idle: int = 24, gpu_pct: float = 50.0) -> WorkersRec:
    return WorkersRec(lo=cores // procs // 4, hi=cores // procs // 2, now=now, state="too_few", cores=cores,
                      procs=procs, idle_cores=idle, gpu_pct=gpu_pct, pegged=now * procs)


def test_the_rate_the_gpu_would_take_from_the_data_wait() -> None:
    rec = _starved().with_rate(310.0, 50.0, math.nan)  # no GPU-Util: the job's clock alone
    line = rec.line()
    assert line is not None
    assert line.startswith("DataLoader(num_workers=8) (now 4): ~310 samples/s from 4 workers (4 pegged, ~78/s each)")
    assert "the GPU would take ~620/s (at 50 % data wait): 8 workers" in line


def test_kernels_running_during_the_wait_count_as_fed() -> None:
    # 93 % of each step waits, but the card computes 26 % of the time: 1 worker -> 4, not 15
    rec = _starved(now=1).with_rate(457.0, 93.0, 26.0)
    assert rec.recommended() == 4
    line = rec.line() or ""
    assert "~1758/s (busy 26 % of the time on the least busy card; its kernels run during the 93 % data wait)" in line


def test_per_process_and_bounded_by_the_idle_cores() -> None:
    rec = _starved(now=1, procs=2, cores=16, idle=6).with_rate(1000.0, 90.0, math.nan)  # 10 per process wanted
    assert rec.needed() == 10
    assert rec.recommended() == 4  # 1 + 6 idle cores / 2 processes
    line = rec.line() or ""
    assert "the GPUs would take ~10000/s" in line and "10 workers per process, 4 fit the idle cores" in line


def test_never_fewer_workers_and_keep_when_the_rate_says_they_deliver() -> None:
    rec = _starved(now=4).with_rate(400.0, 0.0, 100.0)  # fed all the time: the 4 deliver what the GPU takes
    assert rec.recommended() >= 4
    assert (rec.line() or "").startswith("keep num_workers=4: ~400 samples/s")
    for state in ("cpu_full", "cpu_bound"):  # a CPU-bound pipeline: never a number, never fewer
        line = dataclasses.replace(_starved(), state=state).with_rate(300.0, 80.0, 20.0).line() or ""
        assert "will not help" in line and "DataLoader(num_workers=" not in line


def test_no_rate_no_change() -> None:
    rec = _starved(now=2)
    for args in ((None, 50.0, 30.0), (0.0, 50.0, 30.0), (300.0, None, math.nan)):
        assert rec.with_rate(*args) is rec
    assert "each added worker adds a core's worth of input" in (rec.line() or "")


def test_the_least_busy_card_not_the_one_spinning_at_a_collective() -> None:
    util = np.array([[28.0, 99.0], [32.0, 99.0], [95.0, 31.0], [np.nan, np.nan]])
    assert least_busy_pct(util, [0, 1]) == 31.0
    assert least_busy_pct(util, [1]) == 99.0
    assert math.isnan(least_busy_pct(util, []))


def test_workers_not_measured_pegged_get_the_same_number_from_the_rate() -> None:
    # the window still holds the ticks before the workers started: none reads pegged, the rate still says it
    few = dataclasses.replace(_starved(now=1), state="range", pegged=0).with_rate(457.0, 93.0, 26.0)
    assert (few.line() or "").startswith("DataLoader(num_workers=4) (now 1): ~457 samples/s from 1 worker (0 pegged")
    # enough workers by the cores, none pegged, the steps wait: they wait on reads; the rate says how many more
    waiting = dataclasses.replace(_starved(now=8), state="range", pegged=0).with_rate(800.0, 60.0, math.nan)
    assert waiting.line() is None
    line = waiting.waiting_line() or ""
    assert line.startswith("DataLoader(num_workers=20, prefetch_factor=4) (now 8): ~800 samples/s from 8 workers")
    assert "the GPU would take ~2000/s (at 60 % data wait)" in line and "wait on reads or latency" in line
