"""Secondary screens: the key help, and the small dialogs (panes shown and their order, the process filter, the
signal to send). One card's detail charts are in :mod:`gpu_triage.ui.detail_screen`."""

from __future__ import annotations

import textwrap
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gpu_triage.safetext import clean
from gpu_triage.ui.keys import Mode, keys_for
from gpu_triage.ui.panes import PATTERN_COLOURS

LEGEND = [
    "GPU rows: GPU-Util on a fixed 0–100 scale (█ = 100 %, · = 0 %, blank = no data).",
    "Braille cells (⣸): two dot columns a cell, the older on the left, 4 levels each, when the window is wider",
    "  than the graph; each dot column one tick or the mean of several (the title says the ticks a cell holds",
    "  and the time the graph spans). Every card's rows share one time axis.",
    "A shaded cell: inside it GPU-Util swung 40 points or more (a sawtooth faster than the cell).",
    "After the graph: GPU-Util and SMact (SM activity) now; a card number in red = XID, ECC or a slowdown,",
    "  written in place of power, temperature and clock; yellow watts = at the power cap (expected when busy).",
    "Processes: GPU% = the process's own share of its card's time (the driver's sample), not SM activity.",
    "Cyan cells: GPU-Util says busy but SMs were mostly idle (tiny kernels, or NCCL waiting).",
    "Few cards, tall terminal: each card gets a GPU-Util graph and an SM activity graph (axis 0/50/100 %);",
    "  ░ above a bar = the highest GPU-Util inside that tick (bursts the tick's mean hides).",
    "CPU cores: grey < 20 %, green 20–60 %, yellow 60–90 %, red and bold ≥ 90 % busy (NO_COLOR: bold only).",
    "Detail view (Enter): x axis is local wall-clock time (HH:MM:SS; TZ=UTC for UTC); "
    "each chart's title names its colours;",
    "  the clock chart's says what held the clocks down (power cap, thermal) and for how much of the window,",
    "  the power chart's the card's uncorrected ECC errors and XID events now.",
    "Memory in use is not work: a card can hold 100 GB and compute nothing.",
    "n/a: the hardware or driver does not report this value (never shown as 0).",
]


HELP_KEY_W = 14  # "  Enter / Esc " : the key column of the help screen


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,f1", "dismiss", "close"),
                                             Binding("q", "app.quit", "quit")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: auto; max-width: 100%; height: auto; max-height: 100%; border: round $accent; padding: 0 1;
                background: $surface; }
    #help { width: auto; max-width: 100%; height: auto; }
    """

    def __init__(self, mode: Mode) -> None:
        super().__init__()
        self.mode: Mode = mode

    def compose(self) -> ComposeResult:
        t = Text()
        # said first: at 80x24 the help is taller than the screen and its last line was out of reach
        t.append("Keys", "bold")
        t.append("   (Esc, ? or F1 closes; ↑ ↓ PgUp PgDn scroll)\n", "grey50")
        # the one key table (ui/keys.py), as the README's; a long description wraps under itself, not under
        # the keys (border and padding take 4 columns, the scrollbar 2)
        text_w = max(40, self.app.size.width - 6)
        desc_w = max(20, text_w - HELP_KEY_W)
        for key in keys_for(self.mode):
            t.append(f"  {key.plain:<{HELP_KEY_W - 2}}", "bold cyan")
            if len(key.plain) > HELP_KEY_W - 3:  # "PgUp PgDn Home End": its description on the next line
                t.append("\n" + " " * HELP_KEY_W)
            lines = textwrap.wrap(key.help.replace("`", ""), desc_w) or [""]
            t.append(("\n" + " " * HELP_KEY_W).join(lines) + "\n")
        if self.mode == "live":
            replay_only = " ".join(k.plain for k in keys_for("replay") if "live" not in k.modes)
            t.append(f"  (replay adds: {replay_only})\n", "grey50")
        t.append("Reading the screen\n", "bold")
        legend = [*LEGEND, "past strip: the verdict of each tick, newest right; underlined ▇ = a bottleneck was named"]
        for line in legend:  # wrapped under itself, as the keys are
            indent = "    " if line.startswith("  ") else "  "
            t.append("\n".join(textwrap.wrap(line, text_w, initial_indent="  ", subsequent_indent=indent)) + "\n")
        t.append("   ")
        used = 3
        for pattern, colour in PATTERN_COLOURS.items():
            if used + 3 + len(pattern) > text_w:  # the colour key wraps too, under itself
                t.append("\n   ")
                used = 3
            t.append(" ▆", colour)
            t.append(f" {pattern}")
            used += 3 + len(pattern)
        t.append("\n")
        t.append("Esc, ? or F1 closes this help; q quits", "grey50")
        # a scrolling box (focused, so ↑↓/PgDn/End scroll it): at 80x24 the legend did not fit and could not
        # be reached
        with VerticalScroll(id="help-box"):
            yield Static(t, id="help")

    def on_mount(self) -> None:
        self.query_one("#help-box", VerticalScroll).focus()


PANE_NAMES = {
    "gpu": "the cards",
    "job": "the training job (samples/s, step time, data wait)",
    "diag": "the verdict, its evidence and advice",
    "cpu": "cores, memory and swap",
    "disk": "network line and disks",
    "procs": "the process table",
}


class PanesScreen(ModalScreen[list[str] | None]):
    """`o`: which panes are shown, in which order. ↑↓ select, space shows / hides, u / n move the selected
    pane up / down, Enter applies, Esc leaves them as they were."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move_cursor(-1)", "up", show=False),
        Binding("down", "move_cursor(1)", "down", show=False),
        Binding("space", "toggle", "show/hide"),
        Binding("u,shift+up", "shift(-1)", "move up"),
        Binding("n,shift+down", "shift(1)", "move down"),
        Binding("enter", "apply", "apply"),
        Binding("escape", "cancel", "cancel"),
    ]
    DEFAULT_CSS = """
    PanesScreen { align: center middle; }
    PanesScreen #panes { width: auto; max-width: 90%; height: auto; border: round $accent; padding: 0 1;
                         background: $surface; }
    """

    def __init__(self, shown: list[str]) -> None:
        super().__init__()
        # every pane, the shown ones first in their order, then the hidden ones in the default order
        self.order = [*shown, *(p for p in PANE_NAMES if p not in shown)]
        self.shown = set(shown)
        self.cursor = 0

    def compose(self) -> ComposeResult:
        yield Static(self._text(), id="panes")

    def _text(self) -> Text:
        t = Text()
        t.append("Panes under the header, top to bottom\n", "bold")
        for k, name in enumerate(self.order):
            mark = "[x]" if name in self.shown else "[ ]"
            line = f"{'▶' if k == self.cursor else ' '} {mark} {name:<6} {PANE_NAMES[name]}\n"
            t.append(line, "reverse" if k == self.cursor else ("" if name in self.shown else "grey50"))
        t.append("↑↓ select · space show/hide · u/n move · Enter apply · Esc cancel", "grey50")
        return t

    def _show(self) -> None:
        self.query_one("#panes", Static).update(self._text())

    def action_move_cursor(self, delta: int) -> None:
        self.cursor = (self.cursor + delta) % len(self.order)
        self._show()

    def action_toggle(self) -> None:  # type: ignore[override]  # this screen's own action, not DOMNode's
        self.shown ^= {self.order[self.cursor]}
        self._show()

    def action_shift(self, delta: int) -> None:
        k, j = self.cursor, self.cursor + delta
        if 0 <= j < len(self.order):
            self.order[k], self.order[j] = self.order[j], self.order[k]
            self.cursor = j
        self._show()

    def action_apply(self) -> None:
        self.dismiss([p for p in self.order if p in self.shown])

    def action_cancel(self) -> None:
        self.dismiss(None)


class FilterScreen(ModalScreen[str | None]):
    """`/`: a line to type the process filter in. Enter applies (empty: all), Esc leaves it as it was."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    FilterScreen { align: center bottom; }
    FilterScreen #filter-box { width: 100%; height: auto; background: $surface; }
    FilterScreen #filter-box Static { height: 1; }
    """

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="filter-box"):
            yield Static("filter processes by part of a name, user, command line or PID · Enter applies · Esc cancels")
            yield Input(value=self.current, placeholder="e.g. python, alice, train.py", id="filter")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class SignalScreen(ModalScreen[str | None]):
    """The confirmation before a signal: it names the process (PID, user, command line); t sends SIGTERM,
    K (capital) SIGKILL, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "choose('SIGTERM')", "SIGTERM"),
        Binding("K", "choose('SIGKILL')", "SIGKILL"),
        Binding("escape,n", "choose(None)", "cancel"),
    ]
    DEFAULT_CSS = """
    SignalScreen { align: center middle; }
    SignalScreen #signal { width: 90%; height: auto; border: round $error; padding: 0 1; background: $surface; }
    """

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        t = Text()
        t.append("Send a signal to this process?\n", "bold")
        t.append(clean(self.what) + "\n\n")  # another user's command line: no escape reaches the terminal
        t.append("t", "bold")
        t.append(" SIGTERM (asks it to stop: a trainer can save and exit)   ")
        t.append("K", "bold")
        t.append(" SIGKILL (ends it at once)   ")
        t.append("Esc", "bold")
        t.append(" cancel")
        yield Static(t, id="signal")

    def action_choose(self, name: str | None) -> None:
        self.dismiss(name)
