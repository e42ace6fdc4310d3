"""The sampler: a daemon thread that calls ``source.sample()`` once per interval, off the UI thread.

Its cost depends only on the interval and the source, never on how often the UI redraws. Ticks are handed
to ``on_tick`` from the sampler thread: the receiver must hand them over to its own thread (the Textual
app uses ``call_from_thread``; the headless recorder writes directly).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpu_triage.logs import SHOWN
from gpu_triage.model import Tick
from gpu_triage.sources.base import Source

log = logging.getLogger(__name__)


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
        self._last_error: str | None = None

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
            try:
                tick = self.source.sample()
                self._last_error = None
            except Exception as exc:  # noqa: BLE001 - a source error must not kill the loop: reported, sampling goes on
                self._log_source_error(exc)
                self._report(exc)
                tick = None
            if tick is not None and not self._stop.is_set():
                self.ticks += 1
                try:
                    self._on_tick(tick)
                except Exception as exc:
                    log.exception("the tick receiver failed")
                    self._report(exc)
            next_at += self.interval_s
            now = self._clock()
            if next_at < now:  # fell behind (machine suspended, slow driver): skip, don't burst
                next_at = now + self.interval_s

    def _log_source_error(self, exc: BaseException) -> None:
        """A warning when the error is new, debug while the same one repeats (a source that fails every
        tick would fill the log with one line per interval). ``on_error`` shows it to the user (stderr or
        the screen), so the warning is not printed a second time on stderr."""
        text = f"{type(exc).__name__}: {exc}"
        level = logging.DEBUG if text == self._last_error else logging.WARNING
        self._last_error = text
        name = getattr(self.source, "name", "?")
        log.log(level, "source %s failed to sample: %s", name, text, extra=SHOWN if self._on_error else None)

    def _report(self, exc: BaseException) -> None:
        """Hand an error to ``on_error``; an error in that callback is logged, never raised into the loop.

        Why: an ``on_error`` that raised (a keyword that ``call_soon_threadsafe`` does not take, say) would
        escape the loop, end the thread and silently stop the dashboard updating."""
        if self._on_error is None:
            return
        try:
            self._on_error(exc)
        except Exception:
            log.exception("the error receiver failed while reporting %r", exc)
