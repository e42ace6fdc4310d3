"""Secondary screens: the key help, and one card's detail charts (plotext, with axes and time labels)."""

from __future__ import annotations

import math
import textwrap
from typing import Any, ClassVar

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, Static
from textual_plotext import PlotextPlot

from gpu_triage.safetext import clean
from gpu_triage.ui.follow import FollowsWindow
from gpu_triage.ui.formatters import (
    fit_title,
    health_note,
    nice_ticks,
    rate_unit,
    slowdown_note,
    tick_label,
    wall_clock,
    zone_name,
)
from gpu_triage.ui.keys import Mode, keys_for
from gpu_triage.ui.layout import DETAIL_MIN_SIZE, too_small
from gpu_triage.ui.panes import PATTERN_COLOURS
from gpu_triage.window import WindowView

LEGEND = [
    "GPU rows: GPU-Util on a fixed 0–100 scale (█ = 100 %, · = 0 %, blank = no data).",
    "Braille cells (⣸): two ticks a cell, the older on the left, 4 dot levels each, when the window is wider",
    "  than the graph (the title says so, and which part of the window is shown when even that does not fit).",
    "A shaded cell: inside that tick the driver saw both low and high (a sawtooth faster than the tick).",
    "Cyan cells: GPU-Util says busy but SMs were mostly idle (tiny kernels, or NCCL waiting).",
    "Few cards, tall terminal: each card gets a GPU-Util graph and an SM activity graph (axis 0/50/100 %);",
    "  ░ above a bar = the highest GPU-Util inside that tick (bursts the tick's mean hides).",
    "CPU cores: grey < 20 %, green 20–60 %, yellow 60–90 %, red and bold ≥ 90 % busy (NO_COLOR: bold only).",
    "Detail view (Enter): x axis is local wall-clock time (HH:MM:SS; TZ=UTC for UTC); each chart's title names its colours;",
    "  the clock chart's says what held the clocks down (power cap, thermal) and for how much of the window,",
    "  the power chart's the card's uncorrected ECC errors and XID events now.",
    "Memory in use is not work: a card can hold 100 GB and compute nothing.",
    "n/a: the hardware or driver does not report this value (never shown as 0).",
]


HELP_KEY_W = 14  # "  Enter / Esc " : the key column of the help screen


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,f1", "dismiss", "close"), Binding("q", "app.quit", "quit")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: auto; max-width: 100%; height: auto; max-height: 100%; border: round $accent; padding: 0 1; background: $surface; }
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
            t.append(f"  (replay adds: {' '.join(k.plain for k in keys_for('replay') if 'live' not in k.modes)})\n", "grey50")
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


class DetailScreen(FollowsWindow, Screen[None]):
    """Five charts of one card over the window; follows new ticks while open."""

    # ↑↓ switch the charts to the next card (they used to move the main screen's selection behind this one
    # while the charts stayed on the old card)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("q", "app.quit", "quit"),
        Binding("up", "card(-1)", "card", show=False),
        Binding("down", "card(1)", "card", show=False),
    ]
    DEFAULT_CSS = """
    DetailScreen Grid { grid-size: 2 3; height: 1fr; }
    DetailScreen #title { height: 1; background: $panel; }
    DetailScreen PlotextPlot { height: 1fr; }
    DetailScreen #too-small { height: 1fr; content-align: center middle; }
    """

    def __init__(self, column: int, view: WindowView) -> None:
        super().__init__()
        self.column = column
        self._view = view

    def compose(self) -> ComposeResult:
        yield Static(id="too-small")
        yield Static(id="title")
        with Grid():
            for name in ("util", "sm", "mem", "link", "power", "clock"):
                yield PlotextPlot(id=f"p_{name}")

    def on_mount(self) -> None:
        self._ready = True
        self._fit()
        self.refresh_data(self._view)

    def on_resize(self) -> None:
        self._fit()
        self.refresh_data(self._view)

    def action_card(self, delta: int) -> None:
        """The charts of the previous / next card; the main screen's selection follows."""
        n = max(1, self._view.n_gpus)
        self.column = (self.column + delta) % n
        app = self.app
        if hasattr(app, "selected"):
            app.selected = self.column
            app.redraw()  # the main screen behind shows the same card selected on return
        self.refresh_data(self._view)

    def _fit(self) -> bool:
        """Charts when the terminal is big enough, else one line that says how big it must be."""
        msg = too_small((self.app.size.width, self.app.size.height), DETAIL_MIN_SIZE)
        small = self.query_one("#too-small", Static)
        small.display = msg is not None
        small.update(msg or "")
        self.query_one("#title", Static).display = msg is None
        self.query_one(Grid).display = msg is None
        return msg is None

    def refresh_data(self, view: WindowView) -> None:
        self._view = view
        if not getattr(self, "_ready", False) or not view.n or self.column >= view.n_gpus:
            return
        if not self.query_one(Grid).display:
            return  # terminal too small: nothing to chart
        j = self.column
        idx = view.gpu_indexes[j]
        start = wall_clock(float(view.t[0])).strftime("%H:%M:%S")
        end = wall_clock(float(view.t[-1])).strftime("%H:%M:%S")
        zone = zone_name(float(view.t[-1]))
        self.query_one("#title", Static).update(
            Text(f" GPU {idx} from {start} to {end} {zone} ({view.t[-1] - view.t[0]:.0f} s; x axis: wall-clock time, {zone})   ↑↓ card  Esc back", "bold")
        )
        x = list(view.t - view.t[-1])
        xticks, labels = time_ticks(view.t)
        g = {f: a[:, j] for f, a in view.gpu.items()}
        colours = getattr(self.app, "colours", None)
        gpu_colour = getattr(colours, "gpu", "green")
        sm_colour = getattr(colours, "sm", "cyan")

        def series(
            plot_id: str,
            title: str | tuple[str, ...],
            lines: list[tuple[np.ndarray, Any, str]],
            ylim: tuple[float, float] | None,
            ylabel: str,
            right: tuple[np.ndarray, Any, str] | None = None,
            right_label: str = "",
        ) -> None:
            """One chart. No plotext legend box (it sat on the data): the title names each line and its colour
            (the longest of its forms that fits). Lines are drawn in the given order, so the main line goes
            last and stays on top. ``right``: a line of another unit on its own axis at the right (°C beside W
            on one axis made both unreadable). The y ticks are round numbers (plotext's own: 16.7 / 83.3)."""
            widget = self.query_one(f"#{plot_id}", PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.clear_figure()
            drawn = False
            # a tick every other row at most: on a short chart more labels ran into each other ("1540┤1520")
            rows = (widget.size.height or max(1, (self.app.size.height - 1) // 3)) - 4
            count = max(2, min(5, rows // 2 + 1))
            for values, colour, marker in lines:
                ok = ~np.isnan(values)
                if ok.any():
                    plt.plot([xv for xv, k in zip(x, ok, strict=True) if k], values[ok].tolist(), color=colour, marker=marker)
                    drawn = True
            if right is not None and not np.all(np.isnan(right[0])):
                values, colour, marker = right
                ok = ~np.isnan(values)
                plt.plot([xv for xv, k in zip(x, ok, strict=True) if k], values[ok].tolist(), color=colour, marker=marker, yside="right")
                lo, hi = _padded(values)
                plt.ylim(lo, hi, yside="right")
                ticks = nice_ticks(lo, hi, count)
                plt.yticks(ticks, [tick_label(v) + right_label for v in ticks], yside="right")
                drawn = True
            # before the first layout the widget has no size yet: half the screen is what the 2-column grid gives;
            # with data, plotext centres the title over the canvas right of the y-axis labels ("14482.3┤")
            width = (widget.size.width or self.app.size.width // 2) - (0 if not drawn else Y_LABELS_W)
            if right is not None and drawn:
                width -= Y_LABELS_W
            plt.title(fit_title(title, width, missing=not drawn))
            main = [v for v, _, _ in lines if not np.all(np.isnan(v))]
            lo, hi = ylim if ylim is not None else _padded(np.concatenate(main)) if main else (0.0, 1.0)
            plt.ylim(lo, hi)
            ticks = nice_ticks(lo, hi, count)
            plt.yticks(ticks, [tick_label(v) for v in ticks])
            plt.xticks(xticks, labels)
            plt.ylabel(ylabel)
            widget.refresh()

        series(
            "p_util",
            (
                f"GPU-Util %: mean ({gpu_colour}), min-max inside each tick (grey dots)",
                f"GPU-Util %: mean ({gpu_colour}), in-tick min-max (grey)",
                f"GPU-Util % ({gpu_colour}), min-max (grey)",
                "GPU-Util %",
            ),
            [(g["util_max_pct"], RGB["grey"], "dot"), (g["util_min_pct"], RGB["grey"], "dot"), (g["util_pct"], gpu_colour, "braille")],
            (0, 100),
            "%",
        )
        series(
            "p_sm",
            (
                f"%: SM activity ({sm_colour}), occupancy (blue), tensor (magenta), DRAM (yellow)",
                f"% SM ({sm_colour}), occupancy (blue), tensor (magenta), DRAM (yellow)",
                f"% SM ({sm_colour}) occ (blue) tensor (mag.) DRAM (yel.)",
                "SM activity %",
            ),
            [
                (g["dram_active_pct"], RGB["yellow"], "braille"),
                (g["tensor_active_pct"], RGB["magenta"], "braille"),
                (g["sm_occupancy_pct"], RGB["blue"], "braille"),
                (g["sm_active_pct"], sm_colour, "braille"),
            ],
            (0, 100),
            "%",
        )
        total = g["mem_total_bytes"]
        top = float(np.nanmax(total)) / (1 << 30) if not np.all(np.isnan(total)) else None
        series(
            "p_mem",
            ("memory used, GiB (orange; held memory is not work)", "memory used, GiB (orange)", "memory GiB"),
            [(g["mem_used_bytes"] / (1 << 30), RGB["orange"], "braille")],
            (0, top) if top else None,
            "GiB",
        )
        links = ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s")
        peaks = [float(np.nanmax(g[f])) for f in links if not np.all(np.isnan(g[f]))]
        div, unit = rate_unit(max(peaks) if peaks else float("nan"))
        series(
            "p_link",
            (
                f"{unit}: PCIe rx (green) tx (cyan), NVLink rx (magenta) tx (yellow)",
                f"{unit}: PCIe rx (grn) tx (cyan), NVLink rx (mag.) tx (yel.)",
                f"PCIe / NVLink, {unit}",
            ),
            [
                (g["pcie_rx_bytes_per_s"] / div, RGB["green"], "braille"),
                (g["pcie_tx_bytes_per_s"] / div, RGB["cyan"], "braille"),
                (g["nvlink_rx_bytes_per_s"] / div, RGB["magenta"], "braille"),
                (g["nvlink_tx_bytes_per_s"] / div, RGB["yellow"], "braille"),
            ],
            (0.0, _padded(np.array(peaks) / div)[1]) if peaks else None,
            unit,
        )
        nan = np.full(len(x), np.nan)
        health = health_note(g.get("ecc_uncorrected", nan), g.get("xid_count", nan), g.get("xid_last", nan))
        series(
            "p_power",
            (
                f"power, W (red, left axis); temperature, °C (yellow, right){health}",
                f"power W (red, left); temp. °C (yellow, right){health}",
                "power W (left), °C (right)",
            ),
            [(g["power_w"], RGB["red"], "braille")],
            None,
            "W",
            right=(g["temp_c"], RGB["yellow"], "braille"),
            right_label="°C",
        )
        # the clock chart says what held the clocks down: a power-capped card's clock saws with its load
        slowed = slowdown_note(g.get("clock_event_reasons", nan), g["sm_clock_mhz"])
        series(
            "p_clock",
            (f"SM clock, MHz (blue){slowed}", f"SM clock MHz{slowed}", f"MHz{slowed}", "SM clock, MHz"),
            [(g["sm_clock_mhz"], RGB["blue"], "braille")],
            None,
            "MHz",
        )


def _padded(values: np.ndarray) -> tuple[float, float]:
    """A y range around ``values`` on round ticks, with a little room: a flat line is not drawn on the frame."""
    ok = values[~np.isnan(values)]
    if not ok.size:
        return 0.0, 1.0
    lo, hi = float(ok.min()), float(ok.max())
    if hi - lo < 1e-9:
        lo, hi = lo - max(1.0, abs(lo) * 0.05), hi + max(1.0, abs(hi) * 0.05)
    ticks = nice_ticks(lo, hi, 5)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    lo = math.floor(lo / step) * step
    lo = max(0.0, lo) if float(ok.min()) >= 0 else lo  # a rate or a power never below 0 on the axis
    hi = math.ceil(hi / step) * step
    return lo, hi


Y_LABELS_W = 6  # plotext shows a title up to width - 6 with the widest y labels drawn here ("14482.3┤"; measured)

# Colours of the secondary lines as RGB: plotext's named colours go through the terminal's 16-colour
# palette, so "yellow" or "blue" came out purple in some themes and the titles that name them would lie.
# GPU-Util and SM use the configured colours (Rich names), exactly as the main screen does.
RGB: dict[str, tuple[int, int, int]] = {
    "yellow": (230, 200, 40),
    "magenta": (220, 90, 220),
    "blue": (90, 150, 255),
    "orange": (255, 150, 30),
    "green": (120, 220, 90),
    "cyan": (60, 210, 210),
    "red": (240, 70, 70),
    "grey": (120, 120, 120),
}


def time_ticks(t: np.ndarray, count: int = 5) -> tuple[list[float], list[str]]:
    """x-axis ticks of the detail charts: positions in seconds relative to the newest tick (the plotted x)
    and their wall-clock labels (HH:MM:SS, local time as the title says), evenly spread over the window."""
    if t.size == 0:
        return [], []
    t0, t1 = float(t[0]), float(t[-1])
    if t1 - t0 <= 0:
        return [0.0], [wall_clock(t1).strftime("%H:%M:%S")]
    steps = np.linspace(t0, t1, count)
    return [float(v - t1) for v in steps], [wall_clock(float(v)).strftime("%H:%M:%S") for v in steps]


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

    def action_toggle(self) -> None:
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
