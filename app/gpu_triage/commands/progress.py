"""Progress of a long headless command on stderr (``diagnose``, ``compare``, ``diagnose DIR --summary``): a
callback ``(done, total)`` handed to the domain code, which knows nothing of terminals."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def terminal_progress(label: str, stream: Any = None, unit: str = "ticks") -> Callable[[int, int], None] | None:
    """A progress line updated in place on stderr when it is a terminal; None (silent) otherwise. ``unit``: what
    ``done`` and ``total`` count."""
    out = stream if stream is not None else sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        out.write(f"\r{label}: {done}/{total} {unit} ({100 * done // max(total, 1)} %)" + end)
        out.flush()

    return show


def progress_reporter(
    label: str, force: bool = False, stream: Any = None, unit: str = "ticks"
) -> Callable[[int, int], None] | None:
    """Progress on stderr: in place on a terminal; with ``force`` (``--progress``) also when stderr is a
    pipe or a file, then as whole lines at most every 10 % (a log stays readable)."""
    tty = terminal_progress(label, stream, unit)
    if tty is not None or not force:
        return tty
    out = stream if stream is not None else sys.stderr
    last = [-1]

    def lines(done: int, total: int) -> None:
        pct = 100 * done // max(total, 1)
        if pct // 10 > last[0] or done >= total:
            last[0] = pct // 10
            out.write(f"{label}: {done}/{total} {unit} ({pct} %)\n")
            out.flush()

    return lines
