"""Small formatters of the panes: percentages, rates, sizes, counts and titles that fit a width; None or NaN
is "n/a", never 0."""

from __future__ import annotations

import math
import warnings
from datetime import datetime
from typing import Any

import numpy as np
from rich.text import Text

from gpu_triage.model import throttle_names
from gpu_triage.safetext import clean_lines, is_clean
from gpu_triage.units import fmt_pct, short_bytes  # the dashboard's compact formatters (units.py)


def ok(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def pct(v: float | None, width: int = 4) -> str:
    return fmt_pct(v if ok(v) else None, width)


def rate(v: float | None) -> str:
    return short_bytes(v, suffix="/s") if ok(v) else "n/a"


def last(a: np.ndarray) -> float:
    return float(a[-1]) if a.size else float("nan")


def nan_sum(*vals: float) -> float:
    ok = [v for v in vals if not math.isnan(v)]
    return float(sum(ok)) if ok else float("nan")


class quiet_nan_warnings:
    """Silence numpy's 'mean of empty slice' warning for all-NaN bins (they stay NaN: drawn blank)."""

    def __enter__(self) -> None:
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(None, None, None)


def used_of_total(used: float, total: float) -> str:
    """``87G/2.0T``; a single ``n/a`` when the host reports neither (not ``n/a/n/a``)."""
    if not ok(used) and not ok(total):
        return "n/a"
    return f"{short_bytes(used)}/{short_bytes(total)}"


NA_ON_CARD = "n/a on this card"
# the SM row of a card without GPM, longest first: a cut "SM activity n/a on this car" read as a glitch
SM_NA_TEXTS = ("SM activity n/a on this card (no GPM)", "SM activity n/a (no GPM)", "SM n/a (no GPM)", "SM n/a", "n/a")


def longest_fitting(texts: tuple[str, ...], width: int) -> str:
    return next((t for t in texts if len(t) <= width), texts[-1][:width])


CLOCK_SWING = 0.05  # a clock that moved more than this share of its top in the window is not "steady"


def fit_title(title: str | tuple[str, ...], width: int, *, missing: bool) -> str:
    """A chart title that fits ``width`` columns.

    plotext silently drops a title wider than its plot: on an 80-column screen the detail charts lost their
    titles, and with them the "n/a on this card" that is the only sign an empty box means "not reported".
    When the chart has no data the n/a goes first so that it survives the cut.
    """
    variants = (title,) if isinstance(title, str) else title
    texts = [f"{NA_ON_CARD}: {t}" if missing else t for t in variants]
    text = next((t for t in texts if len(t) <= width), texts[-1])  # the longest form that fits, whole
    if width <= 0 or len(text) <= width:
        return text
    return text[: max(1, width - 1)] + "…"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """y-axis ticks at round steps (1, 2, 2.5 or 5 times a power of ten) covering [lo, hi], about ``count``
    of them: plotext's own split of the range gave 16.7 / 83.3 on a 0-100 axis."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [round(lo, 6)]
    raw = (hi - lo) / max(1, count - 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * mag >= raw)
    first = math.floor(lo / step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            out.append(round(v, 6))
        v += step
    return out


def tick_label(v: float) -> str:
    """A tick's label without the float noise ("25", "2.5", "0.25")."""
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:g}"


RATE_UNITS = ((1 << 30, "GiB/s"), (1 << 20, "MiB/s"), (1 << 10, "KiB/s"), (1, "B/s"))


def rate_unit(peak_bytes_per_s: float) -> tuple[float, str]:
    """The unit a chart of rates reads best in, from its peak: NVLink at 68 GB/s in GiB/s, not 69611.3 MiB/s."""
    if not math.isfinite(peak_bytes_per_s):
        return float(1 << 20), "MiB/s"
    return next(((d, u) for d, u in RATE_UNITS if peak_bytes_per_s >= d), RATE_UNITS[-1])


def slowdown_note(masks: np.ndarray, clock_mhz: np.ndarray | None = None) -> str:
    """For the detail view's clock chart: how much of the window each slowdown reason held the card's clocks
    down (" · slowed by power 100 % of the window"), from the ticks whose ``clock_event_reasons`` the card
    reported; "" when it reported none (n/a, not "never"). Idle and the other non-slowing reasons do not
    count (model.THROTTLE_MASK)."""
    seen = masks[~np.isnan(masks)]
    if not seen.size:
        return ""
    counts: dict[str, int] = {}
    for mask in seen.astype(np.int64).tolist():
        for name in throttle_names(mask) or []:
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        if clock_mhz is not None and not np.all(np.isnan(clock_mhz)):
            lo, hi = float(np.nanmin(clock_mhz)), float(np.nanmax(clock_mhz))
            if hi > 0 and (hi - lo) / hi >= CLOCK_SWING:
                # the driver names no reason, yet the clock moved: say both, claim nothing
                return f" · no slowdown reason reported, clock {lo:.0f}–{hi:.0f} MHz"
        return " · no slowdown reason in the window"
    parts = ", ".join(f"{name} {100.0 * n / seen.size:.0f} %"
                      for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f" · slowed by {parts} of the window"


def xid_text(count: float, code: float) -> str:
    """The card's critical XID events: "XID 79", "XID 79 ×3" ("XID" when the code is unknown)."""
    xid = f"XID {code:.0f}" if ok(code) else "XID"
    return xid if count == 1 else f"{xid} ×{count:.0f}"


def health_note(ecc_uncorrected: np.ndarray, xid_count: np.ndarray, xid_last: np.ndarray) -> str:
    """For the detail view's power chart: the card's uncorrected ECC errors and its XID events now
    (" · ECC uncorrected 0, no XID"); what the card does not report is left out, never shown as 0."""
    parts = []
    unc, n, code = last(ecc_uncorrected), last(xid_count), last(xid_last)
    if ok(unc):
        parts.append(f"ECC uncorrected {unc:.0f}")
    if ok(n):
        parts.append("no XID" if n == 0 else xid_text(n, code))
    return " · " + ", ".join(parts) if parts else ""


def num(v: float) -> str:
    return f"{v:.0f}" if ok(v) else "n/a"


def wall_clock(ts: float) -> datetime:
    """A tick's time in the local zone (the machine's TZ; ``TZ=UTC`` asks for UTC): an ops engineer reads
    the detail view against their own clock and logs, not against UTC."""
    return datetime.fromtimestamp(ts).astimezone()


def zone_name(ts: float) -> str:
    """The zone's short name at that time ("CET", "UTC"), said next to every clock time shown."""
    return wall_clock(ts).tzname() or "local time"


def safe_text(text: Text) -> Text:
    """``text`` as drawn: control and undecodable characters made visible (gpu_triage.safetext), its own
    line breaks and styles kept (each replaced character is replaced by exactly one, so the spans fit)."""
    plain = text.plain
    if is_clean(plain):
        return text
    out = text.copy()
    out.plain = clean_lines(plain)
    return out
