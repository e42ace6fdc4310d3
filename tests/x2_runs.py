"""The 2-card lab recordings read once per test session: the trace, each tick's (tick, raw, shown) verdicts
through the live path, and each tick's offline segment. Shared by the mechanism and validation tests."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from gpu_triage.offline.judge import load_trace
from tests import real_readings as rr


@cache
def lab_run(path: Path) -> tuple[Any, list[Any], list[Any]]:
    """(trace, [(tick, raw, shown)], [segment of each tick]) with the default config."""
    return load_trace(path), rr.replay(path)[1], [s for s in rr.segments_of(path) for _ in range(s.ticks)]
