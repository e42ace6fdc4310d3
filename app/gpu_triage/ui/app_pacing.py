"""When the dashboard draws a frame, decided by :class:`FramePacer`: ticks are ingested as they come, but the
screen (and the diagnosis that feeds it) is drawn at most once per :data:`REDRAW_MIN_S`, and several ticks
that arrive before a frame is drawn make one frame of the newest state."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

# Profile (py-spy, 0.25 s tick, 8 simulated cards): 58 % of the CPU was Textual turning pane text into terminal
# lines and 6 % the diagnosis, both once per tick; the sampler and the window append were under 10 %. A 2 s
# tick is unaffected (one frame per tick).
REDRAW_MIN_S = 1.0


class FramePacer:
    """``draw`` is the app's redraw, ``call_later`` Textual's (a callback on the app's own loop), ``loop`` the
    running event loop once the app is mounted."""

    def __init__(self, draw: Callable[[], None], call_later: Callable[[Callable[[], None]], Any],
                 loop: Callable[[], asyncio.AbstractEventLoop | None]) -> None:
        self.draw = draw
        self.call_later = call_later
        self.loop = loop
        self.min_s = REDRAW_MIN_S
        self.clock = time.monotonic  # replaceable in tests (the outside world's clock)
        self.pending = False  # a frame is on its way
        self._held = False  # ... and it waits for ``min_s`` to pass
        self._turn = 0  # the frame on its way: a held one overtaken by one at once is not drawn again
        self._last_at = -math.inf

    def schedule(self, *, throttle: bool = False) -> None:
        """A frame soon: at once, or with ``throttle`` no sooner than ``min_s`` after the last one. A frame
        wanted at once (a resize) does not wait behind a held one: it is drawn now, in its place."""
        if self.pending and (throttle or not self._held):
            return  # several ticks before one frame: draw only the newest state
        self.pending = True
        self._turn += 1
        loop = self.loop()
        wait = self._last_at + self.min_s - self.clock() if throttle else 0.0
        frame = partial(self._now, self._turn)
        self._held = wait > 0 and loop is not None
        if self._held:
            assert loop is not None
            # asyncio's timer, not Textual's: this runs in a callback from the sampler thread, outside the
            # app's context, where a Textual timer would never fire
            loop.call_later(wait, self.call_later, frame)
        else:
            self.call_later(frame)

    def _now(self, turn: int) -> None:
        if turn != self._turn:
            return  # overtaken: the frame this one was for is drawn already
        self.pending = self._held = False
        self.draw()

    def drawing(self) -> None:
        """A frame is being drawn now (the next throttled one waits ``min_s`` from here)."""
        self._last_at = self.clock()
