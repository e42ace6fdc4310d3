"""The plain-text report of ``gpu-triage diagnose``, and the durations and clocks it (and ``replay``) writes."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from pathlib import Path

from gpu_triage.diagnosis.engine import format_confidence
from gpu_triage.offline.timeline import Gap, Segment, Timeline
from gpu_triage.safetext import clean


def human_duration(seconds: float) -> str:
    """``42 s``, ``3 min 20 s``, ``3 h 12 min``, ``2 d 5 h``: what a reader takes in at a glance."""
    s = max(0.0, float(seconds))
    if s < 100:
        return f"{s:.0f} s"
    m = int(s // 60)
    if m < 60:
        return f"{m} min {int(s - 60 * m)} s" if s - 60 * m >= 1 else f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    if d >= 365:
        return f"{d} d ({d / 365.25:.1f} years)"
    return f"{d} d {h} h" if h else f"{d} d"


def _local(ts: datetime, tz: tzinfo | None) -> datetime:
    """``ts`` in ``tz``; None: this machine's local zone (what the TZ variable says)."""
    return ts.astimezone(tz) if tz is not None else ts.astimezone()


def _clock(entries: list[Segment | Gap], today: datetime | None = None, tz: tzinfo | None = UTC) -> str:
    """strftime format for the times: the date too when the recording spans days or is not from today
    (days as they fall in ``tz``; None: the local zone)."""
    if not entries:
        return "%H:%M:%S"
    return clock_format(entries[0].start, entries[-1].end, today, tz)


def clock_format(first: datetime, last: datetime, today: datetime | None = None, tz: tzinfo | None = UTC) -> str:
    """strftime format for the times of a recording from ``first`` to ``last`` (``replay`` uses it too),
    days as they fall in ``tz`` (None: the local zone)."""
    first, last = _local(first, tz), _local(last, tz)
    today = _local(today or datetime.now(UTC), tz)
    same_day = first.date() == last.date() == today.date()
    return "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"


def render_timeline(path: Path, tl: Timeline, today: datetime | None = None, tz: tzinfo | None = None) -> str:
    """The plain-text report of ``gpu-triage diagnose``: one block per segment, one line per gap. Times in
    ``tz`` (None: the local zone, ``diagnose --utc``: UTC), each named by its zone's abbreviation."""
    entries = tl.entries()
    fmt = _clock(entries, today, tz)

    def span(start: datetime, end: datetime) -> str:
        a, b = _local(start, tz), _local(end, tz)
        return f"{a:{fmt}} - {b:{fmt}} {b.tzname() or b.strftime('%z')}"

    n = len(tl.segments)
    head = f"{clean(str(path))}: {tl.ticks} ticks of {tl.interval_s:g} s, {n} segment{'' if n == 1 else 's'}"
    if tl.gaps:
        gap_s = human_duration(sum(g.seconds for g in tl.gaps))
        head += f", {len(tl.gaps)} gap{'s' if len(tl.gaps) > 1 else ''} ({gap_s})"
    if tl.stride > 1:
        head += f"; judged every {tl.stride} ticks ({human_duration(tl.stride * tl.interval_s)})"
    lines = [head]
    for e in entries:
        lines.append("")
        if isinstance(e, Gap):
            lines.append(f"— gap {human_duration(e.seconds)} — ({span(e.start, e.end)}: nothing recorded)")
            continue
        dur = human_duration((e.end - e.start).total_seconds())
        gpus = ", ".join(map(str, e.gpus)) if e.gpus else "-"
        lines.append(f"{span(e.start, e.end)} ({dur})  {e.pattern} / {e.bottleneck}  "
                     f"cards {gpus}  {format_confidence(e.confidence)}")
        if e.headroom is not None and e.headroom.kind != "none":
            lines.append(f"  = {e.headroom.line()}")
        if e.recorded_differs and e.recorded_headroom is not None:  # the file's own word, judged then
            lines.append(f"  = recorded then: {e.recorded_headroom.line()}")
        lines.extend(f"  - {x}" for x in e.evidence)
        lines.extend(f"  > {x}" for x in e.advice)
    return "\n".join(lines)
