"""Issue #13, small things that misled: the help at 80x24, ↑↓ in the card detail view, the header's fields,
numbers run together with their label or bar."""

from __future__ import annotations

import pytest
from textual.containers import VerticalScroll

from gpu_triage.config import Config
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.detail_screen import Chart
from gpu_triage.ui.formatters import wall_clock
from gpu_triage.ui.gpu_pane import gpu_pane
from gpu_triage.ui.host_panes import cpu_pane
from gpu_triage.ui.panes import Colours
from tests.ui_prefill import listed, prefilled
from tests.ui_ticks import make_tick
from tests.waits import wait_for


def _app(gpus: int = 4, cores: int = 8, label: str = "test") -> TriageApp:
    """40 ticks of tests/ui_ticks.py's server, judged once for every test that starts on them."""
    return prefilled(listed, gpus, cores, 40, source_label=label)


@pytest.mark.slow
async def test_help_scrolls_to_its_end_at_80x24() -> None:
    app = _app()
    app.animation_level = "none"  # End's scroll lands at once: the pilot waited out its animation, idle
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        box = app.screen.query_one("#help-box", VerticalScroll)
        assert box.max_scroll_y > 0  # taller than the screen: it must scroll
        assert box.region.bottom <= 24
        static = app.screen.query_one("#help")
        lines = str(static.render()).split("\n")
        assert max(len(line) for line in lines) <= static.size.width  # nothing cut at the right edge
        assert lines[0].startswith("Keys") and "Esc, ? or F1 closes" in lines[0]  # said where it is seen
        await pilot.press("end")
        await pilot.pause()
        assert box.scroll_y == box.max_scroll_y
        await pilot.press("escape")
        assert type(app.screen).__name__ == "Screen"


@pytest.mark.slow
async def test_arrows_in_the_detail_view_switch_its_charts() -> None:
    app = _app(4, 8)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.column == 0
        charts = list(app.screen.query(Chart))
        assert [c.builds for c in charts] == [1] * 6  # each chart built once, though its layout asked again
        await pilot.press("down")
        await pilot.pause()
        assert app.screen.column == 1 and app.selected == 1  # the charts and the selection behind them agree
        assert "GPU 1 " in str(app.screen.query_one("#title").render())
        await pilot.press("up", "up")
        await pilot.pause()
        assert app.screen.column == 3 and app.selected == 3
        # a new tick: every chart is drawn again over the new window (the x axis moved), the title says so
        built = [c.builds for c in charts]
        app.ingest(make_tick(40, gpus=4, cores=8))
        await wait_for(pilot, lambda: all(c.builds > b for c, b in zip(charts, built, strict=True)), "the new tick")
        end = wall_clock(make_tick(40).ts.timestamp()).strftime("to %H:%M:%S")  # local time, as the title
        assert end in str(app.screen.query_one("#title").render())
        await pilot.press("escape")
        await pilot.pause()
        assert "▶ 3" in app.query_one("#gpu").shown_plain


async def test_header_has_no_empty_field_at_80_columns() -> None:
    app = _app(label="live")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        header = app.query_one("#header").shown_plain.split("\n")[0]
        assert "·  ·" not in header
        assert "● live · 2s/" in header


async def test_simulated_demo_says_simulated_not_live() -> None:
    app = _app(label="demo: simulated 8-GPU server, healthy")
    app.simulated = True
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        header = app.query_one("#header").shown_plain.split("\n")[0]
        assert "● simulated" in header and "live" not in header


def test_numbers_do_not_run_into_their_bar_or_label() -> None:
    from gpu_triage.window import RollingWindow

    window = RollingWindow(10)
    for i in range(10):
        window.append(make_tick(i, gpus=1, cores=4))
    view = window.view()
    view.cpu[-1, :] = 100.0
    view.gpu["util_pct"][:, 0] = 100.0
    view.gpu["util_max_pct"][:, 0] = 100.0
    cpu = cpu_pane(view, 80, 3, Colours()).plain
    assert "███████100%" not in cpu and "███████ 100%" in cpu
    tall = gpu_pane(view, 160, 8, Colours()).plain
    assert "peak100%" not in tall and "peak 100%" in tall


async def test_simulated_demo_does_not_run_the_doctor_on_this_machine() -> None:
    app = _app(label="demo: simulated 8-GPU server, healthy")
    app.simulated = True
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("d")
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen"  # no doctor screen over the simulated server
        assert any("simulated server" in str(n.message) for n in app._notifications)


def _demo_args(*argv: str):
    from gpu_triage.cli import build_parser

    return build_parser().parse_args(["demo", *argv])


def test_the_recorded_demo_starts_at_its_first_tick_at_the_asked_speed() -> None:
    from gpu_triage.ui.run import build_app

    app = build_app("demo", _demo_args("--speed", "4"), Config())
    assert app.replay.position == 0  # it started at tick 151 of 161, past most of the recorded cases
    assert app.replay.speed == 4.0


async def test_the_simulated_demo_samples_faster_with_speed() -> None:
    from gpu_triage.ui.run import build_app

    app = build_app("demo", _demo_args("healthy", "--speed", "4", "--gpus", "2"), Config())
    assert app.speed == 4.0
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app._feed is not None and app._feed.interval_s == Config().interval_s / 4
        assert "x4" in app.query_one("#header").shown_plain
        await pilot.press("q")


def test_temperature_and_clock_stay_at_80_columns() -> None:
    from gpu_triage.window import RollingWindow

    window = RollingWindow(10)
    for i in range(10):
        window.append(make_tick(i, gpus=2, cores=4))  # 50 °C, 1980 MHz
    lines = gpu_pane(window.view(), 80, 1, Colours()).plain.split("\n")[1:]
    assert all(line.endswith(" 50C 2.0G") and len(line) <= 80 for line in lines)
