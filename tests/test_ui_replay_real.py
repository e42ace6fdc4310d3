"""Replay of a recording made by our own recorder on a real H200 drives the same dashboard as live, and
the diagnosis recomputes as it plays: near the end of each labelled case the dashboard shows its verdict.

One dashboard is taken to each case in turn: a seek rebuilds the window and replays the diagnosis from its
position alone, so each case is judged as in a dashboard opened just for it."""

from __future__ import annotations

import argparse
import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpu_triage.config import Config
from gpu_triage.ui.replay import ReplayApp
from gpu_triage.ui.run import build_app

TRACE = Path(__file__).parent / "data" / "h200-gen-2s.parquet"
LABELS = json.loads(TRACE.with_name("h200-gen-2s.labels.json").read_text())


async def _to_case(app: ReplayApp, pilot: Any, at: float) -> None:
    """From the recording's start to the tick at ``at`` as a user gets there: +30 s seeks, then tick by tick."""
    ts = app.replay.trace.timestamps
    # to the start (`g`), then +30 s seeks (`]`) until the case is less than 30 s ahead. Only the last seek
    # shapes the screen (a seek rebuilds from the position alone): the feed makes the earlier ones (the key's
    # seek, without its rebuild and frame), the key the last
    walk = copy.copy(app.replay)
    walk.seek_start()
    seeks = 0
    while ts[walk.position] + 30 < at:
        walk.jump(30)
        seeks += 1
    if seeks:
        app.replay.seek_start()
        for _ in range(seeks - 1):
            app.replay.jump(30)
        await pilot.press("right_square_bracket")
    else:
        await pilot.press("g")
    assert app.replay.position == walk.position
    # then tick by tick, as playback feeds them, each judged as it comes (the frames between left out: a frame
    # judges only the newest tick, which is judged already); the key steps the last one and draws it
    while ts[app.replay.position] < at:
        if ts[app.replay.position + 1] < at:
            app.ingest(app.replay.advance(), draw=False)
            assert not app.replay.at_gap  # a gap would start the window afresh: the key's way, not this
        else:
            await pilot.press("right")
    await pilot.pause()


@pytest.mark.slow
async def test_replay_shows_each_cases_verdict_near_its_end() -> None:
    app = build_app("replay", argparse.Namespace(file=str(TRACE), speed=1.0, record=None), Config())
    wrong: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")  # pause: only seeks move the position now
        for lab in LABELS:
            start, end = datetime.fromisoformat(lab["start"]), datetime.fromisoformat(lab["end"])
            await _to_case(app, pilot, (start + (end - start) * 0.9).timestamp())
            shown = app.verdicts.shown
            if app.window.last.ts > end:
                wrong.append(f"{lab['scenario']}: the window ends past the case")
            if shown.pattern not in lab["pattern"] or shown.bottleneck not in lab["bottleneck"]:
                wrong.append(f"{lab['scenario']}: dashboard shows {shown.pattern}/{shown.bottleneck}")
            if not shown.evidence:
                wrong.append(f"{lab['scenario']}: no evidence shown")
    assert len(LABELS) >= 10 and not wrong, wrong
