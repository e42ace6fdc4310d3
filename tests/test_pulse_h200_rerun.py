"""The 2-card starved run of issue #12's H200 proof, made again (2026-11-30 21:33 UTC, 2 H200s, NV18) after its
training script learnt to decide the last step on all ranks together (``stop_together``): the first run hung at
its end and could not be checked. Same checks as the others (scripts/h200_pulse_check.py's ``check_files``):
samples/s within 2 % of the training's own count, from the pulse and from the tqdm log, data wait over half.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from gpu_triage.trace.reader import open_trace

DATA = Path(__file__).parent / "data"


def _check_script() -> Any:
    path = Path(__file__).resolve().parent.parent / "scripts" / "h200_pulse_check.py"
    spec = importlib.util.spec_from_file_location("h200_pulse_check", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_2card_starved_rerun_agrees_with_the_trainings_own_count() -> None:
    results = _check_script().check_files(
        "2card-starved", DATA / "h200x2-pulse-2card-starved-rerun-progress.json",
        {"pulse": DATA / "h200x2-pulse-2card-starved-rerun-1s.parquet",
         "log": DATA / "h200x2-joblog-2card-starved-rerun-1s.parquet"})
    agree = [line for _ok, line in results if "the training's own count" in line]
    assert len(agree) == 2, results
    assert all(ok for ok, _ in results), [line for ok, line in results if not ok]


def test_2card_starved_rerun_has_both_ranks_and_ends_cleanly() -> None:
    ticks = [t for t in open_trace(DATA / "h200x2-pulse-2card-starved-rerun-1s.parquet").ticks() if t.job]
    assert {r.rank for t in ticks if t.job for r in t.job.ranks} == {0, 1}
    # the job's last progress is recent at the end: no rank was left waiting in a collective
    last = [t.job.since_progress_s for t in ticks if t.job and t.job.since_progress_s is not None]
    assert last and min(last[-5:]) < 5.0
