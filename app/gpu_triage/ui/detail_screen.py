"""One card's detail charts (Enter): five plotext charts over the window, with axes and wall-clock time
labels, following new ticks while open."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Static
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

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
from gpu_triage.ui.layout import DETAIL_MIN_SIZE, too_small
from gpu_triage.window import WindowView


class Chart(PlotextPlot):
    """A plotext chart drawn from what it was last given, at its size when drawn, and built once for each: plotext
    takes tens of milliseconds a chart and Rich as long again to read its colours, and the screen's first
    layout, its resize and a redraw of the screen behind it asked again for what was drawn already."""

    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        self._given: object = None
        self._draw: Callable[[Plot, int, int], None] | None = None
        self._built: tuple[object, Text] | None = None
        self.builds = 0  # charts built by plotext

    def show(self, given: object, draw: Callable[[Plot, int, int], None]) -> None:
        """Draw the chart with ``draw(plt, width, height)`` from now on; ``given``: what it draws (the same as
        last time: nothing to do)."""
        if given == self._given:
            return
        self._given, self._draw = given, draw
        self.refresh()

    def render(self) -> Text:
        width, height = self.size
        if not width or not height:
            return Text("")  # not laid out yet
        key = (self._given, width, height, self.app.theme, self.theme)
        if self._built is None or self._built[0] != key:
            self.plt.clear_data()
            self.plt.clear_figure()
            if self._draw is not None:
                self._draw(self.plt, width, height)
            self.builds += 1
            built = super().render()
            assert isinstance(built, Text)  # textual-plotext's own: its build read in by Rich
            self._built = (key, built)
        return self._built[1]


@runtime_checkable
class _SelectsCard(Protocol):
    """The dashboard's app: a selected card, drawn again on demand (screens sit under it, so it is named
    by what it offers)."""

    selected: int

    def redraw(self) -> None: ...


class DetailScreen(FollowsWindow, Screen[None]):
    """Five charts of one card over the window; follows new ticks while open."""

    # ↑↓ switch the charts to the next card (not the main screen's selection behind this one, which would leave
    # the charts on the old card)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("q", "app.quit", "quit"),
        Binding("up", "card(-1)", "card", show=False),
        Binding("down", "card(1)", "card", show=False),
    ]
    DEFAULT_CSS = """
    DetailScreen Grid { grid-size: 2 3; height: 1fr; }
    DetailScreen #title { height: 1; background: $panel; }
    DetailScreen Chart { height: 1fr; }
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
                yield Chart(id=f"p_{name}")

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
        if isinstance(app, _SelectsCard):
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
            Text(f" GPU {idx} from {start} to {end} {zone} ({view.t[-1] - view.t[0]:.0f} s; x axis: wall-clock time, "
                 f"{zone})   ↑↓ card  Esc back", "bold")
        )
        x = list(view.t - view.t[-1])
        xticks, labels = time_ticks(view.t)
        g = {f: a[:, j] for f, a in view.gpu.items()}
        colours = getattr(self.app, "colours", None)
        gpu_colour = getattr(colours, "gpu", "green")
        sm_colour = getattr(colours, "sm", "cyan")

        axis = (view.t.tobytes(), tuple(xticks), tuple(labels))  # the x axis every chart shares

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

            def draw(plt: Plot, full: int, height: int) -> None:
                drawn = False
                # a tick every other row at most: on a short chart more labels ran into each other ("1540┤1520")
                count = max(2, min(5, (height - 4) // 2 + 1))
                for values, colour, marker in lines:
                    ok = ~np.isnan(values)
                    if ok.any():
                        plt.plot([xv for xv, k in zip(x, ok, strict=True) if k], values[ok].tolist(), color=colour,
                                 marker=marker)
                        drawn = True
                if right is not None and not np.all(np.isnan(right[0])):
                    values, colour, marker = right
                    ok = ~np.isnan(values)
                    plt.plot([xv for xv, k in zip(x, ok, strict=True) if k], values[ok].tolist(), color=colour,
                             marker=marker, yside="right")
                    lo, hi = _padded(values)
                    # plotext's hint says float; it reads "right"
                    plt.ylim(lo, hi, yside="right")  # type: ignore[arg-type]
                    ticks = nice_ticks(lo, hi, count)
                    plt.yticks(ticks, [tick_label(v) + right_label for v in ticks],
                               yside="right")  # type: ignore[arg-type]  # as ylim above
                    drawn = True
                # with data, plotext centres the title over the canvas right of the y-axis labels ("14482.3┤")
                width = full - (0 if not drawn else Y_LABELS_W)
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

            given = (axis, title, [(v.tobytes(), c, m) for v, c, m in lines], ylim, ylabel, right_label,
                     None if right is None else (right[0].tobytes(), *right[1:]))
            self.query_one(f"#{plot_id}", Chart).show(given, draw)

        series(
            "p_util",
            (
                f"GPU-Util %: mean ({gpu_colour}), min-max inside each tick (grey dots)",
                f"GPU-Util %: mean ({gpu_colour}), in-tick min-max (grey)",
                f"GPU-Util % ({gpu_colour}), min-max (grey)",
                "GPU-Util %",
            ),
            [(g["util_max_pct"], RGB["grey"], "dot"), (g["util_min_pct"], RGB["grey"], "dot"),
             (g["util_pct"], gpu_colour, "braille")],
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
