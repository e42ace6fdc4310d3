"""Issue #13, every terminal: what reaches the terminal under NO_COLOR and with 16 colours.

The app's own line filters are applied to styled segments, as Textual does to every line it draws.
"""

from __future__ import annotations

import pytest
from rich.segment import Segment
from rich.style import Style
from textual.color import Color

from gpu_triage.config import Config
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.host_panes import _heat
from tests.ui_ticks import TickListSource, make_tick


def _app() -> TriageApp:
    prefill = [make_tick(0, gpus=2, cores=4)]
    return TriageApp(Config(), source=TickListSource(2, 4), source_label="test", prefill=prefill, autostart=False)


def _through_filters(app: TriageApp, style: str) -> Style:
    segments = [Segment("x", Style.parse(style))]
    for line_filter in app.get_line_filters():
        segments = line_filter.apply(segments, Color(0, 0, 0))
    out = segments[0].style
    assert out is not None
    return out


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TEXTUAL_COLOR_SYSTEM", raising=False)


def test_no_color_drops_colour_but_keeps_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not Textual's greys (the headline was colour 237 on 233, the busiest cores dark grey)."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = _app()
    for style in ("bold bright_blue on grey7", _heat(95.0), "bold reverse red"):
        out = _through_filters(app, style)
        assert out.color is None or out.color.is_default
        assert out.bgcolor is None or out.bgcolor.is_default
    assert _through_filters(app, _heat(95.0)).bold  # the busiest cores stand out in weight
    assert not _through_filters(app, _heat(70.0)).bold
    assert _through_filters(app, "bold reverse red").reverse


@pytest.mark.parametrize(("busy", "colour"), [(95.0, "red"), (89.0, "yellow"), (70.0, "yellow"), (60.0, "yellow")])
def test_sixteen_colours_match_the_legend(monkeypatch: pytest.MonkeyPatch, busy: float, colour: str) -> None:
    """Yellow 60–90 %, red ≥ 90 % (they came out bright red and magenta through the theme's RGB)."""
    monkeypatch.setenv("TEXTUAL_COLOR_SYSTEM", "standard")
    out = _through_filters(_app(), _heat(busy))
    assert out.color is not None and out.color.name == colour


def test_truecolor_keeps_textual_theme_conversion() -> None:
    app = _app()
    assert not app.no_color
    assert app.ansi_color is None
