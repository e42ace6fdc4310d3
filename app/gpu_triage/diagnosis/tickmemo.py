"""What the engine derives from one tick's process list, kept while the tick stays in the window.

Consecutive verdicts judge overlapping stretches: a tick stays in the look-back of a hundred verdicts, and its
process list was walked in Python at each of them (the pids per card, the workers, the busiest process: a
fifth of a verdict). A window's views share one memo (:attr:`~gpu_triage.window.WindowView.memo`), so each
list is walked once.

Keyed by the list's ``id`` with the list kept beside its value: an id is reused only once its list is gone,
and a kept list is never gone, so a lookup finds the value of that very list or nothing. A table holds at
most :data:`LIMIT` lists (more than a window's 3,600 ticks) and starts afresh past it: a miss costs the
walk, never a wrong value.
"""

from __future__ import annotations

from typing import Any

LIMIT = 8192


def table(memo: dict[Any, dict[int, tuple[Any, Any]]], name: Any) -> dict[int, tuple[Any, Any]]:
    """The memo's table for ``name`` (what is derived and from which settings), created on first use."""
    got = memo.get(name)
    if got is None:
        got = memo[name] = {}
    return got


def store(tab: dict[int, tuple[Any, Any]], key: Any, value: Any) -> None:
    """Keep ``value`` for the list ``key`` in ``tab`` (:func:`table`), bounded."""
    if len(tab) >= LIMIT:
        tab.clear()
    tab[id(key)] = (key, value)
