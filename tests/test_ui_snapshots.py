"""SVG snapshots of the main screen (pytest-textual-snapshot). Deterministic: the simulated server has a
fixed seed and start time, the window is pre-filled (no sampler thread, no wall clock on screen).

Update after an intended visual change: pytest tests/test_ui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpu_triage.config import Config
from gpu_triage.sources import sim
from gpu_triage.ui.app import TriageApp

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _sim_app(scenario: str) -> TriageApp:
    config = Config()
    source = sim.SimulatedSource(scenario, gpus=8, cores=32, seed=0, interval_s=config.interval_s, start=START)
    prefill = [source.sample() for _ in range(config.window_ticks)]
    return TriageApp(config, source=source, source_label=f"demo: {scenario}", prefill=prefill, autostart=False)


@pytest.mark.parametrize("scenario", ["single_card_busy", "data_pipeline"])
def test_main_screen_snapshot(snap_compare, scenario: str) -> None:
    assert snap_compare(_sim_app(scenario), terminal_size=(100, 32))
