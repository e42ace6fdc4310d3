"""The sampler: a daemon thread that calls ``source.sample()`` once per interval, off the UI thread.

Its cost depends only on the interval and the source, never on how often the UI redraws. Ticks are handed
to ``on_tick`` from the sampler thread: the receiver must hand them over to its own thread (the Textual
app uses ``call_from_thread``; the headless recorder writes directly).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gpu_triage.model import Tick
from gpu_triage.sources.base import Source


class Sampler:
    def __init__(
        self,
        source: Source,
        interval_s: float,
        on_tick: Callable[[Tick], None],
        on_error: Callable[[BaseException], None] | None = None,
        *,
        first_after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self.source = source
        self.interval_s = interval_s
        self._on_tick = on_tick
        self._on_error = on_error
        self._clock = clock
        # the first tick may come sooner than a whole interval, so a screen has data at once
        self._first_after_s = interval_s if first_after_s is None else max(0.0, min(first_after_s, interval_s))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.busy_s = 0.0  # time spent inside source.sample(), for the overhead figures

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpu-triage-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        next_at = self._clock() + self._first_after_s
        while not self._stop.wait(max(0.0, next_at - self._clock())):
            began = self._clock()
            try:
                tick = self.source.sample()
            except Exception as exc:  # a source error must not kill the loop silently
                if self._on_error is not None:
                    self._on_error(exc)
                tick = None
            self.busy_s += self._clock() - began
            if tick is not None and not self._stop.is_set():
                self.ticks += 1
                self._on_tick(tick)
            next_at += self.interval_s
            now = self._clock()
            if next_at < now:  # fell behind (machine suspended, slow driver): skip, don't burst
                next_at = now + self.interval_s
