"""A resized terminal is laid out again at once, with no new tick: widening from 80x24 to 120x40 shows what a
dashboard started at 120x40 shows (more evidence, the net line, more processes), shrinking shows what one
started at 80x24 shows; live (simulated) and replay alike, paused or not, and even while a paced frame is held
back. A paused live dashboard is laid out again on the frame it froze: the ticks sampled since are not shown."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.writer import TraceWriter
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.app_pacing import FramePacer
from gpu_triage.ui.pane_widget import Pane
from gpu_triage.ui.replay import ReplayApp
from gpu_triage.ui.run import build_app
from tests.waits import wait_for

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SMALL, LARGE = (80, 24), (120, 40)
SCENARIO = "data_pipeline"  # five evidence lines, of which 80x24 shows two: a stale layout is plain to see

Screen = dict[str, tuple[str, bool, int]]


def _sim_app(held: int = 0) -> TriageApp:
    """A simulated server's full window, but for its last ``held`` ticks (in ``app.held``, to stream)."""
    config = Config()
    source = SimulatedSource(SCENARIO, gpus=8, cores=32, seed=0, interval_s=config.interval_s, start=START)
    ticks = [source.sample() for _ in range(config.window_ticks)]
    app = TriageApp(config, source=source, source_label="demo", prefill=ticks[: len(ticks) - held],
                    autostart=False)
    app.held = ticks[len(ticks) - held :]  # type: ignore[attr-defined]
    return app


def _replay_app(path: Path) -> ReplayApp:
    app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
    assert isinstance(app, ReplayApp)
    app.replay.playing = False  # no tick arrives: only the resize can change the screen
    return app


def _recording(tmp_path: Path) -> Path:
    source = SimulatedSource(SCENARIO, gpus=8, cores=32, seed=0, interval_s=2.0, start=START)
    writer = TraceWriter(tmp_path / "rec.parquet", source.host_info(), 2.0)
    for _ in range(200):
        writer.append(source.sample())
    return writer.close()


def _screen(app: TriageApp) -> Screen:
    """Each pane's text, whether it is shown, and its lines on the screen."""
    return {p.id or "": (p.shown_plain, p.display, p.region.height) for p in app.query(Pane)}


async def _fresh(app: TriageApp, size: tuple[int, int]) -> Screen:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        return _screen(app)


async def _resized(app: TriageApp, start: tuple[int, int], end: tuple[int, int], want: Screen) -> None:
    async with app.run_test(size=start) as pilot:
        await pilot.pause()
        assert _screen(app) != want  # the two sizes do differ
        ticks = app.ticks_ingested
        await pilot.resize_terminal(*end)
        await wait_for(pilot, lambda: _screen(app) == want, f"the {end[0]}x{end[1]} layout after the resize")
        assert app.ticks_ingested == ticks


async def test_widening_shows_the_full_layout_at_once() -> None:
    want = await _fresh(_sim_app(), LARGE)
    await _resized(_sim_app(), SMALL, LARGE, want)


async def test_shrinking_shows_the_small_layout_at_once() -> None:
    want = await _fresh(_sim_app(), SMALL)
    await _resized(_sim_app(), LARGE, SMALL, want)


async def test_a_paused_replay_is_laid_out_again_when_resized(tmp_path: Path) -> None:
    path = _recording(tmp_path)
    want = await _fresh(_replay_app(path), LARGE)
    await _resized(_replay_app(path), SMALL, LARGE, want)
    want = await _fresh(_replay_app(path), SMALL)
    await _resized(_replay_app(path), LARGE, SMALL, want)


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


def _below_header(screen: Screen) -> Screen:
    """The panes under the header (the header says "PAUSED" and counts the ticks sampled meanwhile)."""
    return {name: pane for name, pane in screen.items() if name != "header"}


async def _paused_resized(make: Callable[[], TriageApp], start: tuple[int, int], end: tuple[int, int]) -> None:
    """Paused by its key at ``start``, the ticks ``app.held`` sampled meanwhile, resized to ``end``: the frozen
    frame, laid out as a dashboard started at ``end`` on the same ticks lays it out."""
    want = _below_header(await _fresh(make(), end))
    app = make()
    async with app.run_test(size=start) as pilot:
        await pilot.pause()
        await pilot.press("p")
        for tick in getattr(app, "held", []):  # sampling goes on while the display is paused
            app.ingest(tick)
        await pilot.pause()
        assert _below_header(_screen(app)) != want  # the two sizes do differ
        ticks = app.ticks_ingested
        await pilot.resize_terminal(*end)
        await wait_for(pilot, lambda: _below_header(_screen(app)) == want,
                       f"the frozen frame's {end[0]}x{end[1]} layout after the resize")
        assert app.ticks_ingested == ticks
        assert "PAUSED" in app.query_one("#header", Pane).shown_plain.upper()


async def test_a_paused_dashboard_widened_shows_its_frozen_frame_in_the_full_layout() -> None:
    await _paused_resized(lambda: _sim_app(held=2), SMALL, LARGE)


async def test_a_paused_dashboard_shrunk_shows_its_frozen_frame_in_the_small_layout() -> None:
    await _paused_resized(lambda: _sim_app(held=2), LARGE, SMALL)


async def test_a_replay_paused_by_its_key_is_laid_out_again_when_resized(tmp_path: Path) -> None:
    path = _recording(tmp_path)

    def playing() -> TriageApp:  # playing, a tick every 2,000 s: none comes before the key pauses it
        app = build_app("replay", argparse.Namespace(file=str(path), speed=0.001, record=None), Config())
        assert isinstance(app, ReplayApp) and app.replay.playing
        return app

    await _paused_resized(playing, SMALL, LARGE)
    await _paused_resized(playing, LARGE, SMALL)


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
