"""The glyph engines: a series squeezed into columns (binning), one-line block waveforms and tall bar graphs
on a fixed 0–100 scale, and runs of one style appended as one span (terminal bytes)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from rich.text import Span, Text

BLOCKS = " ▁▂▃▄▅▆▇█"
SAWTOOTH_SPREAD = 40.0  # util_max - util_min inside one tick above which the cell is shaded
SAWTOOTH_BG = "grey30"


SCROLL_STEP = 8  # columns a stepped graph moves at once (at most a quarter of its width)


def bin_columns(values: np.ndarray, width: int, reduce: str = "mean", *, newest: int | None = None) -> np.ndarray:
    """Squeeze a (T,) series into at most ``width`` columns, newest at the right, NaN-aware.

    All-NaN bins stay NaN (drawn blank). Written with fmin/fmax and masked sums rather than nanmean under a
    warnings filter: that filter was a tenth of the dashboard's frame cost (16 calls per frame).

    With ``newest`` (the number of the newest tick since the start, counting every tick ever appended) the
    columns are stepped: see :func:`stepped_columns`.
    """
    if newest is not None:
        return stepped_columns(values, width, newest, reduce)
    t = values.shape[0]
    if t <= width:
        return values
    k = math.ceil(t / width)
    # groups of k from the newest backwards: the rightmost column is always the newest k ticks
    start = t - (t // k) * k
    body = values[start:].reshape(-1, k)
    if reduce == "min":
        return np.asarray(np.fmin.reduce(body, axis=1))
    if reduce == "max":
        return np.asarray(np.fmax.reduce(body, axis=1))
    ok = ~np.isnan(body)
    count = ok.sum(axis=1)
    total = np.where(ok, body, 0.0).sum(axis=1)
    with np.errstate(all="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def stepped_columns(
    values: np.ndarray, width: int, newest: int, reduce: str = "mean", *, per_column: int | None = None
) -> np.ndarray:
    """``width`` columns of a graph that scrolls SCROLL_STEP columns at a time instead of one per tick.

    A graph redrawn with the newest tick always in the last column moves every cell every tick, and the
    terminal gets the whole row again (7.6 KiB/s for 2 cards). Here each tick keeps its column:
    tick number i falls in bin i // k (k ticks per column, as many as the width needs), bins are anchored to
    that count, and the newest bin advances through the last SCROLL_STEP columns; when it passes the right
    edge the picture moves left by SCROLL_STEP columns at once. Between those moves a tick changes only the
    newest column (and the oldest, as ticks leave the window). The cost: up to SCROLL_STEP - 1 columns at
    the right stay blank, and a window just wider than the graph is binned two ticks to a column a few
    columns sooner than before.

    ``per_column`` forces the ticks per column (1: the newest ticks that fit, the older ones left out).
    """
    t = values.shape[0]
    step = max(1, min(SCROLL_STEP, width // 4))
    span = width - step + 1  # columns up to the newest one, right after a move
    k = per_column or (1 if t <= span else math.ceil(t / span))
    newest_bin = newest // k
    used = span + newest_bin % step
    first_bin = newest_bin - used + 1
    pos = (newest - (t - 1) + np.arange(t)) // k - first_bin
    keep = pos >= 0
    pos, v = pos[keep], values[keep]
    ok = ~np.isnan(v)
    pos, v = pos[ok], v[ok]
    out = np.full(width, np.nan)
    if reduce == "min":
        np.fmin.at(out, pos, v)
    elif reduce == "max":
        np.fmax.at(out, pos, v)
    else:
        total = np.bincount(pos, weights=v, minlength=width)
        count = np.bincount(pos, minlength=width)
        with np.errstate(all="ignore"):
            out = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out


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


@dataclass(frozen=True, slots=True)
class WavePlan:
    """How a one-line graph of ``width`` columns shows ``t`` ticks without averaging its shape away.

    One tick a column (blocks, 8 levels) while the window fits; when it does not, braille (as nvitop's
    history graph): two dot columns a cell, 4 levels each, each dot column the mean of ``per_dot`` ticks.
    One tick a dot column keeps a sawtooth of one busy and one idle tick a sawtooth; more ticks a dot
    column keep several minutes on an 80-column card, and a cell that hides a swing of 40 points or more
    (inside a tick, or between the ticks it holds) is shaded. The plan is the finest of those drawings
    that shows at least two thirds of the window: when it cannot hold all of it, it draws the newest ticks
    it can and says so (``ticks`` < the window)."""

    braille: bool
    ticks: int  # the newest ticks drawn
    window: int  # the ticks in the window
    per_dot: int = 1  # ticks a block column (braille: a dot column) holds

    @property
    def per_cell(self) -> int:
        return self.per_dot * (2 if self.braille else 1)

    @property
    def shortened(self) -> bool:
        return self.ticks < self.window


def _span(width: int) -> int:
    """Columns (or braille samples) a stepped graph of ``width`` fills right after a move."""
    return width - max(1, min(SCROLL_STEP, width // 4)) + 1


def wave_plan(t: int, width: int) -> WavePlan:
    span = _span(width)
    if t <= span:
        return WavePlan(False, t, t)
    if 3 * span >= 2 * t:  # braille would use under three quarters of the graph: blocks over the newest ticks
        return WavePlan(False, span, t)
    dots = _span(2 * width)
    per_dot = max(1, math.ceil(t / dots))
    if per_dot > 1 and 3 * (per_dot - 1) * dots >= 2 * t:  # one tick fewer a dot still shows two thirds
        per_dot -= 1
    return WavePlan(True, min(t, per_dot * dots), t, per_dot)


def shown_ticks(plan: WavePlan, width: int, newest: int | None) -> int:
    """The ticks a graph drawn by ``plan`` holds now: the whole window, or (shortened) the newest ticks its
    stepped columns reach, which grow by one a tick between two moves (see :func:`stepped_columns`)."""
    if not plan.shortened:
        return plan.window
    slots = 2 * width if plan.braille else width
    k = plan.per_dot
    if newest is None:
        return min(plan.window, slots * k)
    step = max(1, min(SCROLL_STEP, slots // 4))
    used = slots - step + 1 + (newest // k) % step
    return min(plan.window, newest % k + 1 + (used - 1) * k)


# braille (U+2800 + bits) filled from the bottom up: 0..4 dots in the left column, in the right one
_LEFT_BITS = np.array([0, 0x40, 0x44, 0x46, 0x47])
_RIGHT_BITS = np.array([0, 0x80, 0xA0, 0xB0, 0xB8])
BRAILLE_ZERO = "⣀"  # both ticks idle: the bottom dots, dim (as "·" in the block form)


def _braille_level(v: np.ndarray) -> np.ndarray:
    safe = np.where(np.isnan(v), 0.0, v)
    level = np.clip(np.ceil(safe / 25.0), 1, 4).astype(np.intp)
    level[np.isnan(v) | (safe < 0.5)] = 0
    return level


def waveform(
    util: np.ndarray,
    width: int,
    colour: str,
    *,
    umin: np.ndarray | None = None,
    umax: np.ndarray | None = None,
    sm: np.ndarray | None = None,
    sm_colour: str | None = None,
    newest: int | None = None,
) -> Text:
    """One row of blocks on a fixed 0–100 scale, right-aligned (newest at the right; with ``newest``, the
    tick count of the last value, stepped: see :func:`stepped_columns`).

    Cells whose tick hid a fast sawtooth (min/max spread >= 40 points) get a shaded background; with
    ``sm`` and ``sm_colour`` given, cells where SMs were mostly idle (SM < util / 3) take ``sm_colour``:
    busy on paper, not busy in fact.

    A window wider than the graph is drawn as :func:`wave_plan` says: braille, one or more ticks a dot
    column, or the newest ticks that fit.
    """
    plan = wave_plan(util.shape[0], width)
    if plan.braille:
        return _braille_wave(util, width, colour, umin, umax, sm, sm_colour, newest, plan.per_dot)

    def cols(values: np.ndarray, reduce: str = "mean") -> np.ndarray:
        if not plan.shortened:
            return bin_columns(values, width, reduce, newest=newest)
        if newest is not None:
            return stepped_columns(values, width, newest, reduce, per_column=1)
        return values[-width:]

    u = cols(util)
    lo = cols(umin, "min") if umin is not None else None
    hi = cols(umax, "max") if umax is not None else None
    s = cols(sm) if sm is not None else None
    pad = " " * (width - u.shape[0])
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
    return runs_text(pad, chars, code, styles)


def _dots(values: np.ndarray, width: int, reduce: str, newest: int | None, per_dot: int) -> np.ndarray:
    """(width, 2): the two dot columns of each braille cell, oldest left, each the ``reduce`` of its
    ``per_dot`` ticks; NaN where there is none."""
    slots = 2 * width
    if newest is not None:
        out = stepped_columns(values, slots, newest, reduce, per_column=per_dot)
    else:  # groups of per_dot from the newest backwards, right-aligned
        tail = values[-slots * per_dot :]
        whole = tail.shape[0] // per_dot * per_dot
        body = tail[tail.shape[0] - whole :].reshape(-1, per_dot)
        out = np.full(slots, np.nan)
        if body.shape[0]:
            out[slots - body.shape[0] :] = _reduce_rows(body, reduce)
    return out.reshape(width, 2)


def _reduce_rows(body: np.ndarray, reduce: str) -> np.ndarray:
    if reduce == "min":
        return np.asarray(np.fmin.reduce(body, axis=1))
    if reduce == "max":
        return np.asarray(np.fmax.reduce(body, axis=1))
    return _row_mean(body)


def _row_mean(pairs: np.ndarray) -> np.ndarray:
    """Mean of each row, NaN-aware without numpy's empty-slice warning (a row with nothing: NaN)."""
    ok = ~np.isnan(pairs)
    count = ok.sum(axis=1)
    total = np.where(ok, pairs, 0.0).sum(axis=1)
    with np.errstate(all="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _braille_wave(
    util: np.ndarray,
    width: int,
    colour: str,
    umin: np.ndarray | None,
    umax: np.ndarray | None,
    sm: np.ndarray | None,
    sm_colour: str | None,
    newest: int | None,
    per_dot: int = 1,
) -> Text:
    util = np.asarray(util, dtype=float)
    u = _dots(util, width, "mean", newest, per_dot)
    left, right = _braille_level(u[:, 0]), _braille_level(u[:, 1])
    bits = _LEFT_BITS[left] | _RIGHT_BITS[right]
    chars = np.array([chr(0x2800 + int(b)) for b in bits], dtype=object)
    missing = np.isnan(u).all(axis=1)
    mean = _row_mean(u)
    zero = ~missing & (bits == 0)
    chars[zero] = BRAILLE_ZERO
    chars[missing] = " "
    code = np.zeros(width, dtype=np.intp)
    code[zero] = 1
    if sm is not None and sm_colour:
        s = _dots(np.asarray(sm, dtype=float), width, "mean", newest, per_dot)
        s_mean = _row_mean(s)
        with np.errstate(invalid="ignore"):
            idle_sm = ~zero & ~missing & ~np.isnan(s_mean) & (np.nan_to_num(mean) >= 10) & (s_mean < mean / 3)
        code[idle_sm] = 2
    # the swing a cell hides: inside a tick (the driver's min and max within it) and, with several ticks a
    # dot column, between the ticks it averages
    lo = _dots(np.asarray(umin, dtype=float), width, "min", newest, per_dot) if umin is not None else None
    hi = _dots(np.asarray(umax, dtype=float), width, "max", newest, per_dot) if umax is not None else None
    if per_dot > 1:
        u_lo, u_hi = _dots(util, width, "min", newest, per_dot), _dots(util, width, "max", newest, per_dot)
        lo = u_lo if lo is None else np.fmin(lo, u_lo)
        hi = u_hi if hi is None else np.fmax(hi, u_hi)
    if lo is not None and hi is not None:
        with np.errstate(invalid="ignore"):
            shaded = ((hi - lo) >= SAWTOOTH_SPREAD).any(axis=1)
        code += 3 * shaded
    styles = [colour, "grey42", sm_colour or colour]
    styles += [f"{st} on {SAWTOOTH_BG}" for st in styles]
    return runs_text("", chars, code, styles)


def runs_text(pad: str, chars: np.ndarray, code: np.ndarray, styles: list[str] | tuple[str, ...]) -> Text:
    """``pad`` then one cell per character, one span per run of a style code: the Text that appending each
    run would build (same plain text, same spans), made at once. Text.append per run was the graphs' main
    cost in a frame (a sawtooth makes a run of every other cell)."""
    n = chars.shape[0]
    if not n:
        return Text(pad, no_wrap=True, end="")
    start = len(pad)
    bounds = [0, *(np.flatnonzero(np.diff(code)) + 1).tolist(), n]
    spans = [Span(start + a, start + b, styles[int(code[a])]) for a, b in pairwise(bounds)]
    return Text(pad + "".join(chars.tolist()), no_wrap=True, end="", spans=spans)


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
    newest: int | None = None,
) -> list[Text]:
    """``rows`` lines of a bar graph on a fixed 0–100 scale (1/8-row resolution), newest at the right
    (stepped with ``newest``, as :func:`waveform`).

    With ``umax`` (the highest GPU-Util inside each tick), the part between the mean bar and that maximum is
    drawn as a dim ``░``: a sawtooth faster than the tick reads as "busy in bursts" rather than "half busy".
    Zero is a dim dot on the bottom row and missing data is blank, as in the one-line form. Vectorised per
    row and one span per run of a style, to keep the frame cost of a tall card close to a one-line card.
    """
    k, shortened = tall_plan(values.shape[0], width)
    if shortened:  # a window just wider than the graph: the newest ticks, one a column (the title says so)
        if newest is not None:
            u = stepped_columns(values, width, newest, per_column=1)
            hi = stepped_columns(umax, width, newest, "max", per_column=1) if umax is not None else None
        else:
            u = np.asarray(values[-width:], dtype=float)
            hi = np.asarray(umax[-width:], dtype=float) if umax is not None else None
    else:
        u = np.asarray(bin_columns(values, width, newest=newest), dtype=float)
        hi = np.asarray(bin_columns(umax, width, "max", newest=newest), dtype=float) if umax is not None else None
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
        lines.append(runs_text(pad, chars, code, (colour, "grey42")))
    return lines


def tall_plan(t: int, width: int) -> tuple[int, bool]:
    """(ticks a column of a tall graph holds, whether it shows only the newest ticks). The mean of k ticks a
    column with ░ up to their peak; but a window just wider than the graph (two ticks a column would leave
    a third of it empty, ~50 columns at 200x60) shows its newest ticks one a column instead."""
    span = _span(width)
    if t <= span:
        return 1, False
    if 2 * t < 3 * span:
        return 1, True
    return math.ceil(t / span), False


def tall_split(rows_per_card: int) -> tuple[int, int]:
    """Rows for GPU-Util and for SM activity in the tall form: util gets two thirds (it is read first)."""
    sm_rows = max(2, rows_per_card // 3)
    return rows_per_card - sm_rows, sm_rows
