"""The fleet view as plain text and JSON: the cells of the table (the screen and ``--once`` draw the same
ones), a host's detail lines, and the ``--json`` document. Missing figures are "n/a", never 0."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from gpu_triage.diagnosis.knobs import knob
from gpu_triage.diagnosis.verdict import confidence_word
from gpu_triage.fleet_live.client import FleetSnapshot
from gpu_triage.fleet_live.model import OK, Card, HostRow
from gpu_triage.fleet_live.samples import MAX_HOSTS
from gpu_triage.units import short_bytes

NA = "n/a"
# (title, width) of the table's columns; PATTERN only where the screen is wide enough, OWNER takes the rest
COLUMNS: tuple[tuple[str, int], ...] = (
    ("HOST", 18),
    ("STATE", 5),
    ("BOTTLENECK", 15),
    ("PATTERN", 16),
    ("CONF", 8),
    ("BUSY", 5),
    ("UTIL", 4),
    ("GPU-H LOST", 10),
    ("SAMPLES/S", 9),
    ("OWNER", 8),
)
NARROW_DROPS = ("PATTERN", "SAMPLES/S")  # left out under WIDE_COLUMNS terminal columns (the ranking's figure stays)
WIDE_COLUMNS = 110
OWNER_MAX = 40


def columns(width: int, gap: int = 1) -> list[tuple[str, int]]:
    """The columns that fit ``width`` with ``gap`` spaces after each; the owner gets what is left."""
    cols = [c for c in COLUMNS if width >= WIDE_COLUMNS or c[0] not in NARROW_DROPS]
    used = sum(w + gap for _, w in cols[:-1]) + gap + 2  # 2: the table's scrollbar and edge
    title, least = cols[-1]
    return [*cols[:-1], (title, max(least, min(OWNER_MAX, width - used)))]


def pct(v: float | None) -> str:
    return NA if v is None else f"{v * 100:.0f}%"


def rate(v: float | None) -> str:
    if v is None:
        return NA
    if v >= 1e6:
        return f"{v / 1e6:.1f}M"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v:.1f}"


def hours(v: float | None) -> str:
    if v is None:
        return NA
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def cells(row: HostRow) -> dict[str, str]:
    """Each column's text for one row (already clean: every outside string went through safetext.clip)."""
    down = row.state != OK
    return {
        "HOST": row.host,
        "STATE": row.state,
        "BOTTLENECK": "—" if down else (row.bottleneck or NA),
        "PATTERN": "—" if down else (row.pattern or NA),
        "CONF": "—" if down else confidence_word(row.confidence),
        "BUSY": "—" if down else (NA if row.busy is None else f"{row.busy}/{row.total}"),
        "UTIL": "—" if down else pct(row.util),
        "GPU-H LOST": "—" if down else hours(row.gpu_hours_lost),
        "SAMPLES/S": "—" if down else rate(row.samples_per_s),
        "OWNER": row.owner or "—",
    }


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def age(seconds: float | None) -> str:
    if seconds is None:
        return NA
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def summary_line(snap: FleetSnapshot, now: float | None = None) -> str:
    now = time.time() if now is None else now
    parts = [f"{len(snap.rows)} hosts", f"{snap.attention} need a look", f"{snap.down} down or stale"]
    if snap.waiting:
        parts.append(f"{snap.waiting} not answered yet")
    if snap.left_out:
        parts.append(f"{snap.left_out} more hosts left out (at most {MAX_HOSTS} are shown: narrow with --match)")
    parts.append("updated " + (f"{age(max(0.0, now - snap.updated))} ago" if snap.updated else "never"))
    return f"{snap.source}: " + ", ".join(parts)


def table(snap: FleetSnapshot, width: int = 120) -> str:
    """``--once``: a summary line, the error line if any, then the table in the view's order."""
    cols = columns(width, gap=2)
    lines = [summary_line(snap)]
    if snap.error:
        lines.append(f"error: {snap.error}")
    lines.append("  ".join(fit(t, w).ljust(w) for t, w in cols).rstrip())
    for row in snap.rows:
        c = cells(row)
        lines.append("  ".join(fit(c[t], w).ljust(w) for t, w in cols).rstrip())
        if row.state != OK and row.error:
            lines.append(f"  └ {row.error}")
    return "\n".join(lines) + "\n"


def detail_lines(row: HostRow) -> list[str]:
    """The host's detail: the verdict, the host, then one line per card."""
    names = dict.fromkeys(n for n in (row.hostname, row.address) if n)  # each once, in that order
    lines = ["   ".join([*names, *([f"job {row.job}"] if row.job else []), row.state])]
    if row.error:
        lines.append(f"  {row.error}")
    if row.state == OK or row.pattern:
        lines.append(
            f"verdict: {row.pattern or NA} / bottleneck {row.bottleneck or NA}"
            f" on cards {row.verdict_cards or NA}, confidence {confidence_word(row.confidence)},"
            f" for {age(row.verdict_age_s)}"
        )
        lines.append("  evidence: not in the metrics (`gpu-triage` on that host shows it)")
    lines.append(
        f"host: CPU {pct(row.cpu_busy)} busy, iowait {pct(row.iowait)}, samples/s {rate(row.samples_per_s)}, "
        f"newest tick {age(row.tick_age_s)} old"
        + ("" if row.driver is not False else ", no GPU driver (host only)")
    )
    if row.gpu_hours_lost is not None:
        top = f", most to {row.lost_bottleneck}: {knob(row.lost_bottleneck)}" if row.lost_bottleneck else ""
        lines.append(f"GPU-hours lost {row.lost_range}: {hours(row.gpu_hours_lost)}{top}")
    elif row.lost_range is not None:  # the counter is served, and no covered card read GPU-Util
        lines.append(f"GPU-hours lost {row.lost_range}: {NA} (the cards its verdicts covered read no GPU-Util)")
    if row.owners:
        lines.append("owner: " + ", ".join(row.owners))
    for note in row.notes:
        lines.append(f"note: {note}")
    if row.cards:
        lines.append("")
        lines.append(f"{'GPU':>3}  {'UTIL':>4}  {'SM':>4}  {'MEMORY':>13}  {'POWER':>6}  {'TEMP':>5}  NAME / NOTES")
    lines += [_card_line(c) for c in row.cards]
    return lines


def _card_line(c: Card) -> str:
    """One card of the detail: its figures, name and what is wrong with it (throttles, ECC, XIDs)."""
    if c.lost:
        return f"{c.index:>3}  lost: NVML says the card fell off the bus"
    mem = f"{short_bytes(c.mem_used)}/{short_bytes(c.mem_total)}"
    power = NA if c.power_w is None else f"{c.power_w:.0f} W"
    temp = NA if c.temp_c is None else f"{c.temp_c:.0f} °C"
    notes = []
    if c.throttles:
        notes.append("throttled: " + ",".join(c.throttles))
    if c.ecc_uncorrected:
        notes.append(f"ECC uncorrected {c.ecc_uncorrected:.0f}")
    if c.xid:
        notes.append(f"XID events {c.xid:.0f}")
    name = (c.name or "") + ("   " + "; ".join(notes) if notes else "")
    return f"{c.index:>3}  {pct(c.util):>4}  {pct(c.sm_active):>4}  {mem:>13}  {power:>6}  {temp:>5}  {name}".rstrip()


def to_json(snap: FleetSnapshot) -> dict[str, Any]:
    """``--json``: the rows in the view's order, each field as in :class:`~.model.HostRow` (null = n/a)."""
    return {
        "source": snap.source,
        "updated": snap.updated,
        "error": snap.error,
        "waiting": snap.waiting,
        "left_out": snap.left_out,  # hosts past the cap (samples.MAX_HOSTS), not in "hosts"
        "hosts": [{**dataclasses.asdict(r), "confidence_word": confidence_word(r.confidence)} for r in snap.rows],
    }
