"""Replay state and recording, without a screen."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_triage.data import H200_TRACE_2S
from gpu_triage.errors import UserError
from gpu_triage.feeds import ReplayFeed, open_replay
from gpu_triage.recording.background import Recorder
from gpu_triage.trace.reader import open_trace
from tests.ui_ticks import make_host, make_tick


@pytest.fixture(scope="module")
def trace():
    return open_replay(H200_TRACE_2S)


def test_replay_starts_with_a_full_window_and_returns_its_ticks(trace) -> None:
    feed = ReplayFeed(trace, window_ticks=30)
    assert feed.position == 29
    ticks = feed.window_ticks_at_position()
    assert len(ticks) == 30
    assert ticks[-1].ts == trace.tick(29).ts


def test_window_near_the_start_is_clamped_not_wrapped(trace) -> None:
    feed = ReplayFeed(trace, window_ticks=30)
    feed.seek_start()
    ticks = feed.window_ticks_at_position()
    assert [t.ts for t in ticks] == [trace.tick(0).ts]


def test_step_jump_seek(trace) -> None:
    feed = ReplayFeed(trace, window_ticks=10)
    start = feed.position
    assert feed.step(+1) and feed.position == start + 1
    assert feed.step(-2) and feed.position == start - 1
    before_t = trace.timestamps[feed.position]
    feed.jump(30)
    assert trace.timestamps[feed.position] - before_t == pytest.approx(30, abs=1.5 * trace.interval_s)
    feed.jump(-30)
    assert trace.timestamps[feed.position] == pytest.approx(before_t, abs=1.5 * trace.interval_s)
    feed.seek_end()
    assert feed.position == trace.n - 1
    assert not feed.step(+1)  # clamped at the end
    feed.seek_start()
    assert feed.position == 0 and not feed.step(-1)


def test_speed_changes_the_tick_period(trace) -> None:
    feed = ReplayFeed(trace, window_ticks=10)
    base = feed.tick_interval_s
    feed.faster()
    assert feed.speed == 2 and feed.tick_interval_s == pytest.approx(base / 2)
    feed.slower()
    feed.slower()
    assert feed.speed == 0.5


def test_playback_stops_at_the_end_unless_looping(trace) -> None:
    feed = ReplayFeed(trace, window_ticks=10)
    feed.seek_end()
    assert feed.advance() is None and not feed.playing
    looped = ReplayFeed(trace, window_ticks=10, loop=True)
    looped.seek_end()
    assert looped.advance() is None and looped.playing


def test_bad_replay_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        open_replay(tmp_path / "missing.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(UserError):
        open_replay(bad)


def test_recorder_writes_a_replayable_file(tmp_path: Path) -> None:
    target = tmp_path / "rec" / "run.parquet"
    rec = Recorder(target, make_host(2, 4), 2.0)
    for i in range(5):
        rec.append(make_tick(i, gpus=2, cores=4))
    path = rec.close()
    assert rec.close() == path  # idempotent
    back = open_trace(path)
    assert back.n == 5
    assert back.tick(4).gpus[1].util_pct == make_tick(4, gpus=2, cores=4).gpus[1].util_pct
