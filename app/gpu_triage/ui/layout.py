"""Size planning: how many lines each pane of the main screen gets, and the smallest terminal a screen needs.

Pure functions of sizes (no widgets), so the rules for what fits 80×24 and what a 200×60 terminal gains are
testable on their own.
"""

from __future__ import annotations

# The smallest terminals on which a screen is still readable. Below them the screen says so instead of
# drawing garbled charts (issue #9: at 40x10 the detail and doctor screens were unreadable).
DETAIL_MIN_SIZE = (60, 16)  # six plotext charts in a 2x3 grid: each needs ~30x5 to show an axis and a line
DOCTOR_MIN_SIZE = (60, 12)  # the doctor's table wraps below 60 columns into one word a line


def too_small(size: tuple[int, int], need: tuple[int, int]) -> str | None:
    """The line a screen shows instead of itself when the terminal is smaller than ``need``; else None."""
    width, height = size
    if width >= need[0] and height >= need[1]:
        return None
    return f"terminal too small (need {need[0]}x{need[1]}, have {width}x{height}): enlarge it, or Esc back"
