"""The cards' waveform as a user reads it (issue 33, blocker 2): the real app on the simulated shared box
(card 0 stalls 14 s in every 24, card 1 computes steadily, cards 2 and 3 idle), its window full, drawn by
Textual's pilot; the rows are read from the composed screen, the characters the terminal gets.

Every row of every card (GPU-Util, SM activity) starts in the same column and is as wide as the others,
whatever the card flags; at 80x24 the graph spans minutes and the title says how many; a sawtooth, a flat
line and one busy card are told apart by their cells."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gpu_triage.model import Tick
from gpu_triage.sources.base import Source
from gpu_triage.ui.app import TriageApp
from tests.ui_prefill import prefilled, resize_to, sim

BRAILLE = range(0x2800, 0x2900)
GLYPHS = set(" ▁▂▃▄▅▆▇█·░")


def _alarm(tick: Tick, card: int) -> Tick:
    """The card slowed by heat beside its power cap, with XID 79 events: the longest flag there is."""
    gpus = [dataclasses.replace(g, clock_event_reasons=0x4 | 0x20, xid_count=3, xid_last=79) if g.index == card
            else g for g in tick.gpus]
    return dataclasses.replace(tick, gpus=gpus)


def _shared_box(alarm_card: int | None) -> tuple[Source, list[Tick]]:
    source, ticks = sim("shared_box", 4)
    if alarm_card is not None:
        ticks[-1] = _alarm(ticks[-1], alarm_card)
    return source, ticks


def _app(alarm_card: int | None = None) -> TriageApp:
    """The shared box on a full window (judged once for every test that starts on it: tests/ui_prefill.py)."""
    return prefilled(_shared_box, alarm_card, source_label="shared box")


def _composed(app: TriageApp) -> list[str]:
    """The screen as composed for the terminal: every widget's lines where they land."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def _screen(app: TriageApp, size: tuple[int, int]) -> list[str]:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        return _composed(app)


def _gpu_rows(screen: list[str]) -> tuple[str, list[str]]:
    """(the GPU pane's title, its rows up to the verdict)."""
    top = next(i for i, line in enumerate(screen) if line.startswith("GPU"))
    end = next(i for i, line in enumerate(screen) if line.startswith("VERDICT"))
    return screen[top], screen[top + 1 : end]


def _drawn(row: str) -> list[int]:
    """Columns holding a braille cell of the graph (the one-line form at 80 and 120 columns)."""
    return [i for i, ch in enumerate(row) if ord(ch) in BRAILLE]


def _dots(ch: str) -> tuple[int, int]:
    """Raised dots in the (left, right) column of a braille cell."""
    bits = ord(ch) - 0x2800
    return bin(bits & 0x47).count("1"), bin(bits & 0xB8).count("1")


async def test_at_80x24_a_sawtooth_a_busy_card_and_idle_cards_read_apart_over_minutes() -> None:
    screen = await _screen(_app(), (80, 24))
    title, rows = _gpu_rows(screen)
    cards = [r for r in rows if re.match(r"[▶ ] ?\d ", r)]
    assert len(cards) == 4
    cells = [[ch for ch in r if ord(ch) in BRAILLE] for r in cards]

    # the title says the span shown, and it is what the cells hold (one cell = its ticks at 2 s)
    m = re.search(r"last (?:(\d+)m)?(\d+)?s? of 5m, cell = (\d+) ticks \(braille\)", title)
    assert m, title
    shown_s = int(m[1] or 0) * 60 + int(m[2] or 0)
    per_cell = int(m[3])
    assert shown_s >= 180, title  # minutes of shape, several periods of a 24 s sawtooth
    assert abs(len(cells[1]) * per_cell * 2 - shown_s) <= per_cell * 2, (title, cards[1])

    # one busy card: full cells all along (the newest may be half a cell)
    assert all(_dots(ch) == (4, 4) for ch in cells[1][:-1]), cards[1]
    # idle: the flat floor only
    assert set(cells[2]) == set(cells[3]) == {"⣀"}, cards[2:]
    # the sawtooth: a rise from the floor to the top, period after period (24 s: one every 12 ticks)
    high = [max(_dots(ch)) >= 3 for ch in cells[0]]
    rises = sum(1 for a, b in zip(high, high[1:], strict=False) if b and not a)
    assert rises >= shown_s // 24 - 1, cards[0]
    assert any(ch == "⣀" for ch in cells[0]), cards[0]
    # "SM" names one figure on the screen: the cards' SM activity; the processes' own share is GPU%
    assert all("SMact" in r for r in cards)
    procs = next(line for line in screen if line.lstrip().startswith("PID"))
    assert "GPU%" in procs.split() and "SM%" not in "\n".join(screen)


@pytest.mark.slow
async def test_every_row_of_every_card_shares_one_time_axis() -> None:
    """Card 2 flags "THR power,thermal XID 79 ×3" (at 80 columns a badge before the graph took 10 of its
    18 columns and moved its start): its graph starts and ends where every other row's does. At 80x24, 120x40
    and 200x50, one app through the sizes."""
    app = _app(alarm_card=2)
    async with app.run_test(size=(80, 24)) as pilot:
        for size in ((80, 24), (120, 40), (200, 50)):
            await resize_to(pilot, app, size)
            screen = _composed(app)
            assert (len(screen[0]), len(screen)) == size
            _rows_share_one_time_axis(screen)


def _rows_share_one_time_axis(screen: list[str]) -> None:
    title, rows = _gpu_rows(screen)
    assert "XID 79" in "\n".join(rows)
    if "┤" in "".join(rows):  # the tall form: the y-axis, then the graph, then the card's figures
        axis = {r.index("┤") for r in rows if "┤" in r}
        figures = {r.index("SMact") for r in rows if "SMact" in r}
        sides = {r.index(" SM activity") for r in rows if " SM activity" in r}
        assert len(axis) == len(figures) == len(sides) == 1, rows
        return
    graph_rows = [r for r in rows if re.match(r"([▶ ] ?\d |act )", r)]
    assert len(graph_rows) >= 4
    spans = set()
    for r in graph_rows:
        graph = [i for i, ch in enumerate(r) if ord(ch) in BRAILLE or ch in GLYPHS - {" "}]
        graph = [i for i in graph if i < r.index("%") - 4]  # not the figures' characters
        spans.add((graph[0], graph[-1]))
    assert len(spans) == 1, (spans, graph_rows)
    start, end = spans.pop()
    assert 4 <= start <= 4 + (end - 4) // 4  # the window fills at least three quarters of the graph
