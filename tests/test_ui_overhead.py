"""The dashboard's cost controls, asserted as behaviour (speeds themselves are in benchmarks/):
streamed ticks are all ingested but drawn (and diagnosed) at most once per ``pacer.min_s``; a pane whose
text did not change is not repainted; the waveform draws one span per run of a colour, not per cell."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np
import pytest
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from gpu_triage.config import Config
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.ui import glyphs
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.pane_widget import Pane, render_strips
from tests.ui_ticks import TickListSource, make_tick
from tests.waits import wait_for


def _app() -> TriageApp:
    prefill = [make_tick(i, gpus=2, cores=4) for i in range(20)]
    return TriageApp(Config(), source=TickListSource(2, 4), source_label="test", prefill=prefill, autostart=False)


class _Timers:
    """asyncio's ``call_later``, kept by hand: a held frame's timer fires when the test says, not when the
    loaded box gets to it (a real 50 ms timer fired before the test looked, under load)."""

    def __init__(self) -> None:
        self.held: list[Callable[[], object]] = []

    def call_later(self, _wait: float, fn: Callable[..., object], *args: object) -> None:
        self.held.append(lambda: fn(*args))


async def test_streamed_ticks_coalesce_into_one_frame_and_one_diagnosis() -> None:
    app = _app()
    timers = _Timers()
    app.pacer.clock = lambda: 1000.0  # the wall clock is the outside world: frozen here
    app.pacer.min_s = 0.05
    async with app.run_test(size=(100, 30)) as pilot:
        # the start-up's own frames (mount, the first resize) can come late on a busy box: wait until the
        # screen is drawn at its size with no frame on its way, so that only the streamed ticks' are counted
        await wait_for(pilot, lambda: app.settled, "the start-up's frames")
        app.pacer.loop = lambda: timers  # type: ignore[assignment,return-value]
        app.redraw()  # a frame at t=1000: the next may come no sooner than 1000.05
        frames, verdicts = app.redraws, len(app.verdicts.history)
        for i in range(20, 30):
            app.ingest_streamed(make_tick(i, gpus=2, cores=4))
        await pilot.pause()
        assert app.window.last.ts == make_tick(29).ts and app.ticks_ingested == 30  # every tick is kept
        assert app.redraws == frames  # but not drawn yet: too soon after the last frame
        assert len(timers.held) == 1  # ten ticks, one frame held for them
        timers.held.pop()()  # its timer fires
        await wait_for(pilot, lambda: app.redraws > frames, "the throttled frame")
        assert not app.pacer.pending and not timers.held  # and no second frame is scheduled behind it
        assert app.redraws == frames + 1  # ten ticks, one frame
        assert len(app.verdicts.history) == verdicts + 1  # and one diagnosis, of the newest window
        assert app.verdicts.history[-1][0] == make_tick(29).ts.timestamp()


async def test_direct_ingest_is_drawn_at_once() -> None:
    app = _app()
    app.pacer.clock = lambda: 1000.0
    app.pacer.min_s = 3600.0  # a cap that would hold any throttled frame back for the whole test
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        frames = app.redraws
        app.ingest(make_tick(20, gpus=2, cores=4))
        await pilot.pause()
        assert app.redraws == frames + 1


async def test_unchanged_pane_is_not_repainted() -> None:
    app = _app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        keys = app.query_one("#keys")
        updates = []
        original = keys.update
        keys.update = lambda *a, **k: (updates.append(a), original(*a, **k))  # type: ignore[method-assign]
        app.ingest(make_tick(20, gpus=2, cores=4))
        await pilot.pause()
        assert updates == []  # the key line did not change: nothing sent for it


def test_waveform_one_span_per_colour_run_same_cells() -> None:
    util = np.array([0.0, 0.0, 50.0, 60.0, 70.0, np.nan, 100.0, 100.0])
    umin = np.array([0.0, 0.0, 0.0, 60.0, 70.0, np.nan, 0.0, 100.0])
    umax = np.array([0.0, 0.0, 100.0, 60.0, 70.0, np.nan, 100.0, 100.0])
    text = glyphs.waveform(util, 8, "green", umin=umin, umax=umax)
    assert text.plain == "··▄▅▆ ██"
    styles = [(text.plain[s.start : s.end], str(s.style)) for s in text.spans]
    assert styles == [
        ("··", "grey42"),
        ("▄", "green on grey30"),
        ("▅▆ ", "green"),
        ("█", "green on grey30"),
        ("█", "green"),
    ]


def test_bin_columns_keeps_all_missing_bins_missing() -> None:
    values = np.array([np.nan, np.nan, 10.0, 30.0, np.nan, 50.0])
    assert np.allclose(glyphs.bin_columns(values, 3), [np.nan, 20.0, 50.0], equal_nan=True)
    assert np.allclose(glyphs.bin_columns(values, 3, "min"), [np.nan, 10.0, 50.0], equal_nan=True)
    assert np.allclose(glyphs.bin_columns(values, 3, "max"), [np.nan, 30.0, 50.0], equal_nan=True)


def test_changed_span_is_the_cells_between_the_first_and_last_differing_segment() -> None:
    from rich.segment import Segment
    from rich.style import Style
    from textual.strip import Strip

    from gpu_triage.ui.pane_widget import changed_span

    green = Style(color="green")
    old = Strip([Segment("GPU0 ", None), Segment("▁▂▃", green), Segment(" 42%", None)])
    assert changed_span(old, Strip(list(old))) is None
    newest = Strip([Segment("GPU0 ", None), Segment("▁▂▅", green), Segment(" 42%", None)])
    assert changed_span(old, newest) == (7, 8)  # only the newest column
    recoloured = Strip([Segment("GPU0 ", None), Segment("▁▂▃", Style(color="red")), Segment(" 42%", None)])
    assert changed_span(old, recoloured) == (5, 8)  # same characters, new colour: it changed too
    number = Strip([Segment("GPU0 ", None), Segment("▁▂▃", green), Segment(" 43%", None)])
    assert changed_span(old, number) == (10, 11)
    shorter = Strip([Segment("GPU0 ", None), Segment("▁▂", green), Segment("  42%", None)])
    assert changed_span(old, shorter) == (7, 8)  # a run one shorter: the cell it left; "42%" did not move


async def test_a_pane_with_one_changed_line_is_repainted_on_that_line_only_and_shows_the_new_text() -> None:
    from rich.text import Text
    from textual.geometry import Region

    app = _app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        pane = app.query_one("#keys")
        pane.styles.height = 3
        pane.show(Text("first line\nsecond line\nthird line"))
        await pilot.pause()
        pane.render_line(0)  # drawn once: what the terminal holds
        regions: list[tuple[Region, ...]] = []
        original = pane.refresh
        pane.refresh = lambda *r, **k: (regions.append(r), original(*r, **k))[1]  # type: ignore[method-assign]
        pane.show(Text("first line\nsecond LINE\nthird line"))
        assert regions == [(Region(7, 1, 4, 1),)]  # "LINE": the rest of the pane is not sent again
        await pilot.pause()
        assert [pane.render_line(y).text.rstrip() for y in range(3)] == ["first line", "second LINE", "third line"]


def test_a_stepped_graph_changes_only_its_newest_column_between_moves() -> None:
    rng = np.random.default_rng(0)
    series = rng.uniform(0, 100, 400)
    width, window = 40, 30  # one tick per column
    frames = [glyphs.stepped_columns(series[n - window + 1 : n + 1], width, n) for n in range(window, window + 16)]
    moves = 0
    for n, (before, after) in enumerate(pairwise(frames), start=window + 1):
        # every tick of the window is drawn, in order, the newest last: nothing of the picture is lost
        assert np.array_equal(after[~np.isnan(after)], series[n - window + 1 : n + 1])
        changed = np.flatnonzero(~((before == after) | (np.isnan(before) & np.isnan(after))))
        if len(changed) > 2:  # more than the new column and the one the oldest tick left
            moves += 1
    assert moves == 2  # 16 ticks with a step of 8: the picture moved twice; 13 ticks changed two cells


def test_a_stepped_graph_bins_ticks_by_their_number_and_keeps_min_and_max() -> None:
    values = np.array([10.0, 20.0, np.nan, 40.0, 50.0, 60.0])  # ticks 14..19
    # 4 columns, a step of 1: 6 ticks need 2 to a column, bins anchored to the tick number:
    # bin 6 (ticks 12, 13: gone) blank, then (14, 15) (16, 17) (18, 19); the missing tick is skipped
    assert np.array_equal(glyphs.stepped_columns(values, 4, newest=19), [np.nan, 15.0, 40.0, 55.0], equal_nan=True)
    assert np.array_equal(glyphs.stepped_columns(values, 4, 19, "max"), [np.nan, 20.0, 40.0, 60.0], equal_nan=True)
    assert np.array_equal(glyphs.stepped_columns(values, 4, 19, "min"), [np.nan, 10.0, 40.0, 50.0], equal_nan=True)


def _rich_lines(console: Console, text: Text, width: int, style: Style | None) -> list[list[Segment]]:
    options = console.options.update(width=width, height=None)
    return console.render_lines(text, options, style=style, pad=True)


@pytest.mark.parametrize(
    ("scenario", "gpus", "size"),
    [("data_pipeline", 2, (160, 50)), ("healthy", 8, (120, 40)), ("storage_io", 1, (80, 24))],
)
async def test_panes_render_segment_for_segment_as_rich_renders_them(
    scenario: str, gpus: int, size: tuple[int, int]
) -> None:
    """The panes' fast path (no word wrap for text that fits) gives Rich's own lines, styles included."""
    source = SimulatedSource(scenario, gpus=gpus, cores=16, seed=1, interval_s=2.0)
    app = TriageApp(Config(), source=source, source_label="test", autostart=False)
    async with app.run_test(size=size) as pilot:
        for _ in range(40):
            app.ingest(source.sample(), draw=False)
        app.redraw()
        await pilot.pause()
        panes_seen = 0
        for pane in app.query(Pane):
            if pane._shown is None or not pane._shown.plain:  # noqa: SLF001 - the pane's own text
                continue
            width, style = pane._key()  # noqa: SLF001
            got = [list(strip) for strip in render_strips(app.console, pane._shown, width, style)]  # noqa: SLF001
            assert got == _rich_lines(app.console, pane._shown, width, style), pane.id  # noqa: SLF001
            panes_seen += 1
        assert panes_seen >= 6


@pytest.mark.parametrize(
    "text",
    [
        Text("a line wider than ten cells", "bold"),  # wrapped by Rich: the general path
        Text("tab\there"),
        Text("plain, no style\nsecond"),
        Text("styled, no spans\nsecond", "grey62"),
        Text.assemble(("red", "red"), " and ", ("blue on white", "blue on white"), "\n", ("x", "bold")),
        Text("centred", justify="center"),
    ],
)
def test_render_strips_is_rich_for_any_text(text: Text) -> None:
    console = Console(width=40, color_system="truecolor", force_terminal=True)
    for style in (None, Style(color="white", bgcolor="black")):
        got = [list(strip) for strip in render_strips(console, text, 16, style)]
        assert got == _rich_lines(console, text, 16, style)


def test_runs_text_is_the_text_that_appending_each_run_builds() -> None:
    chars = np.array(list("··▄▄░█ █"))
    code = np.array([1, 1, 0, 0, 1, 0, 0, 2])
    styles = ["green", "grey42", "red on grey30"]
    built = Text("  ", no_wrap=True, end="")
    runs = [("··", "grey42"), ("▄▄", "green"), ("░", "grey42"), ("█ ", "green"), ("█", "red on grey30")]
    for run, style in runs:
        built.append(run, style)
    made = glyphs.runs_text("  ", chars, code, styles)
    assert made == built and made.no_wrap and made.end == ""
    assert glyphs.runs_text("   ", chars[:0], code[:0], styles) == Text("   ")
