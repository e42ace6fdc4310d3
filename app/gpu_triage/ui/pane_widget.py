"""The dashboard's pane widget and what keeps its terminal output small.

A :class:`Pane` is a ``Static`` that is given whole lines of text and sends the terminal only the cells that
changed (:func:`changed_span`), rendered once per text (:func:`render_strips`); :class:`CroppedChops` is
Textual's partial screen update cropped on both sides of each dirty span (the app installs it in
``TriageApp._display``). Over SSH a quiet screen then writes almost nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.control import Control
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._compositor import ChopsUpdate
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import Static

from gpu_triage.ui.formatters import safe_text


class CroppedChops(ChopsUpdate):
    """Textual's partial screen update, cropped on both sides of each dirty span.

    Textual 8's ``ChopsUpdate.render_segments`` crops a widget's line at the right end of the dirty span but
    starts it at the widget's left edge (its own "TODO: crop to x extents"): a pane whose only change is one
    cell in column 150 sent the 150 cells before it too. The only difference here is the left crop.
    """

    def render_segments(self, console: Console) -> str:
        move_to = Control.move_to
        out: list[str] = []
        last_y = self.spans[-1][0]
        for y, x1, x2 in self.spans:
            for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
                if strip is None or x > x2 or end <= x1:
                    continue
                left = max(0, x1 - x)
                right = min(end, x2) - x
                out.append(move_to(x + left, y).segment.text)
                out.append((strip.crop(left, right) if left or end > x2 else strip).render(console))
            if y != last_y:
                out.append("\n")
        return "".join(out)


def changed_span(before: Strip, after: Strip) -> tuple[int, int] | None:
    """The cells [start, end) of a line that differ between two renderings of it, or None when they are the
    same. Whole segments, narrowed by the characters they share where the style is the same: a waveform
    whose newest column changed differs only at its right end, even inside one long run of a colour."""
    a, b = list(before), list(after)
    if a == b:
        return None
    head = 0
    x0 = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        x0 += a[head].cell_length
        head += 1
    tail = 0
    end_a, end_b = before.cell_length, after.cell_length
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        end_a -= a[-1 - tail].cell_length
        end_b -= b[-1 - tail].cell_length
        tail += 1
    whole = (x0, max(end_a, end_b, x0 + 1))  # the differing segments
    start, end = whole
    if head < len(a) and head < len(b) and a[head].style == b[head].style:
        start += cell_len(_common_prefix(a[head].text, b[head].text))
    last_a, last_b = len(a) - 1 - tail, len(b) - 1 - tail
    if last_a >= head and last_b >= head and a[last_a].style == b[last_b].style and end_a == end_b:
        end -= cell_len(_common_prefix(a[last_a].text[::-1], b[last_b].text[::-1]))
    return (start, end) if end > start else whole


def _common_prefix(x: str, y: str) -> str:
    n = 0
    for cx, cy in zip(x, y, strict=False):
        if cx != cy:
            break
        n += 1
    return x[:n]


def _fits(text: Text, width: int) -> bool:
    """True when Rich's wrapping would leave ``text`` as it is: no tab, no line wider than ``width``, no
    justification that pads (the panes build their lines to the width already)."""
    plain = text.plain
    if not plain or "\t" in plain or text.justify not in (None, "default"):
        return False
    return all(cell_len(line) <= width for line in plain.split("\n"))


def render_strips(console: Console, text: Text, width: int, style: Style | None) -> list[Strip]:
    """The lines of ``text`` as Strips of ``width`` cells under the pane's ``style``: what
    ``console.render_lines(text, width, style=style, pad=True)`` gives, segment for segment.

    A pane's text already fits its width, so Rich's word wrap (split into lines, wrap each, join them again)
    changes nothing but took about half of the rendering (benchmarks/bench_dashboard.py): such text goes
    straight from its spans to segments. Anything else (a too-long line, a tab) takes Rich's own path.
    """
    if not _fits(text, width):
        options = console.options.update(width=width, height=None)
        return [Strip(line, width) for line in console.render_lines(text, options, style=style, pad=True)]
    segments: Iterable[Segment] = text.render(console, end="")
    if text.style and not text.spans:
        # Text.render leaves out the text's own style when it has no spans (wrapping had made it a span)
        segments = Segment.apply_style(segments, console.get_style(text.style))
    if style:
        segments = Segment.apply_style(segments, style)
    lines = Segment.split_and_crop_lines(segments, width, style=style, pad=True, include_new_lines=False)
    return [Strip(line, width) for line in lines]


class Pane(Static):
    """A Static that repaints only when its text really changed (saves terminal bytes over SSH)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: Text | None = None

    def show(self, text: Text) -> None:
        text = safe_text(text)  # names, command lines, paths: someone else's characters, drawn visibly
        if self._shown is not None and text == self._shown:
            return
        # Same number of lines: the pane keeps its size (its height is set by the app), so no layout pass
        # over the whole screen is needed, only a repaint of this pane (profile: the layout pass was a
        # third of the frame's cost).
        same_size = self._shown is not None and self._shown.plain.count("\n") == text.plain.count("\n")
        old = self._strips if same_size and self._strips_key == self._key() else None
        self._shown = text
        self._strips = None
        if not same_size:
            self.update(text, layout=True)
        elif old is None:
            # Static.update would convert the text to Textual Content only for render_line below to ignore it
            self.refresh()
        else:
            # Only the cells that changed go to the terminal: Textual sends every line of a repainted
            # widget, and most lines of a pane (titles, numbers, idle rows) are the same frame after frame.
            new = self._render_strips()
            for y, (before, after) in enumerate(zip(old, new, strict=False)):
                span = changed_span(before, after)
                if span is not None:
                    self.refresh(Region(span[0], y, span[1] - span[0], 1))
            if len(new) != len(old):
                self.refresh()

    _strips: list[Strip] | None = None
    _strips_key: tuple[int, Any] | None = None

    def _key(self) -> tuple[int, Any]:
        return (self.size.width, self.visual_style.rich_style)

    def _render_strips(self) -> list[Strip]:
        assert self._shown is not None
        key = self._key()
        self._strips = render_strips(self.app.console, self._shown, *key)
        self._strips_key = key
        return self._strips

    def render_line(self, y: int) -> Strip:
        """Lines straight from Rich's renderer, cached until the text or the width changes.

        Profile (py-spy, demo healthy, 8 cards, 2 s tick): Textual's path for a Static (Rich Text -> Content,
        wrap, one Textual Style per span -> Strip) was 40 % of the busy CPU; Rich renders the same spans to
        segments several times faster. The pane's own style (colour, background) goes under every segment,
        as Static does.
        """
        if self._shown is None:
            return super().render_line(y)
        strips = self._strips if self._strips is not None and self._strips_key == self._key() else None
        if strips is None:
            strips = self._render_strips()
        if y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    @property
    def shown_plain(self) -> str:
        return self._shown.plain if self._shown is not None else ""
