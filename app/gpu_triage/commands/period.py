"""``--since`` / ``--until`` of ``diagnose DIR --summary``: a date, a date and time, or an age, read as one
person types them; a value that is none of these is one line saying what to give."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from gpu_triage.errors import UserError
from gpu_triage.safetext import clip

_AGE = re.compile(r"^(\d{1,6}(?:\.\d{1,3})?)\s*(w|d|h|m|min|s)$")
_UNITS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0}
EXAMPLES = ("give a date (2026-01-05), a date and time ('2026-01-05 09:00', this machine's zone unless it names "
            "one or --utc is given), or an age (7d, 12h, 30m)")


def parse_when(option: str, text: str, now: datetime, zone: tzinfo | None) -> datetime:
    """``text`` as an aware datetime: an age is before ``now``; a date or time without a zone is in ``zone``
    (None: this machine's)."""
    raw = text.strip()
    age = _AGE.match(raw.lower())
    if age:
        try:
            then = now - timedelta(seconds=float(age.group(1)) * _UNITS[age.group(2)])
        except OverflowError:  # an age reaching before year 1
            then = datetime(1, 1, 1, tzinfo=UTC)
        if then.year < 1970:
            raise UserError(f"{option} {clip(text, 40)!r}: reaches before 1970, when no recording was made: "
                            "give a shorter age")
        return then
    try:
        when = datetime.fromisoformat(raw.replace("z", "Z")) if raw else None
    except ValueError:
        when = None
    if when is None or not 1970 <= when.year <= 2200:
        raise UserError(f"{option} {clip(text, 40)!r}: not a time: {EXAMPLES}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone) if zone is not None else when.astimezone()
    return when.astimezone(UTC)


def period(since: str | None, until: str | None, *, utc: bool = False,
           now: datetime | None = None) -> tuple[datetime | None, datetime | None]:
    """The ``[since, until)`` the options ask for (None: open); since not before until is one line too."""
    now = now or datetime.now(UTC)
    zone = UTC if utc else None
    lo = None if since is None else parse_when("--since", since, now, zone)
    hi = None if until is None else parse_when("--until", until, now, zone)
    if lo is not None and hi is not None and lo >= hi:
        raise UserError(f"--since {clip(since, 40)!r} is not before --until {clip(until, 40)!r}: give an earlier "
                        "--since or a later --until")
    return lo, hi
