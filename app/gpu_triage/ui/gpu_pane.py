"""The cards' pane: a line or a tall graph per card (GPU-Util waveform, SM activity, memory, power,
temperature, clocks, links) and the flags that call for attention (throttling, ECC, XID, a lost card)."""

from __future__ import annotations

import math

import numpy as np
from rich.text import Text

from gpu_triage.model import throttle_names
from gpu_triage.ui.formatters import (
    SM_NA_TEXTS,
    last,
    longest_fitting,
    nan_sum,
    ok,
    pct,
    quiet_nan_warnings,
    rate,
    xid_text,
)
from gpu_triage.ui.glyphs import (
    AXIS_W,
    WavePlan,
    axis_label,
    tall_graph,
    tall_plan,
    tall_split,
    wave_plan,
    waveform,
)
from gpu_triage.ui.layout import (
    TALL_MIN_ROWS,
    WIDE_COLS,
)
from gpu_triage.ui.panes import Colours
from gpu_triage.units import short_bytes
from gpu_triage.window import WindowView


def gpu_pane(
    view: WindowView,
    width: int,
    rows_per_card: int,
    colours: Colours,
    *,
    lost: set[int] | frozenset[int] = frozenset(),
    selected: int | None = None,
    gpu_available: bool = True,
) -> Text:
    """Title line + one line (or two: util and SM) per card."""
    out = Text(no_wrap=True, end="")
    # graphs step: each tick keeps its column, so the terminal gets the newest column, not every row
    newest = view.ticks_ever - 1 if view.ticks_ever else None
    tall = rows_per_card >= TALL_MIN_ROWS
    if not view.gpu_indexes and not gpu_available:  # host only: the message, no graph heading over no card
        return Text("no NVIDIA GPU/driver: host only"[:width], colours.alert, no_wrap=True, end="")
    if not view.gpu_indexes:
        if tall:
            out.append(_tall_legend(1, width), "bold")
        else:
            out.append(_wave_legend(None, 0.0, rows_per_card, colours, width), "bold")
        out.append("\n")
        out.append("no GPU data"[:width], "grey50")
        return out
    wide = width >= WIDE_COLS
    legend_plan: WavePlan | None = None  # what a cell of the one-line graphs is, said in the title
    tall_w: int | None = None  # the tall graphs' width, for the ticks a column holds
    for j, idx in enumerate(view.gpu_indexes):
        out.append("\n")
        g = {f: a[:, j] for f, a in view.gpu.items()}
        # Silent now after answering earlier in the window = lost. A card that never reported these fields
        # (every value null: no permission, a MIG parent, an old driver) is unsupported, shown n/a, not LOST.
        last_missing = view.n > 1 and all(math.isnan(g[f][-1]) for f in _LOST_FIELDS)
        went_silent = last_missing and any(not np.isnan(g[f][:-1]).all() for f in _LOST_FIELDS)
        marker = "▶" if selected == j else " "
        head = f"{marker}{idx:>2} "
        if idx in lost or went_silent:
            out.append(head, "bold reverse" if selected == j else "bold")
            out.append("LOST: the card stopped answering (fell off the bus?)"[: width - len(head)],
                       f"bold {colours.alert}")
            continue
        util = last(g["util_pct"])
        sm = last(g["sm_active_pct"])
        tail = f" {pct(util)} sm{pct(sm)}"
        tail += f" {short_bytes(last(g['mem_used_bytes']))}/{short_bytes(last(g['mem_total_bytes']))}".ljust(10)
        tail += f" {last(g['power_w']):4.0f}W" if ok(last(g["power_w"])) else "  n/aW"
        tail += f" P {rate(nan_sum(last(g['pcie_rx_bytes_per_s']), last(g['pcie_tx_bytes_per_s'])))}".ljust(10)
        tail += f" NV {rate(nan_sum(last(g['nvlink_rx_bytes_per_s']), last(g['nvlink_tx_bytes_per_s'])))}".ljust(11)
        t = last(g["temp_c"])
        c = last(g["sm_clock_mhz"])
        if wide:
            tail += f" {t:3.0f}C" if ok(t) else "  n/aC"
            tail += f" {c:5.0f}MHz" if ok(c) else "   n/aMHz"
        elif not tall:  # compact (80 columns): a hot or throttled card still shows, in 9 columns
            tail += f" {t:2.0f}C" if ok(t) else " n/a"
            tail += f" {c / 1000:.1f}G" if ok(c) else " n/a"
        flags, alarm = card_flags(g)
        if tall:
            tail = f" {flags}{tail}" if flags else tail
            graph_w = _tall_card(out, g, head, tail, width, rows_per_card, colours, selected == j, newest)
            tall_w = graph_w if tall_w is None or not flags else tall_w
            continue
        flag_text = f"{flags} " if flags else ""
        wave_w = max(4, width - len(head) - len(flag_text) - len(tail))
        if legend_plan is None or not flag_text:
            legend_plan = wave_plan(view.n, wave_w)
        out.append(head, "bold reverse" if selected == j else "bold")
        # throttling, ECC errors, XIDs: only when there is something, before the graph; when the row is
        # full they keep their place and the tail's end (temperature, clock) gives way
        flag_text = flag_text[: max(0, width - len(head) - 4)]
        if flag_text:
            # what calls for action in the alert colour; the power cap alone shown, not alarmed (card_flags)
            out.append(flag_text, f"bold {colours.alert}" if alarm else NOTICE_STYLE)
        out.append_text(
            waveform(
                g["util_pct"],
                wave_w,
                colours.gpu,
                umin=g["util_min_pct"],
                umax=g["util_max_pct"],
                sm=g["sm_active_pct"] if rows_per_card == 1 else None,
                sm_colour=colours.sm if rows_per_card == 1 else None,
                newest=newest,
            )
        )
        out.append(tail[: max(0, width - len(head) - len(flag_text) - wave_w)])
        if rows_per_card == 2:
            out.append("\n")
            out.append("  sm".ljust(len(head)), colours.sm)
            if np.all(np.isnan(g["sm_active_pct"])):
                out.append(" " + longest_fitting(SM_NA_TEXTS, wave_w - 1), "grey50")
            else:
                out.append_text(waveform(g["sm_active_pct"], wave_w, colours.sm, newest=newest))
                occ = last(g["sm_occupancy_pct"])
                ten = last(g["tensor_active_pct"])
                dram = last(g["dram_active_pct"])
                out.append(f" occ{pct(occ)} tensor{pct(ten)} dram{pct(dram)}"[: max(0, width - len(head) - wave_w)],
                           "grey70")
    if tall:
        per_column, shortened = tall_plan(view.n, tall_w) if tall_w else (1, False)
        interval = float(np.median(np.diff(view.t))) if view.n > 1 else 0.0
        shown = f", last {_short_dur(_span_ticks(tall_w) * interval)} of {_short_dur(view.n * interval)}" if (
            shortened and tall_w and interval > 0) else ""
        out = Text(_tall_legend(per_column, width, shown), "bold", no_wrap=True, end="") + out
    else:
        interval = float(np.median(np.diff(view.t))) if view.n > 1 else 0.0
        legend = Text(_wave_legend(legend_plan, interval, rows_per_card, colours, width), "bold", no_wrap=True, end="")
        out = legend + out
    return out


def _span_ticks(width: int) -> int:
    """Ticks a stepped graph of ``width`` columns shows one a column right after a move."""
    return width - max(1, min(8, width // 4)) + 1


def _tall_legend(per_column: int, width: int, shown: str = "") -> str:
    """The tall graphs' title: what a column is (one tick, or the mean of several, ░ up to their peak), and
    the part of the window shown when it is not all of it."""
    col = ("column = 1 tick" if per_column == 1 else f"column = mean of {per_column} ticks") + shown
    return longest_fitting(
        (
            f"GPU  util 0–100 % (fixed scale; {col}; ░ = up to the peak inside it; lower graph: SM activity)"
            "  memory in use is not work",
            f"GPU  util 0–100 % (fixed scale; {col}; ░ = up to the peak inside it; lower graph: SM activity)",
            f"GPU util 0–100% · {col} · ░ peak · lower: SM",
            f"GPU util 0–100% · {col}",
        ),
        width,
    )


def _wave_legend(plan: WavePlan | None, interval_s: float, rows_per_card: int, colours: Colours, width: int) -> str:
    """The title of the one-line graphs: the fixed scale, what one cell is (one tick, or two in braille),
    the part of the window shown when the graph cannot hold it all, and what shading and colour mean."""
    cell = "cell = 2 ticks (braille)" if plan is not None and plan.braille else "cell = 1 tick"
    if plan is not None and plan.shortened and interval_s > 0:
        cell += f", last {_short_dur(plan.ticks * interval_s)} of {_short_dur(plan.window * interval_s)}"
    sm_long = f", {colours.sm} = SMs idle" if rows_per_card == 1 else "; 2nd row SM activity"
    sm_short = f" · {colours.sm}: SMs idle" if rows_per_card == 1 else " · row 2: SM"
    return longest_fitting(
        (
            f"GPU  util 0–100 % (fixed scale; {cell}; shaded = sawtooth inside a tick{sm_long})  "
            "memory in use is not work",
            f"GPU  util 0–100 % (fixed scale; {cell}; shaded = sawtooth inside a tick{sm_long})",
            f"GPU util 0–100% · {cell} · shaded: sawtooth in a tick{sm_short}",
            f"GPU util 0–100% · {cell} · shaded: sawtooth{sm_short}",
            f"GPU util 0–100% · {cell} · shaded: sawtooth",
            f"GPU util 0–100% · {cell}",
        ),
        width,
    )


def _short_dur(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m" if rest == 0 else f"{minutes}m{rest:02d}s"


_LOST_FIELDS = ("util_pct", "mem_used_bytes", "power_w")


NOTICE_STYLE = "yellow"  # a card flag that calls for no action (the power cap alone)


def card_flags(g: dict[str, np.ndarray]) -> tuple[str, bool]:
    """The card's health as short flags, only what is active or non-zero at the newest tick: "THR power"
    (clocks held down: power cap, thermal, hardware slowdown), "ECC 2" (uncorrected errors; "ecc 5" when
    only corrected ones), "XID 79 ×3" (critical XIDs seen, the last code). Empty when all is well or unknown.
    With them, whether they call for action: the software power cap alone does not (a busy H200 sits at its
    700 W limit: 650 W and up in every real tick recorded, docs/h200.md); thermal, hardware slowdown, power
    brake, ECC errors and XID events do."""
    out = []
    mask = last(g["clock_event_reasons"]) if "clock_event_reasons" in g else float("nan")
    names = throttle_names(int(mask)) if ok(mask) else None
    if names:
        out.append("THR " + ",".join(names))
    alarm = bool(names) and names != ["power"]
    unc = last(g["ecc_uncorrected"]) if "ecc_uncorrected" in g else float("nan")
    cor = last(g["ecc_corrected"]) if "ecc_corrected" in g else float("nan")
    if ok(unc) and unc > 0:
        out.append(f"ECC {unc:.0f}")
        alarm = True
    elif ok(cor) and cor > 0:
        out.append(f"ecc {cor:.0f}")
        alarm = True
    xids = last(g["xid_count"]) if "xid_count" in g else float("nan")
    code = last(g["xid_last"]) if "xid_last" in g else float("nan")
    if ok(xids) and xids > 0:
        out.append(xid_text(xids, code))
        alarm = True
    return " ".join(out), alarm


def _tall_card(
    out: Text,
    g: dict[str, np.ndarray],
    head: str,
    tail: str,
    width: int,
    rows_per_card: int,
    colours: Colours,
    selected: bool,
    newest: int | None = None,
) -> int:
    """One card in the tall form: GPU-Util graph (first line carries the card number and the numbers), then
    the SM activity graph in its own colour; both on the same fixed 0–100 axis so they compare at a glance."""
    util_rows, sm_rows = tall_split(rows_per_card)
    tail_w = len(tail)
    graph_w = max(4, width - len(head) - AXIS_W - tail_w)
    side_w = max(0, width - len(head) - AXIS_W - graph_w)
    with quiet_nan_warnings():
        mean = float(np.nanmean(g["util_pct"])) if not np.all(np.isnan(g["util_pct"])) else float("nan")
        peak = float(np.nanmax(g["util_max_pct"])) if not np.all(np.isnan(g["util_max_pct"])) else float("nan")
        sm_mean = float(np.nanmean(g["sm_active_pct"])) if not np.all(np.isnan(g["sm_active_pct"])) else float("nan")
    t = last(g["temp_c"])
    c = last(g["sm_clock_mhz"])
    util_side = [
        (tail, ""),
        (" GPU-Util", colours.gpu),
        (f" window mean {pct(mean).strip()} peak {pct(peak).strip()}", "grey70"),
        (f" {t:.0f}°C" if ok(t) else " n/a°C", "grey70"),
        (f" {c:.0f} MHz" if ok(c) else " n/a MHz", "grey70"),
    ]
    if width >= WIDE_COLS:  # the one-line tail already carries temperature and clock
        util_side = util_side[:3]
    lines = tall_graph(g["util_pct"], graph_w, util_rows, colours.gpu, umax=g["util_max_pct"], newest=newest)
    for r, line in enumerate(lines):
        if r:
            out.append("\n")
            out.append(" " * len(head))
        else:
            out.append(head, "bold reverse" if selected else "bold")
        out.append(axis_label(r, util_rows), "grey50")
        out.append_text(line)
        if r < len(util_side):
            txt, style = util_side[r]
            out.append(txt[:side_w], style)
    sm_na = bool(np.all(np.isnan(g["sm_active_pct"])))
    sm_side = [
        (" SM activity", colours.sm),
        (f" window mean {pct(sm_mean).strip()}", "grey70"),
        (
            f" occ{pct(last(g['sm_occupancy_pct']))} tensor{pct(last(g['tensor_active_pct']))}"
            f" dram{pct(last(g['dram_active_pct']))}",
            "grey70",
        ),
    ]
    sm_lines = [] if sm_na else tall_graph(g["sm_active_pct"], graph_w, sm_rows, colours.sm, newest=newest)
    for r in range(sm_rows):
        out.append("\n")
        out.append(("  sm" if r == 0 else "").ljust(len(head)), colours.sm)
        if sm_na:
            out.append((" " * AXIS_W + "SM activity n/a on this card (no GPM)" if r == 0 else "")[: width - len(head)],
                       "grey50")
            continue
        out.append(axis_label(r, sm_rows), "grey50")
        out.append_text(sm_lines[r])
        if r < len(sm_side):
            txt, style = sm_side[r]
            out.append(txt[:side_w], style)
    return graph_w
