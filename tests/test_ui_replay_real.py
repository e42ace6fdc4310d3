"""Replay of a recording made by our own recorder on a real H200 drives the same dashboard as live, and
the diagnosis recomputes as it plays: near the end of each labelled case the dashboard shows its verdict."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import pytest

from gpu_triage.config import Config
from gpu_triage.ui.run import build_app

TRACE = Path(__file__).parent / "data" / "h200-gen-2s.parquet"
LABELS = json.loads(TRACE.with_name("h200-gen-2s.labels.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABELS, ids=[lab["scenario"] for lab in LABELS])
async def test_replay_shows_each_cases_verdict_near_its_end(lab: dict) -> None:
    app = build_app("replay", argparse.Namespace(file=str(TRACE), speed=1.0, record=None), Config())
    start, end = datetime.fromisoformat(lab["start"]), datetime.fromisoformat(lab["end"])
    at = (start + (end - start) * 0.9).timestamp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")  # pause: only seeks move the position now
        await pilot.press("g")
        ts = app.replay.trace.timestamps
        while ts[app.replay.position] + 30 < at:
            await pilot.press("right_square_bracket")  # +30 s: the window is rebuilt, the diagnosis replayed
        while ts[app.replay.position] < at:
            await pilot.press("right")  # then tick by tick, as playback feeds them
        await pilot.pause()
        assert app.window.last.ts <= end
        shown = app.verdicts.shown
        assert shown.pattern in lab["pattern"] and shown.bottleneck in lab["bottleneck"], (
            f"{lab['scenario']}: dashboard shows {shown.pattern}/{shown.bottleneck}"
        )
        assert shown.evidence
