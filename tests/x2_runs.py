"""The 2-card lab recordings read once per test session: the trace, each tick's (tick, raw, shown) verdicts
through the live path, and each tick's offline segment. Shared by the mechanism and validation tests."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.offline.judge import load_trace, verdicts
from gpu_triage.offline.timeline import segments


@cache
def lab_run(path: Path) -> tuple[Any, list[Any], list[Any]]:
    """(trace, [(tick, raw, shown)], [segment of each tick]) with the default config."""
    cfg = Config()
    tr = load_trace(path)
    res = verdicts(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    segs = segments(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    return tr, res, [s for s in segs for _ in range(s.ticks)]
