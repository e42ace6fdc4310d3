"""What the engine reads on the real labelled recordings in tests/data, shared by the tests that judge it:
each recording (optionally read without its stack samples), its raw verdict at every tick, the offline
segment holding each tick, and the ticks a label judges. Cached: a recording is read and diagnosed once per
test session, whichever test asks first (tests/shared_cache.py: in the process, and shared by xdist's workers).

A recording is named by its file's stem in tests/data ("h200-inside-c-2s"); ``stripped`` reads it as the
outside alone sees it (trace v3's ``stacks`` emptied, everything else as recorded).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.data import judged_ticks, labels_for
from gpu_triage.model import Tick
from gpu_triage.offline.judge import load_trace, verdicts
from gpu_triage.offline.timeline import segments
from gpu_triage.sources.sim import SimulatedSource
from tests.shared_cache import shared

DATA = Path(__file__).parent / "data"
#: The held-out family of trace v4 (issue 34), recorded with the stacks at 2 s; each has a "-0.5s" twin recorded
#: with --no-stacks (tests/test_diagnosis_inside_f.py)
HELD_OUT_V4 = ("h200-inside-f-2s", "h200-inside-g-2s")
SIM_T0 = datetime(2026, 1, 1, tzinfo=UTC)


@cache
def trace(stem: str) -> Any:
    return load_trace(DATA / f"{stem}.parquet")


@cache
def ticks(stem: str, stripped: bool = False) -> list[Tick]:
    got: list[Tick] = trace(stem).ticks
    return [replace(t, stacks=[]) for t in got] if stripped else got


def raw(stem: str, stripped: bool = False) -> list[Any]:
    """(tick, raw verdict, shown verdict) at every tick, fed one by one as the dashboard would. As recorded, it
    is :func:`replay`'s (one replay per session whichever name asks: test_diagnosis_trust replays every file)."""
    return _stripped_raw(stem) if stripped else replay(DATA / f"{stem}.parquet")[1]


@shared
def _stripped_raw(stem: str) -> list[Any]:
    cfg, tr = Config(), trace(stem)
    return verdicts(ticks(stem, True), tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)


@shared
def per_tick_segments(stem: str, stripped: bool = False) -> list[Any]:
    """The offline segment holding each tick, in tick order."""
    cfg, tr = Config(), trace(stem)
    segs = segments(ticks(stem, stripped), tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    return [s for s in segs for _ in range(s.ticks)]


@shared
def replay(path: Path) -> tuple[float, list[Any]]:
    """Any recording (tests/data's or the bundled ones, gpu_triage.data) replayed as the dashboard judges it:
    its interval and (tick, raw verdict, shown verdict) at every tick."""
    cfg, tr = Config(), load_trace(path)
    return tr.interval_s, verdicts(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)


@shared
def segments_of(path: Path) -> list[Any]:
    """Any recording's offline segments (offline.timeline.segments), with the default settings."""
    cfg, tr = Config(), load_trace(path)
    return segments(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)


@shared
def simulated(scenario: str, gpus: int = 8) -> list[Any]:
    """A minute of a simulated scenario (2 s ticks, 32 cores, seed 3) replayed as the dashboard judges it."""
    cfg = Config()
    src = SimulatedSource(scenario, gpus=gpus, cores=32, seed=3, interval_s=2.0, start=SIM_T0)
    return verdicts([src.sample() for _ in range(60)], 2.0, cfg.thresholds, cfg.window_s, 32)


def labels(stem: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(labels_for(DATA / f"{stem}.parquet").read_text())
    return found


def label(stem: str, scenario: str) -> dict[str, Any]:
    return next(x for x in labels(stem) if x["scenario"] == scenario)


def judged(stem: str, lab: dict[str, Any]) -> list[int]:
    """The ticks ``lab`` judges (35-90 % of its window: gpu_triage.data.judged_ticks)."""
    tr = trace(stem)
    return judged_ticks(lab, [t.ts for t in tr.ticks], tr.interval_s)


def reading(bottleneck: str, mechanism: str = "") -> str:
    """A verdict as the labels write it: a start-up (mechanism start_up under bottleneck none) is "start_up"."""
    return "start_up" if mechanism == "start_up" else str(bottleneck)
