"""What the terminal can show, decided once per app: full colour, 16 or 256 colours, or none (NO_COLOR).

Textual's own handling misleads on two kinds of terminal:

- ``NO_COLOR=1``: Textual turned every colour into a grey of the same luminance, so the verdict headline
  became colour 237 on 233 (unreadable) and red (busiest) cores dark grey, the emptiest-looking. The
  convention (https://no-color.org) asks for no colour at all: we drop colour and keep bold, reverse and
  underline, and the panes carry their meaning in glyphs and weight (block heights, bar lengths, bold
  busiest cores, a reversed bottleneck).
- ``TEXTUAL_COLOR_SYSTEM=standard`` (16 colours): Textual converted named colours to its theme's RGB and
  the terminal then picked the nearest of 16, so "red" (≥ 90 %) came out magenta and "yellow" (60–90 %)
  bright red, against the legend. On 16- and 256-colour terminals the named colours now reach the
  terminal as themselves (Textual's ``ansi_color``), and the 16-colour case is also drawn as 16 colours
  in screenshots and snapshots (a filter that does what the terminal will do).
"""

from __future__ import annotations

import os
from functools import lru_cache

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import LineFilter

from gpu_triage.safetext import REPLACEMENT, is_clean

COLOR_SYSTEM_ENV = "TEXTUAL_COLOR_SYSTEM"  # Textual's own variable: the same value the console uses


def color_system() -> str:
    """The colour system in use: "truecolor", "256", "standard" or "windows" as asked for, else (auto) what
    the console will pick from the terminal's own variables.

    Auto is resolved here as Rich resolves it (COLORTERM=truecolor/24bit: truecolor; TERM ending in
    -256color or -kitty: 256; anything else, plain ``xterm`` included: 16 colours). Read only as "auto",
    ``TERM=xterm`` got no pass-through of the named colours and the expected power cap came out bright red
    instead of yellow, as with ``TEXTUAL_COLOR_SYSTEM=standard``."""
    asked = os.environ.get(COLOR_SYSTEM_ENV, "auto").strip().lower() or "auto"
    if asked != "auto":
        return asked
    if os.environ.get("COLORTERM", "").strip().lower() in ("truecolor", "24bit"):
        return "truecolor"
    term = os.environ.get("TERM", "").strip().lower()
    if not term or term in ("dumb", "unknown"):
        return "auto"  # no terminal said: Textual's own choice
    colours = term.rpartition("-")[2]
    return {"256color": "256", "kitty": "256"}.get(colours, "standard")


def no_color() -> bool:
    """NO_COLOR present (any value, even empty, as the convention says)."""
    return "NO_COLOR" in os.environ


def named_colours_pass_through() -> bool:
    """Let "red"/"yellow" reach the terminal as its own red and yellow (16 and 256 colours)."""
    return color_system() in ("standard", "256")


class Standard16(LineFilter):
    """Every colour brought down to the 16 standard ones, as a 16-colour terminal shows it."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return [Segment(text, _downgrade(style), control) for text, style, control in segments]


@lru_cache(1024)
def _downgrade(style: Style | None) -> Style | None:
    if style is None:
        return None
    color = style.color.downgrade(ColorSystem.STANDARD) if style.color is not None else None
    bgcolor = style.bgcolor.downgrade(ColorSystem.STANDARD) if style.bgcolor is not None else None
    return style + Style.from_color(color, bgcolor)


class NoControlCodes(LineFilter):
    """The last guard against terminal escapes: a control character that reached a line drawn to the
    terminal (every source cleans what it reads, see gpu_triage.safetext; this catches a field nobody
    thought of) is dropped, and a lone surrogate becomes U+FFFD. Widths do not change: Rich counts the
    control characters as zero cells and a surrogate as one, and the strip keeps its cell length."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if is_clean("".join([text for text, _style, control in segments if not control])):  # one scan
            return segments
        return [
            Segment(text if control or is_clean(text) else _drop_controls(text), style, control)
            for text, style, control in segments
        ]


def _drop_controls(text: str) -> str:
    return "".join(c if is_clean(c) else (REPLACEMENT if cell_len(c) else "") for c in text)
