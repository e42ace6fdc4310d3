"""A resized terminal is laid out again at once, with no new tick: widening from 80x24 to 120x40 shows what a
dashboard started at 120x40 shows (more evidence, the net line, more processes), shrinking shows what one
started at 80x24 shows; live (simulated) and replay alike, paused or not, and even while a paced frame is held
back. A paused live dashboard is laid out again on the frame it froze: the ticks sampled since are not shown."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpu_triage.config import Config
from gpu_triage.model import Tick
from gpu_triage.sources.base import Source
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.writer import TraceWriter
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.app_pacing import FramePacer
from gpu_triage.ui.pane_widget import Pane
from gpu_triage.ui.replay import ReplayApp
from gpu_triage.ui.run import build_app
from tests.ui_prefill import prefilled, sim
from tests.waits import wait_for

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SMALL, LARGE = (80, 24), (120, 40)
SCENARIO = "data_pipeline"  # five evidence lines, of which 80x24 shows two: a stale layout is plain to see

Screen = dict[str, tuple[str, bool, int]]


def _sim_but(held: int) -> tuple[Source, list[Tick]]:
    """tests/ui_prefill.py's simulated server and its full window but for the last ``held`` ticks, which its
    source samples next."""
    config = Config()
    source = SimulatedSource(SCENARIO, gpus=8, cores=32, seed=0, interval_s=config.interval_s, start=START)
    return source, [source.sample() for _ in range(config.window_ticks - held)]


def _sim_app(held: int = 0) -> TriageApp:
    """A simulated server's full window, but for its last ``held`` ticks (in ``app.held``, to stream); judged
    once per session (tests/ui_prefill.py)."""
    app = prefilled(sim, SCENARIO, 8, source_label="demo") if not held else prefilled(_sim_but, held,
                                                                                      source_label="demo")
    assert app.source is not None
    app.held = [app.source.sample() for _ in range(held)]  # type: ignore[attr-defined]
    return app


def _replay_app(path: Path) -> ReplayApp:
    app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
    assert isinstance(app, ReplayApp)
    app.replay.playing = False  # no tick arrives: only the resize can change the screen
    return app


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of the simulated server, written once for the module's replays."""
    source = SimulatedSource(SCENARIO, gpus=8, cores=32, seed=0, interval_s=2.0, start=START)
    writer = TraceWriter(tmp_path_factory.mktemp("resize") / "rec.parquet", source.host_info(), 2.0)
    for _ in range(200):
        writer.append(source.sample())
    return writer.close()


def _screen(app: TriageApp) -> Screen:
    """Each pane's text, whether it is shown, and its lines on the screen."""
    return {p.id or "": (p.shown_plain, p.display, p.region.height) for p in app.query(Pane)}


def _below_header(screen: Screen) -> Screen:
    """The panes under the header (the header says "PAUSED" and counts the ticks sampled meanwhile)."""
    return {name: pane for name, pane in screen.items() if name != "header"}


async def _fresh(app: TriageApp, size: tuple[int, int]) -> Screen:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        return _screen(app)


async def _resized(app: TriageApp, pilot: Any, end: tuple[int, int], want: Screen, paused: bool) -> None:
    """``app`` resized to ``end`` shows ``want`` at once, with no new tick. ``paused``: paused by its key first,
    the ticks ``app.held`` sampled meanwhile, it shows the frozen frame (below the header) laid out as ``want``."""
    seen: Callable[[Screen], Screen] = _below_header if paused else (lambda screen: screen)
    if paused:
        await pilot.press("p")
        for tick in getattr(app, "held", []):  # sampling goes on while the display is paused
            app.ingest(tick)
        await pilot.pause()
    assert seen(_screen(app)) != seen(want)  # the two sizes do differ
    ticks = app.ticks_ingested
    await pilot.resize_terminal(*end)
    await wait_for(pilot, lambda: seen(_screen(app)) == seen(want), f"the {end[0]}x{end[1]} layout after the resize")
    assert app.ticks_ingested == ticks
    if paused:
        assert "PAUSED" in app.query_one("#header", Pane).shown_plain.upper()


async def _both_ways(make: Callable[[], TriageApp], *, paused: bool = False) -> None:
    """A dashboard started at 80x24 and one started at 120x40, side by side: the second shrunk shows what the
    first showed at its start, the first widened what the second showed at its start (see :func:`_resized`)."""
    small, large = make(), make()
    async with small.run_test(size=SMALL) as small_pilot:
        await small_pilot.pause()
        want_small = _screen(small)
        async with large.run_test(size=LARGE) as large_pilot:
            await large_pilot.pause()
            want_large = _screen(large)
            await _resized(large, large_pilot, SMALL, want_small, paused)
        await _resized(small, small_pilot, LARGE, want_large, paused)


async def test_widening_and_shrinking_show_the_layout_of_a_dashboard_started_at_that_size() -> None:
    await _both_ways(_sim_app)


async def test_a_paused_replay_is_laid_out_again_when_resized(recording: Path) -> None:
    await _both_ways(lambda: _replay_app(recording))


async def test_a_resize_is_not_held_back_behind_a_paced_frame() -> None:
    """Ticks faster than the frame cap hold their frame back; a resize draws at once, in its place."""
    want = await _fresh(_sim_app(), LARGE)
    app = _sim_app(held=1)
    app.pacer.clock = lambda: 1000.0  # the wall clock is the outside world: frozen here
    app.pacer.min_s = 3600.0  # a held frame would wait for the whole test
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        app.redraw()  # a frame at t=1000
        app.ingest_streamed(app.held[0])  # type: ignore[attr-defined]  # its frame is held back an hour
        await pilot.pause()
        assert app.pacer.pending
        await pilot.resize_terminal(*LARGE)
        await wait_for(pilot, lambda: _screen(app) == want, "the 120x40 layout after the resize")
        assert not app.pacer.pending


async def test_a_paused_dashboard_resized_shows_its_frozen_frame_in_the_new_layout() -> None:
    await _both_ways(lambda: _sim_app(held=2), paused=True)


async def test_a_replay_paused_by_its_key_is_laid_out_again_when_resized(recording: Path) -> None:
    def playing() -> TriageApp:  # playing, a tick every 2,000 s: none comes before the key pauses it
        app = build_app("replay", argparse.Namespace(file=str(recording), speed=0.001, record=None), Config())
        assert isinstance(app, ReplayApp) and app.replay.playing
        return app

    await _both_ways(playing, paused=True)


async def test_a_resize_to_the_size_drawn_already_draws_nothing() -> None:
    """Textual's start-up says the screen's size twice, the second time whenever it gets to it: a frame of
    nothing new, which a test counting frames took for its own."""
    app = _sim_app()
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, lambda: app.settled, "the start-up's frames")
        frames = app.redraws
        await pilot.resize_terminal(*SMALL)
        assert app.settled and app.redraws == frames


class _Loop:
    """asyncio's ``call_later``, kept by hand: the held frame's timer fires when the test says."""

    def __init__(self) -> None:
        self.timers: list[Callable[[], object]] = []

    def call_later(self, _wait: float, fn: Callable[..., object], *args: object) -> None:
        self.timers.append(lambda: fn(*args))


def test_a_frame_wanted_at_once_overtakes_the_held_one_which_then_draws_nothing() -> None:
    drawn: list[int] = []
    posted: list[Callable[[], object]] = []  # Textual's call_later: run when the test says
    loop = _Loop()
    pacer = FramePacer(lambda: drawn.append(1), posted.append, lambda: loop)  # type: ignore[arg-type,return-value]
    pacer.clock = lambda: 1000.0
    pacer.drawing()  # a frame at t=1000
    pacer.schedule(throttle=True)  # a tick: its frame is held for min_s
    assert pacer.pending and loop.timers and not posted
    pacer.schedule(throttle=True)  # another tick joins the held frame
    assert len(loop.timers) == 1
    pacer.schedule()  # a resize: a frame at once
    posted.pop()()
    assert drawn == [1] and not pacer.pending
    loop.timers.pop()()  # the held frame's timer fires
    posted.pop()()
    assert drawn == [1]  # overtaken: nothing is drawn twice



async def test_a_paused_frame_keeps_the_cards_as_they_were_when_it_froze() -> None:
    """A live source keeps one status and changes it in place each tick (a card falls off the bus): the frozen
    frame, laid out again by a resize, still shows the cards as they were when it froze; unpaused, the lost card
    shows."""
    app = _sim_app()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        app._status.lost_gpus.add(3)  # the source's own object, as a live source hands it out each tick
        await pilot.resize_terminal(*LARGE)
        await wait_for(pilot, lambda: tuple(app.size) == LARGE and app.settled, "the frame laid out at 120x40")
        assert "LOST" not in app.query_one("#gpu", Pane).shown_plain
        await pilot.press("p")
        await wait_for(pilot, lambda: "LOST" in app.query_one("#gpu", Pane).shown_plain, "the lost card, unpaused")
