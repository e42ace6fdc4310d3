"""What the engine derives from one tick's process list, kept while the tick stays in the window.

Consecutive verdicts judge overlapping stretches: a tick stays in the look-back of a hundred verdicts, and its
process list was walked in Python at each of them (the pids per card, the workers, the busiest process: a
fifth of a verdict). A window's views share one memo (:attr:`~gpu_triage.window.WindowView.memo`), so each
list is walked once.

Keyed by the list's ``id`` with the list kept beside its value: an id is reused only once its list is gone,
and a kept list is never gone, so a lookup finds the value of that very list or nothing. What the memo keeps
is bounded by the window, not by the time it has run: after each walk a table that outgrew the lists just
walked (:func:`prune`) keeps only theirs, so ticks that left the window are let go; a table never holds more
than :data:`LIMIT` lists; and a memo holds at most :data:`MAX_TABLES` tables, the least recently used let go
first (a table per setting of what is derived: the children ruled out as workers change as stacks come and
go). A miss costs the walk, never a wrong value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LIMIT = 8192
MAX_TABLES = 8  # the tick features, the job's pids and cards, and a few settings of the workers' tally
SLACK = 64  # lists a table may keep beyond twice those just walked before it is pruned


def table(memo: dict[Any, dict[int, tuple[Any, Any]]], name: Any) -> dict[int, tuple[Any, Any]]:
    """The memo's table for ``name`` (what is derived and from which settings), created on first use; the
    table used longest ago is let go when a new one would make more than MAX_TABLES."""
    got = memo.pop(name, None)
    if got is None:
        got = {}
        while len(memo) >= MAX_TABLES:
            del memo[next(iter(memo))]
    memo[name] = got  # last in the dict's order: the most recently used
    return got


def store(tab: dict[int, tuple[Any, Any]], key: Any, value: Any) -> None:
    """Keep ``value`` for the list ``key`` in ``tab`` (:func:`table`), bounded."""
    if len(tab) >= LIMIT:
        tab.clear()
    tab[id(key)] = (key, value)


def prune(tab: dict[int, tuple[Any, Any]], walked: Sequence[Any]) -> None:
    """After a walk over ``walked`` (the lists in the judged stretch): once ``tab`` holds more than twice as
    many lists (plus SLACK), keep only those, so the lists of ticks gone from the window are let go."""
    if len(tab) > 2 * len(walked) + SLACK:
        live = {id(x) for x in walked}
        for k in [k for k in tab if k not in live]:
            del tab[k]
