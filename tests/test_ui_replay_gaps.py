"""Replay across a gap in the recording (issue #9 item 9): the window starts afresh after the gap, the screen
says so while the window is short, the position bar marks it, stepping back rebuilds the window from before
the gap, and a gap of ten years reads as dates and years, never as a negative or absurd duration.

Recordings are written by the project's recorder (TraceWriter) from the simulator: two sessions of the same
machine, the second started after a hole, as a recorder restarted on the same file name would leave them
concatenated (or ``record`` paused by a suspended laptop)."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpu_triage.config import Config
from gpu_triage.feeds import ReplayFeed, open_replay
from gpu_triage.model import Tick
from gpu_triage.offline.timeline import diagnose_trace
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.batches import iter_batches
from gpu_triage.trace.writer import TraceWriter
from gpu_triage.ui.replay import GAP_MARK, ReplayApp
from gpu_triage.ui.run import build_app

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
GAP_S = 3 * 3600 + 12 * 60  # nothing recorded for 3 h 12 min
BEFORE = 160  # ticks before the gap: more than a default window (300 s at 2 s = 150 ticks)


def _ticks(n: int, start: datetime, scenario: str) -> list[Tick]:
    src = SimulatedSource(scenario, gpus=2, cores=8, seed=3, interval_s=2.0, start=start)
    return [src.sample() for _ in range(n)]


def _record(path: Path, stretches: list[list[Tick]]) -> Path:
    writer = TraceWriter(path, SimulatedSource("healthy", gpus=2, cores=8).host_info(), 2.0)
    for ticks in stretches:
        for tick in ticks:
            writer.append(tick)
    return writer.close()


def _gapped(
    tmp_path: Path, gap_s: float, before: int = BEFORE, after: int = 160
) -> tuple[Path, list[Tick], list[Tick]]:
    """``before`` healthy ticks, nothing for ``gap_s``, then ``after`` starved ticks."""
    first = _ticks(before, T0, "healthy")
    second = _ticks(after, first[-1].ts + timedelta(seconds=gap_s), "data_pipeline")
    return _record(tmp_path / "gap.parquet", [first, second]), first, second


@pytest.fixture(scope="module")
def gapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Tick], list[Tick]]:
    """The recording with the 3 h 12 min gap, written once for the tests that only read it."""
    return _gapped(tmp_path_factory.mktemp("gap"), GAP_S)


def _app(path: Path) -> ReplayApp:
    app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
    assert isinstance(app, ReplayApp)
    return app


def _header(app: ReplayApp) -> str:
    return app.query_one("#header").shown_plain


def _gap_lines(app: ReplayApp) -> list[str]:
    """The header's gap notice (the file name, gap.parquet, is in the header too)."""
    return [line for line in _header(app).split("\n") if line.startswith("gap ")]


def _bar(app: ReplayApp) -> str:
    return app.query_one("#bar").shown_plain


def _window_times(app: ReplayApp) -> list[float]:
    return [float(x) for x in app.window.view().t]


async def _step_to(app: ReplayApp, pilot: Any, position: int) -> None:
    """Step forward to ``position`` as playback feeds the ticks, each judged as it comes; the frames between are
    left out (a frame judges only the newest tick, judged already) and the key steps the last one and draws it."""
    while app.replay.position < position - 1:
        app.ingest(app.replay.advance(), draw=False)
        assert not app.replay.at_gap  # a gap would start the window afresh: the key's way, not this
    await pilot.press("right")
    assert app.replay.position == position


@pytest.mark.slow
async def test_stepping_or_playing_past_a_gap_starts_the_window_afresh_and_says_so(gapped: tuple) -> None:
    path, first, second = gapped
    app = _app(path)
    gap_end = second[0].ts.timestamp()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("space")  # paused: only keys move the position now
        assert app.replay.position == 149  # the first window: 150 ticks, all before the gap
        await pilot.pause()
        bar = _bar(app)
        # the hole is marked on the position bar, once, ahead of the position, about half-way along
        assert bar.count(GAP_MARK) == 1 and bar.index("●") < bar.index(GAP_MARK)
        assert bar.index(GAP_MARK) / bar.index("]") == pytest.approx(BEFORE / 320, abs=0.02)
        await _step_to(app, pilot, BEFORE - 1)
        await pilot.pause()
        before_gap = _window_times(app)
        assert len(before_gap) == 150 and before_gap[-1] == first[-1].ts.timestamp()
        assert not _gap_lines(app)

        await pilot.press("right")  # the first tick after the gap
        await pilot.pause()
        assert _window_times(app) == [gap_end]
        assert _gap_lines(app) == [
            # dated: the recording is not from today
            "gap 3 h 12 min before this window (nothing recorded 2026-01-01 10:05:20 - 2026-01-01 13:17:20 UTC)"
        ]
        await pilot.press("right", "right", "right")
        await pilot.pause()
        assert _window_times(app) == [t.ts.timestamp() for t in second[:4]]
        assert _gap_lines(app)[0].startswith("gap 3 h 12 min")  # still said: the window is short because of the gap
        # the verdict strip and the diagnosis read only what came after the gap
        assert all(t >= gap_end for t, _pattern, _bottleneck in app.verdicts.history)

        # stepping back across the gap rebuilds the window from before it
        await pilot.press(*["left"] * 4)
        await pilot.pause()
        assert app.replay.position == BEFORE - 1
        assert _window_times(app) == before_gap
        assert not _gap_lines(app)
        assert all(t <= first[-1].ts.timestamp() for t, _pattern, _bottleneck in app.verdicts.history)

        # playing across the gap starts the window afresh too: one step of playback, as the play timer makes it
        # (the timer itself waits a tick interval)
        app.replay.playing = True
        app._play_step()
        app.replay.playing = False
        await pilot.pause()
        assert _window_times(app) == [gap_end]
        assert _gap_lines(app)[0].startswith("gap 3 h 12 min")

        # once the window after the gap is full again, the notice goes
        await pilot.press("G")
        await pilot.pause()
        assert _window_times(app) == [t.ts.timestamp() for t in second[-150:]]
        assert not _gap_lines(app)


def test_replay_and_diagnose_see_the_same_gap(gapped: tuple) -> None:
    """One definition of a gap: the replay splits where ``diagnose`` splits, over the same stretch of time."""
    path, first, second = gapped
    feed = ReplayFeed(open_replay(path), window_ticks=150)
    (offline_gap,) = diagnose_trace(iter_batches(path), Config().thresholds, 300.0).gaps
    assert feed.gap_starts.tolist() == [BEFORE]
    feed.position = BEFORE + 2
    gap = feed.gap_before()
    assert gap is not None and (gap.start, gap.end) == (offline_gap.start, offline_gap.end)
    assert [t.ts for t in feed.window_ticks_at_position()] == [t.ts for t in second[:3]]
    feed.position = BEFORE - 1
    assert feed.gap_before() is None and len(feed.window_ticks_at_position()) == 150


async def test_a_hiccup_of_a_few_intervals_is_not_a_gap(tmp_path: Path) -> None:
    """Three missed ticks (8 s between two 2 s ticks) stay in the window, as in ``diagnose``."""
    path, first, second = _gapped(tmp_path, 6.0, before=20, after=20)
    app = _app(path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("space", "G")  # a recording shorter than the window opens at its start: to its end
        await pilot.pause()
        assert app.replay.position == 39 and len(app.window) == 40
        assert not _gap_lines(app) and GAP_MARK not in _bar(app)


async def test_a_ten_year_gap_shows_dates_and_years_never_a_negative_duration(tmp_path: Path) -> None:
    ten_years = 3650 * 86400.0
    path, first, second = _gapped(tmp_path, ten_years, before=20, after=20)
    app = _app(path)
    async with app.run_test(size=(200, 48)) as pilot:
        await pilot.press("space", "G")
        await pilot.pause()
        # shorter than the window, the replay opens at its start: at its end, 20 ticks after the gap
        assert app.replay.position == 39
        assert _window_times(app) == [t.ts.timestamp() for t in second]
        header = _header(app)
        (gap_line,) = _gap_lines(app)
        assert gap_line == (
            "gap 3650 d (10.0 years) before this window "
            "(nothing recorded 2026-01-01 10:00:40 - 2035-12-30 10:00:40 UTC)"
        )
        assert "2035-12-30" in _bar(app)
        assert not re.search(r"-\d+ ?s\b|\(-", header + _bar(app))  # no negative duration anywhere

        await pilot.press("g")
        await pilot.pause()
        assert "2026-01-01 10:00:02 UTC" in _bar(app) and _bar(app).count(GAP_MARK) == 1
        assert not _gap_lines(app)
        assert _window_times(app) == [first[0].ts.timestamp()]
