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
    shown_ticks,
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
    driver_failed: bool = False,
) -> Text:
    """Title line + one line (or two: util and SM) per card. ``driver_failed``: the kernel lists cards that the
    driver cannot read (the header says why), not a machine without a GPU."""
    out = Text(no_wrap=True, end="")
    # graphs step: each tick keeps its column, so the terminal gets the newest column, not every row
    newest = view.ticks_ever - 1 if view.ticks_ever else None
    tall = rows_per_card >= TALL_MIN_ROWS
    if not view.gpu_indexes and not gpu_available:  # host only: the message, no graph heading over no card
        msg = "NVIDIA driver failure: no card can be read (see the red line above)" if driver_failed else (
            "no NVIDIA GPU/driver: host only")
        return Text(msg[:width], colours.alert, no_wrap=True, end="")
    if not view.gpu_indexes:
        if tall:
            out.append(_tall_legend(1, width), "bold")
        else:
            out.append(_wave_legend(None, 0, 0.0, rows_per_card, colours, width), "bold")
        out.append("\n")
        out.append("no GPU data"[:width], "grey50")
        return out
    left, wave_w = card_wave_span(width)  # one time axis: every row of every card, whatever it flags
    tall_w: int | None = None  # the tall graphs' width, for the ticks a column holds
    for j, idx in enumerate(view.gpu_indexes):
        out.append("\n")
        g = {f: a[:, j] for f, a in view.gpu.items()}
        # Silent now after answering earlier in the window = lost. A card that never reported these fields
        # (every value null: no permission, a MIG parent, an old driver) is unsupported, shown n/a, not LOST.
        went_silent = _went_silent(view.n, g)
        marker = "▶" if selected == j else " "
        head = f"{marker}{idx:>2} "
        if idx in lost or went_silent:
            out.append(head, "bold reverse" if selected == j else "bold")
            out.append("LOST: the card stopped answering (fell off the bus?)"[: width - len(head)],
                       f"bold {colours.alert}")
            continue
        flags, alarm = card_flags(g)
        # the card's number carries its state: the alert colour when something calls for action
        head_style = ("bold reverse" if selected == j else "bold") + (f" {colours.alert}" if alarm else "")
        if tall:
            tall_w = _tall_card(out, g, head, head_style, card_tail(g, width, tall=True), (flags, alarm), width,
                                rows_per_card, colours, newest)
            continue
        out.append(head, head_style)
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
        # throttling, ECC errors, XIDs: in the tail, in place of power, temperature and clock (never in
        # the graph's columns); the power cap alone only colours the watts
        out.append_text(card_tail(g, width, flags=(flags, alarm), alert=colours.alert)[: max(0, width - left - wave_w)])
        if rows_per_card == 2:
            _sm_row(out, g, width, colours, newest)
    return _legend(view, width, rows_per_card, colours, tall_w if tall else None, newest) + out


def _went_silent(n: int, g: dict[str, np.ndarray]) -> bool:
    """Silent now after answering earlier in the window: the card is lost."""
    last_missing = n > 1 and all(math.isnan(g[f][-1]) for f in _LOST_FIELDS)
    return last_missing and any(not np.isnan(g[f][:-1]).all() for f in _LOST_FIELDS)


def _sm_row(out: Text, g: dict[str, np.ndarray], width: int, colours: Colours, newest: int | None) -> None:
    """A card's second row: its SM activity on the cards' time axis, then occupancy, tensor and DRAM."""
    left, wave_w = card_wave_span(width)
    out.append("\n")
    out.append(SM_ROW_LABEL.ljust(left), colours.sm)
    if np.all(np.isnan(g["sm_active_pct"])):
        out.append(" " + longest_fitting(SM_NA_TEXTS, wave_w - 1), "grey50")
        return
    out.append_text(waveform(g["sm_active_pct"], wave_w, colours.sm, newest=newest))
    occ = last(g["sm_occupancy_pct"])
    ten = last(g["tensor_active_pct"])
    dram = last(g["dram_active_pct"])
    out.append(f" occ{pct(occ)} tensor{pct(ten)} dram{pct(dram)}"[: max(0, width - left - wave_w)], "grey70")


def _legend(view: WindowView, width: int, rows_per_card: int, colours: Colours, tall_w: int | None,
            newest: int | None) -> Text:
    """The pane's title line, which says what the graphs' columns hold: the tall graphs' (``tall_w``, None
    for the one-line form) or the one-line graphs'."""
    interval = float(np.median(np.diff(view.t))) if view.n > 1 else 0.0
    if rows_per_card >= TALL_MIN_ROWS:
        per_column, shortened = tall_plan(view.n, tall_w) if tall_w else (1, False)
        shown = ""
        if interval > 0 and tall_w:
            shown = (f", last {_short_dur(_span_ticks(tall_w) * interval)} of {_short_dur(view.n * interval)}"
                     if shortened else f", last {_short_dur(view.n * interval)}")
        return Text(_tall_legend(per_column, width, shown), "bold", no_wrap=True, end="")
    _, wave_w = card_wave_span(width)
    plan = wave_plan(view.n, wave_w)
    held = shown_ticks(plan, wave_w, newest)
    return Text(_wave_legend(plan, held, interval, rows_per_card, colours, width), "bold", no_wrap=True, end="")


HEAD_W = 4  # "▶ 0 ": the selection marker, the card's number, a space
SM_ROW_LABEL = "act "  # the second row of a card: its SM activity (GPM)
# the tail's fields and their widths: a card's figures always take the same columns, so its graph does too
_UTIL_W, _SM_W, _MEM_W, _POWER_W, _PCIE_W, _NV_W = 5, 10, 10, 6, 10, 11
_NARROW_SLOT_W = 9  # " 61C 1.5G"
_WIDE_SLOT_W = 14  # "  61C  1500MHz"


def tail_width(width: int, *, tall: bool = False) -> int:
    """Columns of a card's figures after its graph: util, SM activity, memory and power always; link
    rates from WIDE_COLS (and in the tall form, whose side lines have the rest); temperature and clock in
    the one-line form (9 columns below WIDE_COLS, 14 from it)."""
    wide = width >= WIDE_COLS
    w = _UTIL_W + _SM_W + _MEM_W + _POWER_W
    if wide or tall:
        w += _PCIE_W + _NV_W
    if wide:
        w += _WIDE_SLOT_W
    elif not tall:
        w += _NARROW_SLOT_W
    return w


def card_wave_span(width: int) -> tuple[int, int]:
    """(left edge, width) of every one-line graph of the pane: the cards' GPU-Util and SM activity rows,
    and the job pane's samples/s. A function of the terminal's width alone, so that they share one time axis."""
    return HEAD_W, max(4, width - HEAD_W - tail_width(width))


def card_tail(
    g: dict[str, np.ndarray],
    width: int,
    *,
    tall: bool = False,
    flags: tuple[str, bool] = ("", False),
    alert: str = "red",
) -> Text:
    """A card's figures, exactly :func:`tail_width` columns. An alarm (``flags`` with ``True``) takes the
    place of power, temperature and clock, in ``alert``; the power cap alone colours the watts."""
    wide = width >= WIDE_COLS
    out = Text(no_wrap=True, end="")
    out.append(f" {pct(last(g['util_pct']))}".ljust(_UTIL_W))
    out.append(f" SMact{pct(last(g['sm_active_pct']))}".ljust(_SM_W))
    out.append(f" {short_bytes(last(g['mem_used_bytes']))}/{short_bytes(last(g['mem_total_bytes']))}".ljust(_MEM_W))
    w = last(g["power_w"])
    power = (f" {w:4.0f}W" if ok(w) else "  n/aW").ljust(_POWER_W)
    pcie = f" P {rate(nan_sum(last(g['pcie_rx_bytes_per_s']), last(g['pcie_tx_bytes_per_s'])))}".ljust(_PCIE_W)
    nv = f" NV {rate(nan_sum(last(g['nvlink_rx_bytes_per_s']), last(g['nvlink_tx_bytes_per_s'])))}".ljust(_NV_W)
    t, c = last(g["temp_c"]), last(g["sm_clock_mhz"])
    if wide:
        slot = (f" {t:3.0f}C" if ok(t) else " n/aC") + (f" {c:5.0f}MHz" if ok(c) else "   n/aMHz")
    elif not tall:
        slot = (f" {t:2.0f}C" if ok(t) else " n/a") + (f" {c / 1000:.1f}G" if ok(c) else " n/a")
    else:
        slot = ""
    slot_w = _WIDE_SLOT_W if wide else (0 if tall else _NARROW_SLOT_W)
    text, alarm = flags
    if alarm and not tall:
        room = _POWER_W + slot_w
        if wide:
            out.append(pcie + nv)
        out.append(_fit(" " + text, room), f"bold {alert}")
        return out
    power_capped = bool(text) and not alarm  # card_flags: the only flag that calls for no action
    out.append(power, NOTICE_STYLE if power_capped else "")
    if wide or tall:
        out.append(pcie + nv)
    out.append(slot.ljust(slot_w)[:slot_w])
    return out


_SHORT_NAMES = {"power": "pwr", "thermal": "therm", "hw-slowdown": "hw", "hw-thermal": "hwtherm",
                "power-brake": "brake"}


def _fit(text: str, room: int) -> str:
    """``text`` in exactly ``room`` columns: whole, else with the throttle reasons' short names, else cut
    with an ellipsis (the detail screen has it whole)."""
    if len(text) > room:
        words = text.split(" ")
        text = " ".join(",".join(_SHORT_NAMES.get(n, n) for n in w.split(",")) for w in words)
    if len(text) > room:
        text = text[: room - 1] + "…"
    return text.ljust(room)


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


def _wave_legend(
    plan: WavePlan | None, shown: int, interval_s: float, rows_per_card: int, colours: Colours, width: int
) -> str:
    """The title of the one-line graphs: the fixed scale, the time the graphs span (the part of the window
    when they cannot hold it all), what one cell is (one tick, or several in braille), and what shading and
    colour mean."""
    cell = f"cell = {plan.per_cell} ticks (braille)" if plan is not None and plan.braille else "cell = 1 tick"
    span = ""
    if plan is not None and interval_s > 0:
        span = (f"last {_short_dur(shown * interval_s)} of {_short_dur(plan.window * interval_s)}"
                if shown < plan.window else f"last {_short_dur(plan.window * interval_s)}")
    when = f"{span}, {cell}" if span else cell
    sm_long = f", {colours.sm} = SMs idle" if rows_per_card == 1 else "; 2nd row SM activity"
    sm_short = f" · {colours.sm}: SMs idle" if rows_per_card == 1 else " · row 2: SM act"
    return longest_fitting(
        (
            f"GPU  util 0–100 % (fixed scale; {when}; shaded = swings inside a cell{sm_long}; "
            f"{NOTICE_STYLE} W = at its power cap)  memory in use is not work",
            f"GPU  util 0–100 % (fixed scale; {when}; shaded = swings inside a cell{sm_long})",
            f"GPU util 0–100% · {when} · shaded: swings in a cell{sm_short}",
            f"GPU util 0–100% · {when} · shaded: swings{sm_short}",
            f"GPU util 0–100% · {when} · shaded: swings",
            f"GPU util 0–100% · {when}",
            f"GPU util · {when}",
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
    """The card's health as short flags, only what is active or non-zero at the newest tick, the gravest
    first (where the row has little room, the end is cut): "XID 79 ×3" (critical XIDs seen, the last code),
    "ECC 2" (uncorrected errors; "ecc 5" when only corrected ones), "THR power" (clocks held down: power
    cap, thermal, hardware slowdown). Empty when all is well or unknown. With them, whether they call for
    action: the software power cap alone does not (a busy H200 sits at its 700 W limit: 650 W and up in
    every real tick recorded, docs/h200.md); thermal, hardware slowdown, power brake, ECC errors and XID
    events do."""
    out = []
    xids = last(g["xid_count"]) if "xid_count" in g else float("nan")
    code = last(g["xid_last"]) if "xid_last" in g else float("nan")
    alarm = False
    if ok(xids) and xids > 0:
        out.append(xid_text(xids, code))
        alarm = True
    unc = last(g["ecc_uncorrected"]) if "ecc_uncorrected" in g else float("nan")
    cor = last(g["ecc_corrected"]) if "ecc_corrected" in g else float("nan")
    if ok(unc) and unc > 0:
        out.append(f"ECC {unc:.0f}")
        alarm = True
    elif ok(cor) and cor > 0:
        out.append(f"ecc {cor:.0f}")
        alarm = True
    mask = last(g["clock_event_reasons"]) if "clock_event_reasons" in g else float("nan")
    names = throttle_names(int(mask)) if ok(mask) else None
    if names:
        out.append("THR " + ",".join(names))
        alarm = alarm or names != ["power"]
    return " ".join(out), alarm


def _tall_card(
    out: Text,
    g: dict[str, np.ndarray],
    head: str,
    head_style: str,
    tail: Text,
    flags: tuple[str, bool],
    width: int,
    rows_per_card: int,
    colours: Colours,
    newest: int | None = None,
) -> int:
    """One card in the tall form: GPU-Util graph (first line carries the card number and the numbers), then
    the SM activity graph in its own colour; both on the same fixed 0–100 axis so they compare at a glance.
    The graphs' width is the terminal's alone (every card's the same); the flags take a side line."""
    util_rows, sm_rows = tall_split(rows_per_card)
    graph_w = max(4, width - len(head) - AXIS_W - tail_width(width, tall=True))
    side_w = max(0, width - len(head) - AXIS_W - graph_w)
    with quiet_nan_warnings():
        mean = float(np.nanmean(g["util_pct"])) if not np.all(np.isnan(g["util_pct"])) else float("nan")
        peak = float(np.nanmax(g["util_max_pct"])) if not np.all(np.isnan(g["util_max_pct"])) else float("nan")
        sm_mean = float(np.nanmean(g["sm_active_pct"])) if not np.all(np.isnan(g["sm_active_pct"])) else float("nan")
    t = last(g["temp_c"])
    c = last(g["sm_clock_mhz"])
    text, alarm = flags
    util_side: list[tuple[str, str]] = [
        (" GPU-Util", colours.gpu),
        (f" window mean {pct(mean).strip()} peak {pct(peak).strip()}", "grey70"),
        (f" {t:.0f}°C" if ok(t) else " n/a°C", "grey70"),
        (f" {c:.0f} MHz" if ok(c) else " n/a MHz", "grey70"),
    ]
    if width >= WIDE_COLS:  # the one-line tail already carries temperature and clock
        util_side = util_side[:2]
    if text:
        util_side.insert(0, (" " + text, f"bold {colours.alert}" if alarm else NOTICE_STYLE))
    lines = tall_graph(g["util_pct"], graph_w, util_rows, colours.gpu, umax=g["util_max_pct"], newest=newest)
    for r, line in enumerate(lines):
        if r:
            out.append("\n")
            out.append(" " * len(head))
        else:
            out.append(head, head_style)
        out.append(axis_label(r, util_rows), "grey50")
        out.append_text(line)
        if r == 0:
            out.append_text(tail[:side_w])
        elif r - 1 < len(util_side):
            txt, style = util_side[r - 1]
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
        out.append((SM_ROW_LABEL if r == 0 else "").ljust(len(head)), colours.sm)
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
