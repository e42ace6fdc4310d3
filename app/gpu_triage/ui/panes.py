"""The panes of the main screen: cards, cores, disks, processes and the diagnosis. A WindowView (+ verdict) in,
Rich ``Text`` out, sized to a width and a line budget planned by :mod:`gpu_triage.ui.layout`.

Kept free of widgets so that every pane redraws from the same window whether ticks come live or from a replay.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from rich.text import Text

from gpu_triage.diagnosis.engine import Verdict, format_confidence
from gpu_triage.diagnosis.present import CHANGING
from gpu_triage.model import NetSample, throttle_names
from gpu_triage.ui.formatters import (
    SM_NA_TEXTS,
    last,
    longest_fitting,
    nan_sum,
    num,
    ok,
    pct,
    quiet_nan_warnings,
    rate,
    used_of_total,
    xid_text,
)
from gpu_triage.ui.glyphs import (
    AXIS_W,
    Runs,
    WavePlan,
    axis_label,
    block,
    tall_graph,
    tall_plan,
    tall_split,
    wave_plan,
    waveform,
)
from gpu_triage.ui.layout import (
    CORE_LABEL,
    TALL_MIN_ROWS,
    WIDE_COLS,
    core_bars_per_line,
    core_cells_per_line,
)
from gpu_triage.units import short_bytes
from gpu_triage.window import WindowView

PATTERN_COLOURS = {
    "idle": "grey50",
    "steady_high": "green",
    "steady_low": "yellow",
    "sawtooth": "magenta",
    "single_card_busy": "bright_blue",
    "imbalanced": "deep_sky_blue1",  # distinct from steady_low, which many palettes draw orange
}


@dataclass(slots=True)
class Colours:
    gpu: str = "green"
    sm: str = "cyan"
    alert: str = "red"


# -- panes -------------------------------------------------------------------------------------------
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
    if not view.gpu_indexes:
        if tall:
            out.append(_tall_legend(1, width), "bold")
        else:
            out.append(_wave_legend(None, 0.0, rows_per_card, colours, width), "bold")
        out.append("\n")
        msg = "no GPU data" if gpu_available else "no NVIDIA GPU/driver: host only"
        out.append(msg[:width], colours.alert if not gpu_available else "grey50")
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


def _heat(v: float) -> str:
    if math.isnan(v):
        return "grey30"
    if v >= 90:
        return "bold red"  # bold: the busiest cores stand out without colour too (NO_COLOR)
    if v >= 60:
        return "yellow"
    if v >= 20:
        return "green"
    return "grey50"


def cpu_pane(view: WindowView, width: int, lines: int, colours: Colours) -> Text:
    """Every core: heat cells (compact) or htop-like bars with % (when the budget allows), then a summary."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    cores = view.cpu[-1] if view.n else np.zeros(0)
    n = cores.shape[0]
    busy = float(np.nanmean(cores)) if n and not np.all(np.isnan(cores)) else float("nan")
    hot = int(np.sum(cores >= 90)) if n else 0
    io = last(view.iowait)
    mem = used_of_total(last(view.host_mem_used), last(view.host_mem_total))
    summary = f"CPU {n} core{'' if n == 1 else 's'} avg{pct(busy)} · {hot} ≥90% · iowait{pct(io)} · mem {mem}"
    summary += f" · swap {swap_text(view)}"
    per_line = core_bars_per_line(width)
    bar_lines = math.ceil(n / per_line) if n else 0
    if n and lines - 1 >= bar_lines and bar_lines > 1 or (n and lines - 1 >= bar_lines and n <= per_line):
        out.append(summary[:width], "bold")
        for row in range(bar_lines):
            out.append("\n")
            for k in range(row * per_line, min(n, (row + 1) * per_line)):
                v = float(cores[k])
                filled = 0 if math.isnan(v) else round(v / 100 * 7)
                out.append(f"{k:>3}", "grey50")
                out.append("█" * filled + "░" * (7 - filled), _heat(v))
                out.append(f"{pct(v, 5)} "[:6])  # " 100%": never run into the bar ("███████100%")
        return out
    out.append(summary[:width], "bold")
    cell_w = core_cells_per_line(width)
    rows = min(lines - 1, math.ceil(n / cell_w)) if n else 0
    for row in range(rows):
        out.append("\n")
        out.append(CORE_LABEL, "grey50")
        runs = Runs(out)
        for k in range(row * cell_w, min(n, (row + 1) * cell_w)):
            v = float(cores[k])
            runs.add(block(v) if not math.isnan(v) else " ", _heat(v))
        runs.flush()
    return out


def swap_text(view: WindowView) -> str:
    """Swap in use of configured at the newest tick: "1.2G/8.0G", "none" (no swap configured), "n/a"."""
    used, total = view.swap[-1] if view.swap else (None, None)
    if total == 0:
        return "none"
    return used_of_total(_f(used), _f(total))


def _f(v: int | None) -> float:
    return float("nan") if v is None else float(v)


VIRTUAL_NICS = ("ifb", "veth", "docker", "virbr", "br-", "cni", "flannel", "cali", "tun", "tap", "vxlan", "dummy")


def net_line(view: WindowView, width: int) -> str:
    """One line, busiest interfaces first: "NET ib0 ↓11.9G/s ↑11.9G/s · eth0 ↓2.0M/s ↑140K/s"; as many as fit."""
    nets = view.nets[-1] if view.nets else []
    if not nets:
        return "NET n/a"

    def total(n: NetSample) -> float:
        return (n.rx_bytes_per_s or 0.0) + (n.tx_bytes_per_s or 0.0)

    out = "NET"
    sep = " "
    # idle virtual interfaces (ifb, veth, bridges, tunnels) are noise beside the NICs; shown once they carry traffic
    shown = [n for n in nets if total(n) > 0 or not n.name.startswith(VIRTUAL_NICS)] or nets[:1]
    for n in sorted(shown, key=lambda n: (-total(n), n.name)):
        part = f"{sep}{n.name} ↓{rate(n.rx_bytes_per_s)} ↑{rate(n.tx_bytes_per_s)}"
        if len(out) + len(part) > width:
            break
        out += part
        sep = " · "
    return out


DISK_HEAD = f"{'DISK':<9} {'BUSY%':>6} {'AWAIT':>7} {'READ/s':>8} {'WRITE/s':>8} {'R IOPS':>7} {'W IOPS':>7}"


def disk_pane(view: WindowView, width: int, lines: int, *, net: bool = False) -> Text:
    """iostat-like, busiest disks first; with ``net`` the NET line first (one of ``lines``)."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    if net:
        out.append(net_line(view, width)[:width], "bold")
        lines -= 1
        if lines <= 0:
            return out
        out.append("\n")
    out.append(DISK_HEAD[:width], "bold")
    if not view.disk_names or not view.n:
        return out
    newest = {f: a[-1] for f, a in view.disk.items()}
    order = sorted(range(len(view.disk_names)), key=lambda k: -np.nan_to_num(newest["busy_pct"][k], nan=-1))
    for k in order[: lines - 1]:
        aw = newest["await_ms"][k]
        line = (
            f"{view.disk_names[k][:9]:<9} {pct(newest['busy_pct'][k], 6)}"
            f" {f'{aw:5.1f}ms' if ok(aw) else '    n/a'}"
            f" {rate(newest['read_bytes_per_s'][k]):>8} {rate(newest['write_bytes_per_s'][k]):>8}"
            f" {num(newest['reads_per_s'][k]):>7} {num(newest['writes_per_s'][k]):>7}"
        )
        out.append("\n")
        busy = newest["busy_pct"][k]
        out.append(line[:width], "bold red" if ok(busy) and busy >= 90 else "")
    return out


@dataclass(slots=True)
class FactsOnly:
    """The diagnosis pane with no verdict to show (no tick yet, or the engine failed): the raw facts."""

    lines: list[str]


Shown: TypeAlias = Verdict | FactsOnly  # what the diagnosis pane shows: the tracker's verdict, or the raw facts


ADVICE_MAX_LINES = 3  # the first advice line wraps (at 80 columns the fix is past the edge); the rest are cut


def first_advice_lines(shown: Shown, width: int) -> list[str]:
    """The verdict's first advice ("→ …") wrapped at ``width`` under itself, at most ADVICE_MAX_LINES lines."""
    if isinstance(shown, FactsOnly) or not shown.advice:
        return []
    wrapped = textwrap.wrap(
        "→ " + shown.advice[0], width=max(10, width), subsequent_indent="  ", break_on_hyphens=False
    ) or ["→"]
    if len(wrapped) > ADVICE_MAX_LINES:
        wrapped = wrapped[:ADVICE_MAX_LINES]
        wrapped[-1] = _cut(wrapped[-1] + " …", width)
    return [_cut(w, width) for w in wrapped]


def _changing_at(shown: Verdict) -> set[int]:
    """Which evidence lines say the verdict is changing (present.on_screen): drawn under the headline."""
    return {i for i, f in enumerate(shown.evidence_facts) if f.get("metric") == CHANGING and i < len(shown.evidence)}


def verdict_need(shown: Shown, width: int) -> tuple[int, int]:
    """(lines of the headline, a changing line and the wrapped first advice, evidence bullets): what the layout
    keeps first."""
    if isinstance(shown, FactsOnly):
        return 1 + len(first_advice_lines(shown, width)), 0
    changing = len(_changing_at(shown))
    return 1 + changing + len(first_advice_lines(shown, width)), len(shown.evidence) - changing


def _cut(text: str, width: int) -> str:
    """``text`` in ``width`` columns, an ellipsis marking what was cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def diag_pane(shown: Shown, history: list[tuple[float, str, str]], view: WindowView, width: int, lines: int,
              colours: Colours) -> Text:
    """Headline, past-verdicts strip, evidence, advice. With too few lines the first advice line is kept
    before any evidence bullet and the strip goes first (issue #13: the fix is what the user came for)."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    if isinstance(shown, FactsOnly):
        out.append("FACTS "[:width], "bold")
        out.append(("  ·  ".join(shown.lines) or "waiting for ticks")[: max(0, width - 6)])
        evidence: list[str] = []
        all_advice: list[str] = []
        changing: list[str] = []
    else:
        bad = shown.bottleneck != "none"
        out.append("VERDICT ", "bold")
        out.append(shown.pattern, f"bold {PATTERN_COLOURS.get(shown.pattern, '')}")
        out.append(" · ")
        out.append(shown.bottleneck, f"bold reverse {colours.alert}" if bad else "bold")
        extra = ""
        if shown.gpus:
            extra += f"  GPU {','.join(map(str, shown.gpus))}"
        # no card to read: a confidence would rate a GPU verdict that was never possible
        extra += f"  {format_confidence(shown.confidence)}" if view.n_gpus else "  no GPU: host facts only"
        out.append(extra)
        out.truncate(width)
        # a verdict shown while it changes says so first (present.on_screen): its first line, under the headline
        at = _changing_at(shown)
        changing = [_cut(shown.evidence[i], width) for i in sorted(at)]
        evidence = [_cut("• " + e, width) for i, e in enumerate(shown.evidence) if i not in at]
        all_advice = shown.advice
    room = lines - 1
    for text in changing[:room]:
        out.append("\n")
        out.append(text, f"bold {colours.alert}")
        room -= 1
    advice = first_advice_lines(shown, width)[:room]
    room -= len(advice)
    evidence = evidence[:room]
    room -= len(evidence)
    strip = room >= 1
    room -= int(strip)
    more_advice = [_cut("→ " + a, width) for a in all_advice[1:]][: max(0, room)]
    if strip:
        out.append("\n")
        out.append_text(verdict_strip(history, view, width))
    for text in evidence:
        out.append("\n")
        out.append(text)
    for text in [*advice, *more_advice]:
        out.append("\n")
        out.append(text, f"bold {colours.sm}" if text in advice else colours.sm)
    return out


def verdict_strip(history: list[tuple[float, str, str]], view: WindowView, width: int) -> Text:
    """Past verdicts over the window, one coloured cell per tick (newest right); red mark = bottleneck."""
    label = "past "
    out = Text(label, "grey50", no_wrap=True, end="")
    cells = width - len(label)
    if not view.n or not history:
        return out
    t0 = float(view.t[0])
    recent = [h for h in history if h[0] >= t0 - 1e-6][-cells:]
    out.append(" " * (cells - len(recent)))
    runs = Runs(out)
    for _, pattern, bottleneck in recent:
        ch = "▆" if bottleneck in (None, "none") else "▇"
        runs.add(ch, PATTERN_COLOURS.get(pattern, "white") + ("" if bottleneck in (None, "none") else " underline"))
    runs.flush()
    return out


def facts(view: WindowView) -> list[str]:
    """The two-minute method's raw facts, shown while no diagnosis engine is there."""
    if not view.n:
        return []
    with quiet_nan_warnings():
        gpu = float(np.nanmean(view.gpu["util_pct"])) if view.n_gpus else float("nan")
        cpu = float(np.nanmean(view.cpu)) if view.cpu.size else float("nan")
        disk = float(np.nanmax(np.nanmean(view.disk["busy_pct"], axis=0))) if view.disk_names else float("nan")
        links = float(
            np.nansum(
                [np.nanmean(view.gpu[f]) for f in ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s",
                                                    "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")]
            )
        ) if view.n_gpus else float("nan")
    return [f"GPU mean{pct(gpu)}", f"CPU busy{pct(cpu)}", f"disk busy{pct(disk)}", f"links {rate(links)}"]
