"""Pure drawing: a WindowView (+ verdict) in, Rich ``Text`` out, sized to a given width and line budget.

Kept free of widgets so that layout rules (what fits 80×24, what a 200×60 terminal gains) are plain
functions, and so that every pane redraws from the same window whether ticks come live or from a replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.text import Text

from gpu_triage.units import short_bytes as fmt_bytes
from gpu_triage.window import WindowView

BLOCKS = " ▁▂▃▄▅▆▇█"
SAWTOOTH_SPREAD = 40.0  # util_max - util_min inside one tick above which the cell is shaded
SAWTOOTH_BG = "grey30"
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


@dataclass(slots=True)
class Budget:
    """Lines given to each pane; ``gpu_rows`` per card: 1 (compact), 2 (util row + SM row) or
    ``TALL_MIN_ROWS``..``TALL_MAX_ROWS`` (two small graphs with a y-axis, when few cards leave room)."""

    gpu_rows: int
    cpu: int
    disk: int
    procs: int
    diag: int


def plan_layout(height: int, width: int, n_gpus: int, n_cores: int, n_disks: int, n_procs: int, fixed: int) -> Budget:
    """Share ``height`` lines between panes. Every card always gets its line; the rest is best effort.

    ``fixed`` counts the header, key line and replay bar. Order of need: cards, CPU, verdict, disks,
    evidence, processes, then a second (SM) row per card, then more of everything.
    """
    left = height - fixed - (1 + n_gpus)  # gpu title + one line per card
    cpu_cells = max(1, math.ceil(n_cores / max(1, width - 5))) if n_cores else 1
    cpu = min(max(0, left), cpu_cells + 1)
    left -= cpu
    diag = min(max(0, left), 2)
    left -= diag
    disk = min(max(0, left), min(1 + n_disks, 3)) if n_disks else 0
    left -= disk
    more = min(max(0, left), 2)
    diag += more
    left -= more
    procs = min(max(0, left), 1 + min(n_procs, 4)) if n_procs else 0
    left -= procs
    gpu_rows = 2 if left >= n_gpus + 2 and n_gpus else 1
    if gpu_rows == 2:
        left -= n_gpus
    # wide terminals: per-core bars instead of cells, more disks, processes, evidence
    bars_per_line = max(1, width // 16)
    bar_lines = math.ceil(n_cores / bars_per_line) + 1 if n_cores else 0
    if n_cores and bar_lines > cpu and left >= bar_lines - cpu:
        left -= bar_lines - cpu
        cpu = bar_lines
    extra = min(max(0, left), max(0, 1 + n_disks - disk)) if n_disks else 0
    disk += extra
    left -= extra
    extra = min(max(0, left), max(0, 1 + n_procs - procs)) if n_procs else 0
    procs += extra
    left -= extra
    # still room (few cards, tall terminal): tall graphs per card, after keeping 4 lines for evidence
    spare = left - 4
    if n_gpus and spare > 0:
        per_card = min(TALL_MAX_ROWS, gpu_rows + spare // n_gpus)
        if per_card >= TALL_MIN_ROWS:
            left -= (per_card - gpu_rows) * n_gpus
            gpu_rows = per_card
    diag += min(max(0, left), 4)
    return Budget(gpu_rows=gpu_rows, cpu=cpu, disk=disk, procs=procs, diag=diag)


# -- small formatters ------------------------------------------------------------------------------
def _ok(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def pct(v: float | None, width: int = 4) -> str:
    return f"{v:{width - 1}.0f}%" if _ok(v) else "n/a".rjust(width)


def rate(v: float | None) -> str:
    return fmt_bytes(v, suffix="/s") if _ok(v) else "n/a"


def _last(a: np.ndarray) -> float:
    return float(a[-1]) if a.size else float("nan")


def _nan_sum(*vals: float) -> float:
    ok = [v for v in vals if not math.isnan(v)]
    return float(sum(ok)) if ok else float("nan")


def bin_columns(values: np.ndarray, width: int, reduce: str = "mean") -> np.ndarray:
    """Squeeze a (T,) series into at most ``width`` columns, newest at the right, NaN-aware.

    All-NaN bins stay NaN (drawn blank). Written with fmin/fmax and masked sums rather than nanmean under a
    warnings filter: that filter was a tenth of the dashboard's frame cost (16 calls per frame).
    """
    t = values.shape[0]
    if t <= width:
        return values
    k = math.ceil(t / width)
    # groups of k from the newest backwards: the rightmost column is always the newest k ticks
    start = t - (t // k) * k
    body = values[start:].reshape(-1, k)
    if reduce == "min":
        return np.fmin.reduce(body, axis=1)
    if reduce == "max":
        return np.fmax.reduce(body, axis=1)
    ok = ~np.isnan(body)
    count = ok.sum(axis=1)
    total = np.where(ok, body, 0.0).sum(axis=1)
    with np.errstate(all="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


class _quiet:
    """Silence numpy's 'mean of empty slice' warning for all-NaN bins (they stay NaN: drawn blank)."""

    def __enter__(self) -> None:
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(None, None, None)


def block(v: float) -> str:
    """Fixed 0–100 scale: 0 % is a dim dot, 100 % a full block, missing is blank."""
    if math.isnan(v):
        return " "
    if v < 0.5:
        return "·"
    return BLOCKS[min(8, max(1, math.ceil(v / 12.5)))]


_BLOCK_CHARS = np.array(list(BLOCKS), dtype=object)


class Runs:
    """Collects (character, style) cells and appends each run of one style to a Text as ONE span.

    Why: a span per cell made Textual emit a colour escape sequence per cell (16 KB per frame for 8 cards,
    most of the terminal bytes) and cost a segment per cell in the compositor (the top of the profile).
    """

    def __init__(self, out: Text) -> None:
        self.out = out
        self.chars: list[str] = []
        self.style: str | None = None

    def add(self, ch: str, style: str) -> None:
        if style != self.style:
            self.flush()
            self.style = style
        self.chars.append(ch)

    def flush(self) -> None:
        if self.chars:
            self.out.append("".join(self.chars), self.style or "")
            self.chars = []


def waveform(
    util: np.ndarray,
    width: int,
    colour: str,
    *,
    umin: np.ndarray | None = None,
    umax: np.ndarray | None = None,
    sm: np.ndarray | None = None,
    sm_colour: str | None = None,
) -> Text:
    """One row of blocks on a fixed 0–100 scale, right-aligned (newest at the right).

    Cells whose tick hid a fast sawtooth (min/max spread >= 40 points) get a shaded background; with
    ``sm`` and ``sm_colour`` given, cells where SMs were mostly idle (SM < util / 3) take ``sm_colour``:
    busy on paper, not busy in fact.
    """
    u = bin_columns(util, width)
    lo = bin_columns(umin, width, "min") if umin is not None else None
    hi = bin_columns(umax, width, "max") if umax is not None else None
    s = bin_columns(sm, width) if sm is not None else None
    out = Text(" " * (width - u.shape[0]), no_wrap=True, end="")
    # vectorised per cell (profile: a Python loop over 800 cells per frame was the biggest part of our
    # own frame time): one character and one style code per cell, then one span per run of a style
    u = np.asarray(u, dtype=float)
    missing = np.isnan(u)
    safe = np.where(missing, 0.0, u)
    level = np.clip(np.ceil(safe / 12.5), 1, 8).astype(np.intp)
    chars = _BLOCK_CHARS[level]
    dot = ~missing & (safe < 0.5)
    chars[dot] = "·"
    chars[missing] = " "
    code = np.zeros(u.shape[0], dtype=np.intp)  # 0 colour, 1 grey42 (zero), 2 sm_colour (SMs idle)
    code[dot] = 1
    if s is not None and sm_colour:
        with np.errstate(invalid="ignore"):
            idle_sm = ~dot & ~np.isnan(s) & (safe >= 10) & ~missing & (s < u / 3)
        code[idle_sm] = 2
    if lo is not None and hi is not None:
        with np.errstate(invalid="ignore"):
            shaded = ~np.isnan(lo) & ~np.isnan(hi) & ((hi - lo) >= SAWTOOTH_SPREAD)
        code += 3 * shaded
    styles = [colour, "grey42", sm_colour or colour]
    styles += [f"{st} on {SAWTOOTH_BG}" for st in styles]
    if u.shape[0]:
        bounds = [0, *(np.flatnonzero(np.diff(code)) + 1).tolist(), u.shape[0]]
        for a, b in zip(bounds, bounds[1:]):
            out.append("".join(chars[a:b].tolist()), styles[int(code[a])])
    return out


AXIS_W = 4  # "100┤" gutter of the tall graph


def axis_label(row: int, rows: int) -> str:
    """y-axis hint of a tall graph on its fixed 0–100 scale: 100 at the top, 50 halfway, 0 at the bottom."""
    if row == 0:
        return "100┤"
    if row == rows - 1:
        return "  0┤"
    if rows >= 4 and row == rows // 2:
        return " 50┤"
    return "   │"


def tall_graph(
    values: np.ndarray,
    width: int,
    rows: int,
    colour: str,
    *,
    umax: np.ndarray | None = None,
) -> list[Text]:
    """``rows`` lines of a bar graph on a fixed 0–100 scale (1/8-row resolution), newest at the right.

    With ``umax`` (the highest GPU-Util inside each tick), the part between the mean bar and that maximum is
    drawn as a dim ``░``: a sawtooth faster than the tick reads as "busy in bursts" rather than "half busy".
    Zero is a dim dot on the bottom row and missing data is blank, as in the one-line form. Vectorised per
    row and one span per run of a style, to keep the frame cost of a tall card close to a one-line card.
    """
    u = np.asarray(bin_columns(values, width), dtype=float)
    hi = np.asarray(bin_columns(umax, width, "max"), dtype=float) if umax is not None else None
    pad = " " * (width - u.shape[0])
    missing = np.isnan(u)
    safe = np.where(missing, 0.0, u)
    hi_safe = np.where(np.isnan(hi), 0.0, hi) if hi is not None else None
    step = 100.0 / rows
    lines: list[Text] = []
    for r in range(rows):
        base = (rows - 1 - r) * step
        level = np.clip(np.round((safe - base) / step * 8), 0, 8).astype(np.intp)
        chars = _BLOCK_CHARS[level]
        code = np.zeros(u.shape[0], dtype=np.intp)  # 0 colour, 1 dim
        if hi_safe is not None:
            burst = (level == 0) & (hi_safe > base + step / 2) & ~missing
            chars[burst] = "░"
            code[burst] = 1
        if r == rows - 1:
            dot = ~missing & (safe < 0.5)
            chars[dot] = "·"
            code[dot] = 1
        chars[missing] = " "
        line = Text(pad, no_wrap=True, end="")
        styles = (colour, "grey42")
        if u.shape[0]:
            bounds = [0, *(np.flatnonzero(np.diff(code)) + 1).tolist(), u.shape[0]]
            for a, b in zip(bounds, bounds[1:]):
                line.append("".join(chars[a:b].tolist()), styles[int(code[a])])
        lines.append(line)
    return lines


def tall_split(rows_per_card: int) -> tuple[int, int]:
    """Rows for GPU-Util and for SM activity in the tall form: util gets two thirds (it is read first)."""
    sm_rows = max(2, rows_per_card // 3)
    return rows_per_card - sm_rows, sm_rows


def _used_of_total(used: float, total: float) -> str:
    """``87G/2.0T``; a single ``n/a`` when the host reports neither (not ``n/a/n/a``)."""
    if not _ok(used) and not _ok(total):
        return "n/a"
    return f"{fmt_bytes(used)}/{fmt_bytes(total)}"


NA_ON_CARD = "n/a on this card"
# the SM row of a card without GPM, longest first: a cut "SM activity n/a on this car" read as a glitch
SM_NA_TEXTS = ("SM activity n/a on this card (no GPM)", "SM activity n/a (no GPM)", "SM n/a (no GPM)", "SM n/a", "n/a")


def _longest_fitting(texts: tuple[str, ...], width: int) -> str:
    return next((t for t in texts if len(t) <= width), texts[-1][:width])


def fit_title(title: str, width: int, *, missing: bool) -> str:
    """A chart title that fits ``width`` columns.

    plotext silently drops a title wider than its plot: on an 80-column screen the detail charts lost their
    titles, and with them the "n/a on this card" that is the only sign an empty box means "not reported".
    When the chart has no data the n/a goes first so that it survives the cut.
    """
    text = f"{NA_ON_CARD}: {title}" if missing else title
    if width <= 0 or len(text) <= width:
        return text
    return text[: max(1, width - 1)] + "…"


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
    tall = rows_per_card >= TALL_MIN_ROWS
    if tall:
        title = "GPU  util 0–100 % (fixed scale; ░ = peaks inside a tick; lower graph: SM activity)  memory in use is not work"
    else:
        title = "GPU  util 0–100 % (fixed scale; shaded = sawtooth inside a tick"
        title += ", " if rows_per_card == 1 else "; 2nd row SM activity)"
        if rows_per_card == 1:
            title += f"{colours.sm} = SMs idle)"
        title += "  memory in use is not work"
    out.append(title[:width], "bold")
    if not view.gpu_indexes:
        out.append("\n")
        msg = "no GPU data" if gpu_available else "no NVIDIA GPU/driver: host only"
        out.append(msg[:width], colours.alert if not gpu_available else "grey50")
        return out
    wide = width >= 120
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
            out.append("LOST: the card stopped answering (fell off the bus?)"[: width - len(head)], f"bold {colours.alert}")
            continue
        util = _last(g["util_pct"])
        sm = _last(g["sm_active_pct"])
        tail = f" {pct(util)} sm{pct(sm)}"
        tail += f" {fmt_bytes(_last(g['mem_used_bytes']))}/{fmt_bytes(_last(g['mem_total_bytes']))}".ljust(10)
        tail += f" {_last(g['power_w']):4.0f}W" if _ok(_last(g["power_w"])) else "  n/aW"
        tail += f" P {rate(_nan_sum(_last(g['pcie_rx_bytes_per_s']), _last(g['pcie_tx_bytes_per_s'])))}".ljust(10)
        tail += f" NV {rate(_nan_sum(_last(g['nvlink_rx_bytes_per_s']), _last(g['nvlink_tx_bytes_per_s'])))}".ljust(11)
        if wide:
            t = _last(g["temp_c"])
            c = _last(g["sm_clock_mhz"])
            tail += f" {t:3.0f}C" if _ok(t) else "  n/aC"
            tail += f" {c:5.0f}MHz" if _ok(c) else "   n/aMHz"
        if tall:
            _tall_card(out, g, head, tail, width, rows_per_card, colours, selected == j)
            continue
        wave_w = max(4, width - len(head) - len(tail))
        out.append(head, "bold reverse" if selected == j else "bold")
        out.append_text(
            waveform(
                g["util_pct"],
                wave_w,
                colours.gpu,
                umin=g["util_min_pct"],
                umax=g["util_max_pct"],
                sm=g["sm_active_pct"] if rows_per_card == 1 else None,
                sm_colour=colours.sm if rows_per_card == 1 else None,
            )
        )
        out.append(tail[: max(0, width - len(head) - wave_w)])
        if rows_per_card == 2:
            out.append("\n")
            out.append("  sm".ljust(len(head)), colours.sm)
            if np.all(np.isnan(g["sm_active_pct"])):
                out.append(" " + _longest_fitting(SM_NA_TEXTS, wave_w - 1), "grey50")
            else:
                out.append_text(waveform(g["sm_active_pct"], wave_w, colours.sm))
                occ = _last(g["sm_occupancy_pct"])
                ten = _last(g["tensor_active_pct"])
                dram = _last(g["dram_active_pct"])
                out.append(f" occ{pct(occ)} tensor{pct(ten)} dram{pct(dram)}"[: max(0, width - len(head) - wave_w)], "grey70")
    return out


_LOST_FIELDS = ("util_pct", "mem_used_bytes", "power_w")

TALL_MAX_ROWS = 12  # 8 rows of GPU-Util + 4 of SM: more height adds no reading precision
TALL_MIN_ROWS = 6  # rows per card from which a card is drawn as two small graphs (util, SM) with a y-axis


def _tall_card(
    out: Text, g: dict[str, np.ndarray], head: str, tail: str, width: int, rows_per_card: int, colours: Colours, selected: bool
) -> None:
    """One card in the tall form: GPU-Util graph (first line carries the card number and the numbers), then
    the SM activity graph in its own colour; both on the same fixed 0–100 axis so they compare at a glance."""
    util_rows, sm_rows = tall_split(rows_per_card)
    tail_w = len(tail)
    graph_w = max(4, width - len(head) - AXIS_W - tail_w)
    side_w = max(0, width - len(head) - AXIS_W - graph_w)
    with _quiet():
        mean = float(np.nanmean(g["util_pct"])) if not np.all(np.isnan(g["util_pct"])) else float("nan")
        peak = float(np.nanmax(g["util_max_pct"])) if not np.all(np.isnan(g["util_max_pct"])) else float("nan")
        sm_mean = float(np.nanmean(g["sm_active_pct"])) if not np.all(np.isnan(g["sm_active_pct"])) else float("nan")
    t = _last(g["temp_c"])
    c = _last(g["sm_clock_mhz"])
    util_side = [
        (tail, ""),
        (" GPU-Util", colours.gpu),
        (f" window mean{pct(mean)} peak{pct(peak)}", "grey70"),
        (f" {t:.0f}°C" if _ok(t) else " n/a°C", "grey70"),
        (f" {c:.0f} MHz" if _ok(c) else " n/a MHz", "grey70"),
    ]
    if width >= 120:  # the one-line tail already carries temperature and clock
        util_side = util_side[:3]
    lines = tall_graph(g["util_pct"], graph_w, util_rows, colours.gpu, umax=g["util_max_pct"])
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
        (f" window mean{pct(sm_mean)}", "grey70"),
        (
            f" occ{pct(_last(g['sm_occupancy_pct']))} tensor{pct(_last(g['tensor_active_pct']))} dram{pct(_last(g['dram_active_pct']))}",
            "grey70",
        ),
    ]
    sm_lines = [] if sm_na else tall_graph(g["sm_active_pct"], graph_w, sm_rows, colours.sm)
    for r in range(sm_rows):
        out.append("\n")
        out.append(("  sm" if r == 0 else "").ljust(len(head)), colours.sm)
        if sm_na:
            out.append((" " * AXIS_W + "SM activity n/a on this card (no GPM)" if r == 0 else "")[: width - len(head)], "grey50")
            continue
        out.append(axis_label(r, sm_rows), "grey50")
        out.append_text(sm_lines[r])
        if r < len(sm_side):
            txt, style = sm_side[r]
            out.append(txt[:side_w], style)


def _heat(v: float) -> str:
    if math.isnan(v):
        return "grey30"
    if v >= 90:
        return "red"
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
    io = _last(view.iowait)
    summary = f"CPU {n} cores avg{pct(busy)} · {hot} ≥90% · iowait{pct(io)} · mem {_used_of_total(_last(view.host_mem_used), _last(view.host_mem_total))}"
    per_line = max(1, width // 16)
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
                out.append(f"{pct(v)} "[:6])
        return out
    out.append(summary[:width], "bold")
    cell_w = max(1, width - 5)
    rows = min(lines - 1, math.ceil(n / cell_w)) if n else 0
    for row in range(rows):
        out.append("\n")
        out.append("core "[:5], "grey50")
        runs = Runs(out)
        for k in range(row * cell_w, min(n, (row + 1) * cell_w)):
            v = float(cores[k])
            runs.add(block(v) if not math.isnan(v) else " ", _heat(v))
        runs.flush()
    return out


DISK_HEAD = f"{'DISK':<9} {'BUSY%':>6} {'AWAIT':>7} {'READ/s':>8} {'WRITE/s':>8} {'R IOPS':>7} {'W IOPS':>7}"


def disk_pane(view: WindowView, width: int, lines: int) -> Text:
    """iostat-like, busiest disks first."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    out.append(DISK_HEAD[:width], "bold")
    if not view.disk_names or not view.n:
        return out
    last = {f: a[-1] for f, a in view.disk.items()}
    order = sorted(range(len(view.disk_names)), key=lambda k: -np.nan_to_num(last["busy_pct"][k], nan=-1))
    for k in order[: lines - 1]:
        aw = last["await_ms"][k]
        line = (
            f"{view.disk_names[k][:9]:<9} {pct(last['busy_pct'][k], 6)}"
            f" {('%5.1fms' % aw) if _ok(aw) else '    n/a'}"
            f" {rate(last['read_bytes_per_s'][k]):>8} {rate(last['write_bytes_per_s'][k]):>8}"
            f" {_num(last['reads_per_s'][k]):>7} {_num(last['writes_per_s'][k]):>7}"
        )
        out.append("\n")
        busy = last["busy_pct"][k]
        out.append(line[:width], "bold red" if _ok(busy) and busy >= 90 else "")
    return out


def _num(v: float) -> str:
    return f"{v:.0f}" if _ok(v) else "n/a"


PROC_HEAD = f"{'PID':>8} {'PROCESS':<15} {'GPU':>3} {'GPU MEM':>8} {'CPU%':>5} {'WORKERS':>7}  WORKERS' CPU%"


def workers_text(wcpu: list[float]) -> str:
    """Few workers: each one's CPU (to spot the one that lags); many: count, mean and max, which is what
    decides "more workers" versus "lighter preprocessing" and fits any width."""
    if not wcpu:
        return "-"
    if len(wcpu) <= 4:
        return " ".join(f"{w:.0f}" for w in wcpu) + " %"
    return f"{len(wcpu)}× avg {sum(wcpu) / len(wcpu):.0f} % max {max(wcpu):.0f} %"


def proc_pane(view: WindowView, width: int, lines: int) -> Text:
    """GPU processes of the newest tick with their DataLoader workers' CPU, in aligned columns
    (numbers right-aligned under right-aligned headings); what does not fit is counted, not dropped silently."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    out.append(PROC_HEAD[:width], "bold")
    procs = sorted(view.procs[-1] if view.procs else [], key=lambda p: (p.gpu_index, p.pid))
    room = lines - 1
    shown = procs if len(procs) <= room else procs[: max(0, room - 1)]
    for p in shown:
        line = (
            f"{p.pid:>8} {(p.name or 'n/a')[:15]:<15} {p.gpu_index:>3} {fmt_bytes(p.gpu_mem_bytes):>8}"
            f" {pct(p.cpu_pct, 5)} {('n/a' if p.workers is None else str(p.workers)):>7}  {workers_text(p.workers_cpu_pct or [])}"
        )
        out.append("\n")
        out.append(line[:width])
    if len(shown) < len(procs) and room >= 1:
        out.append("\n")
        out.append(f"{'':>8} +{len(procs) - len(shown)} more"[:width], "grey50")
    if not procs:
        out.append("\n")
        out.append("no process on any GPU"[:width], "grey50")
    return out


@dataclass(slots=True)
class Shown:
    """What the diagnosis pane shows: a verdict from the engine, or the raw facts when there is none."""

    pattern: str | None
    bottleneck: str | None
    confidence: float | None
    evidence: list[str]
    advice: list[str]
    gpus: list[int]


def diag_pane(shown: Shown, history: list[tuple[float, str, str]], view: WindowView, width: int, lines: int, colours: Colours) -> Text:
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    if shown.pattern is None:
        out.append("FACTS "[:width], "bold")
        out.append(("  ·  ".join(shown.evidence) or "waiting for ticks")[: max(0, width - 6)])
    else:
        bad = shown.bottleneck not in (None, "none")
        out.append("VERDICT ", "bold")
        out.append(shown.pattern, f"bold {PATTERN_COLOURS.get(shown.pattern, '')}")
        out.append(" · ")
        out.append(str(shown.bottleneck), f"bold {colours.alert}" if bad else "bold")
        extra = ""
        if shown.gpus:
            extra += f"  GPU {','.join(map(str, shown.gpus))}"
        if shown.confidence is not None:
            extra += f"  confidence {shown.confidence * 100:.0f}%"
        out.append(extra)
        out.truncate(width)
    used = 1
    if lines >= 2:
        out.append("\n")
        out.append_text(verdict_strip(history, view, width))
        used += 1
    body: list[tuple[str, str]] = []
    if shown.pattern is not None:
        body += [("• " + e, "") for e in shown.evidence]
    body += [("→ " + a, colours.sm) for a in shown.advice]
    for text, style in body[: max(0, lines - used)]:
        out.append("\n")
        out.append(text[:width], style)
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
    with _quiet():
        gpu = float(np.nanmean(view.gpu["util_pct"])) if view.n_gpus else float("nan")
        cpu = float(np.nanmean(view.cpu)) if view.cpu.size else float("nan")
        disk = float(np.nanmax(np.nanmean(view.disk["busy_pct"], axis=0))) if view.disk_names else float("nan")
        links = float(
            np.nansum(
                [np.nanmean(view.gpu[f]) for f in ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")]
            )
        ) if view.n_gpus else float("nan")
    return [f"GPU mean{pct(gpu)}", f"CPU busy{pct(cpu)}", f"disk busy{pct(disk)}", f"links {rate(links)}"]
