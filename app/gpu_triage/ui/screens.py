"""Secondary screens: the key help, and one card's detail charts (plotext, with axes and time labels)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.screen import ModalScreen, Screen
from textual.widgets import Static
from textual_plotext import PlotextPlot

from gpu_triage.ui.app import _DetailLike
from gpu_triage.window import WindowView

KEYS_COMMON = [
    ("q", "quit (a recording in progress is closed as a valid file)"),
    ("p", "pause the display (live: sampling and recording go on)"),
    ("?", "this help"),
    ("↑ / ↓", "select a card"),
    ("Enter", "detail charts of the selected card; Esc back"),
    ("r", "start / stop recording to the recording directory"),
    ("d", "doctor: check the machine"),
]
KEYS_REPLAY = [
    ("space", "play / pause"),
    ("← / →", "step one tick (hold to repeat)"),
    ("[ / ]", "jump 30 s back / forward"),
    ("+ / -", "faster / slower"),
    ("g / G", "start / end of the recording"),
]
LEGEND = [
    "GPU rows: GPU-Util on a fixed 0–100 scale (█ = 100 %, · = 0 %, blank = no data).",
    "A shaded cell: inside that tick the driver saw both low and high (a sawtooth faster than the tick).",
    "Cyan cells: GPU-Util says busy but SMs were mostly idle (tiny kernels, or NCCL waiting).",
    "Memory in use is not work: a card can hold 100 GB and compute nothing.",
    "n/a: the hardware or driver does not report this value (never shown as 0).",
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help { width: auto; max-width: 100%; height: auto; max-height: 100%; border: round $accent; padding: 0 1; background: $surface; }
    """

    def __init__(self, replay: bool) -> None:
        super().__init__()
        self.replay = replay

    def compose(self) -> ComposeResult:
        t = Text()
        t.append("Keys\n", "bold")
        for key, what in KEYS_COMMON + (KEYS_REPLAY if self.replay else []):
            t.append(f"  {key:<8}", "bold cyan")
            t.append(f"{what}\n")
        if not self.replay:
            t.append("  (replay adds: space ←/→ [ ] + - g G)\n", "grey50")
        t.append("Reading the screen\n", "bold")
        for line in LEGEND:
            t.append(f"  {line}\n")
        t.append("Esc, q or ? closes this help", "grey50")
        yield Static(t, id="help")


class DetailScreen(_DetailLike, Screen[None]):
    """Five charts of one card over the window; follows new ticks while open."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("q", "app.quit", "quit")]
    DEFAULT_CSS = """
    DetailScreen Grid { grid-size: 2 3; height: 1fr; }
    DetailScreen #title { height: 1; background: $panel; }
    DetailScreen PlotextPlot { height: 1fr; }
    """

    def __init__(self, column: int, view: WindowView) -> None:
        super().__init__()
        self.column = column
        self._view = view

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        with Grid():
            for name in ("util", "sm", "mem", "link", "power", "clock"):
                yield PlotextPlot(id=f"p_{name}")

    def on_mount(self) -> None:
        self._ready = True
        self.refresh_data(self._view)

    def refresh_data(self, view: WindowView) -> None:
        self._view = view
        if not getattr(self, "_ready", False) or not view.n or self.column >= view.n_gpus:
            return
        j = self.column
        idx = view.gpu_indexes[j]
        end = datetime.fromtimestamp(float(view.t[-1]), timezone.utc).strftime("%H:%M:%S UTC")
        self.query_one("#title", Static).update(
            Text(f" GPU {idx} over the last {view.t[-1] - view.t[0]:.0f} s (x: seconds before {end})   Esc back", "bold")
        )
        x = list(view.t - view.t[-1])
        g = {f: a[:, j] for f, a in view.gpu.items()}

        def series(plot_id: str, title: str, lines: list[tuple[str, np.ndarray, str]], ylim: tuple[float, float] | None, ylabel: str) -> None:
            widget = self.query_one(f"#{plot_id}", PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(title)
            drawn = False
            for label, values, colour in lines:
                ok = ~np.isnan(values)
                if ok.any():
                    plt.plot([xv for xv, k in zip(x, ok, strict=True) if k], values[ok].tolist(), label=label, color=colour, marker="braille")
                    drawn = True
            if not drawn:
                plt.title(f"{title}: n/a on this card")
            if ylim is not None:
                plt.ylim(*ylim)
            plt.xlabel("s")
            plt.ylabel(ylabel)
            widget.refresh()

        mb = 1 << 20
        series(
            "p_util",
            "GPU-Util mean, min, max (%)",
            [("max", g["util_max_pct"], "gray"), ("min", g["util_min_pct"], "gray"), ("mean", g["util_pct"], "green")],
            (0, 100),
            "%",
        )
        series(
            "p_sm",
            "SM activity, occupancy, tensor, DRAM (%)",
            [
                ("sm", g["sm_active_pct"], "cyan"),
                ("occ", g["sm_occupancy_pct"], "blue"),
                ("tensor", g["tensor_active_pct"], "magenta"),
                ("dram", g["dram_active_pct"], "yellow"),
            ],
            (0, 100),
            "%",
        )
        total = g["mem_total_bytes"]
        top = float(np.nanmax(total)) / (1 << 30) if not np.all(np.isnan(total)) else None
        series("p_mem", "memory used (GiB); not work", [("used", g["mem_used_bytes"] / (1 << 30), "orange")], (0, top) if top else None, "GiB")
        series(
            "p_link",
            "PCIe / NVLink (MiB/s)",
            [
                ("pcie rx", g["pcie_rx_bytes_per_s"] / mb, "green"),
                ("pcie tx", g["pcie_tx_bytes_per_s"] / mb, "cyan"),
                ("nvl rx", g["nvlink_rx_bytes_per_s"] / mb, "magenta"),
                ("nvl tx", g["nvlink_tx_bytes_per_s"] / mb, "yellow"),
            ],
            None,
            "MiB/s",
        )
        series("p_power", "power (W) and temperature (°C)", [("W", g["power_w"], "red"), ("°C", g["temp_c"], "yellow")], None, "")
        series("p_clock", "SM clock (MHz)", [("MHz", g["sm_clock_mhz"], "blue")], None, "MHz")
