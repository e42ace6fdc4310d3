"""Waiting on a condition with a bound, instead of sleeping and hoping it settled: under load (xdist, a busy
CI box) a fixed sleep is too short, and when the box is idle it is time thrown away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

BOUND_S = 30.0  # what "never" means: far past any honest wait, even on a loaded 2-core box


async def wait_for(pilot: Any, cond: Callable[[], object], what: str = "", bound_s: float = BOUND_S) -> None:
    """Let a Textual app run (its messages, timers and threads' callbacks) until ``cond()`` holds; fail after
    ``bound_s`` saying what was awaited."""
    deadline = time.monotonic() + bound_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {bound_s:g} s in vain for {what or cond}")
        await pilot.pause()  # the app's pending messages
        await asyncio.sleep(0.005)  # and the other threads' turn (a sampler thread hands ticks over)


def wait_until(cond: Callable[[], object], what: str = "", bound_s: float = BOUND_S) -> None:
    """``cond()`` polled from a test's thread while other threads work; fails after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {bound_s:g} s in vain for {what or cond}")
        time.sleep(0.005)
