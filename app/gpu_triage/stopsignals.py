"""SIGINT/SIGTERM/SIGHUP as a stop event, for the headless commands (`record`, `export`).

Its own module (standard library only) so that `export` without ``--record`` does not import the recorder,
and with it pyarrow (~35 MB of RSS, docs/performance.md).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

#: How long a headless command's main thread waits for its stop event at most before looking again. A signal
#: sent to the process (kill, systemd's SIGTERM) may be delivered to any of its threads: Python runs the handler
#: in the main thread, but only the thread that took the signal has its wait interrupted, so a main thread
#: asleep for a minute stopped a minute late (seen: export with its metrics and sampler threads, SIGTERM after
#: a burst of clients, about one stop in fifteen). Two wake-ups a second cost nothing measurable.
WAKE_S = 0.5


class StopSignals:
    """Turn SIGINT/SIGTERM/SIGHUP into an event for the duration of a recording (or `export`), then restore."""

    SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)

    def __init__(self, stop: threading.Event) -> None:
        self.event = stop
        self._previous: dict[int, Any] = {}
        self.received: str | None = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name
        self.event.set()

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
