"""Feeds: where the dashboard's ticks come from. No Textual here, so the same logic is testable headless.

* :class:`LiveFeed` wraps the :class:`~gpu_triage.sampler.Sampler` thread around any source (live NVML,
  simulated): ticks arrive on the sampler thread and are handed to ``on_tick`` (the app moves them to the
  UI thread).
* :class:`ReplayFeed` plays a recording: it owns a *position* (tick index), play/pause, speed, stepping
  and seeking. On a seek the dashboard rebuilds its window from :meth:`ReplayFeed.window_ticks` (the ticks
  of the window ending at the position); on a normal step it ingests one tick, exactly as live does. A gap in
  the recording (the offline diagnosis's definition) ends the window: the first tick after it starts a
  new one, as a seek does.

The dashboard's recorder is :class:`gpu_triage.recording.background.Recorder`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, Tick
from gpu_triage.sampler import Sampler
from gpu_triage.sources.base import Source, SourceStatus
from gpu_triage.window import MAX_WINDOW_TICKS

if TYPE_CHECKING:
    from gpu_triage.offline.timeline import Gap

log = logging.getLogger(__name__)

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


class TraceLike(Protocol):
    """What the replay needs of a recording (the contract of gpu_triage.trace.reader.TraceFile)."""

    @property
    def n(self) -> int: ...

    host: HostInfo
    interval_s: float
    timestamps: np.ndarray

    def tick(self, i: int) -> Tick: ...

    def ticks(self, start: int, stop: int) -> list[Tick]: ...


def open_replay(path: str | Path) -> TraceLike:
    """Open a recording for replay; a bad file raises UserError (one line) before any screen appears."""
    # No existence check of our own here: open_trace also finds FILE.partial.arrows when a recorder was
    # killed (README: "`gpu-triage replay FILE` finds FILE.partial.arrows"); a check here refused that.
    from gpu_triage.trace.reader import (
        open_trace,  # pyarrow: loaded for replay only, never for live
    )

    return open_trace(path)  # expands ~ itself, after refusing an empty name


class ReplayFeed:
    """Playback state over a recording. Pure state: the app's timer calls :meth:`advance`.

    ``position`` is the index of the newest tick shown. Positions are clamped to the recording, except in
    ``loop`` mode (the demo), where playing past the end starts again from the beginning.
    """

    def __init__(
        self, trace: TraceLike, window_ticks: int, *, speed: float = 1.0, loop: bool = False, from_start: bool = False
    ) -> None:
        if trace.n < 1:
            raise UserError("the recording holds no ticks")
        self.trace = trace
        # never more than a live window may hold: the window is read back tick by tick on every seek
        self.window_ticks = min(MAX_WINDOW_TICKS, max(1, window_ticks))
        # The ticks that begin a stretch after a gap, by the offline diagnosis's definition (pyarrow is
        # loaded for replay anyway; live never imports it): the window never reaches back across a gap.
        from gpu_triage.offline.judge import stretch_starts

        ts = np.asarray(trace.timestamps, dtype=float)
        self.gap_starts, self.interval_s = stretch_starts(ts, trace.interval_s)  # the interval diagnose trusts
        self.loop = loop
        self.playing = True
        self.speed = speed
        # start with a full window already drawn where the recording is longer than one; ``from_start`` (the
        # demo) plays from the first tick instead, so that every case is seen. A recording no longer than the
        # window plays from its first tick too: started on its last, it would open paused with nothing to play
        short = trace.n <= self.window_ticks
        self.position = 0 if from_start or short else self.window_ticks - 1

    # -- what to show --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.trace.n

    def window_ticks_at_position(self) -> list[Tick]:
        """The ticks of the window that ends at the position (oldest first), none from before a gap."""
        start = max(0, self.position - self.window_ticks + 1, self.stretch_start())
        return self.trace.ticks(start, self.position + 1)

    def stretch_start(self, index: int | None = None) -> int:
        """The first tick of the stretch between gaps that holds ``index`` (default: the position)."""
        i = self.position if index is None else index
        k = int(np.searchsorted(self.gap_starts, i, side="right"))
        return int(self.gap_starts[k - 1]) if k else 0

    @property
    def at_gap(self) -> bool:
        """The position is the first tick after a gap: the window starts afresh there."""
        return self.position > 0 and self.stretch_start() == self.position

    def gap_before(self, index: int | None = None) -> Gap | None:
        """The gap just before the stretch that holds ``index`` (default: the position); None without one.

        It runs from the end of the last tick before it to the start of the first tick after it (its end
        less one interval), as ``diagnose`` prints it."""
        from gpu_triage.offline.timeline import Gap

        first = self.stretch_start(index)
        if first == 0:
            return None
        ts = self.trace.timestamps
        start = datetime.fromtimestamp(float(ts[first - 1]), UTC)
        end = datetime.fromtimestamp(max(float(ts[first]) - self.interval_s, float(ts[first - 1])), UTC)
        return Gap(start, end)

    def current_time(self) -> datetime:
        return self.trace.tick(self.position).ts

    @property
    def tick_interval_s(self) -> float:
        """Wall seconds between two ticks at the current speed."""
        return max(0.02, self.trace.interval_s / self.speed)

    # -- controls: each returns True when the window must be rebuilt (a seek), False otherwise ---------
    def toggle(self) -> None:
        self.playing = not self.playing

    def advance(self) -> Tick | None:
        """One playback step: the next tick to ingest, or None at the end (then playback pauses)."""
        if self.position + 1 < self.trace.n:
            self.position += 1
            return self.trace.tick(self.position)
        if self.loop:
            return None  # caller seeks to start (a rebuild), see App
        self.playing = False
        return None

    def step(self, delta: int) -> bool:
        return self._seek(self.position + delta)

    def jump(self, seconds: float) -> bool:
        target_t = self.trace.timestamps[self.position] + seconds
        ts = self.trace.timestamps
        idx = int(np.searchsorted(ts, target_t))
        # the tick nearest the target (tick times jitter by milliseconds around the nominal interval)
        if idx > 0 and (idx >= len(ts) or abs(ts[idx - 1] - target_t) <= abs(ts[idx] - target_t)):
            idx -= 1
        if seconds > 0 and idx <= self.position:
            idx = self.position + 1
        elif seconds < 0 and idx >= self.position:
            idx = self.position - 1
        return self._seek(idx)

    def seek_start(self) -> bool:
        return self._seek(0)

    def seek_end(self) -> bool:
        return self._seek(self.trace.n - 1)

    def faster(self) -> None:
        self.speed = next((s for s in SPEEDS if s > self.speed + 1e-9), SPEEDS[-1])

    def slower(self) -> None:
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed - 1e-9), SPEEDS[0])

    def _seek(self, index: int) -> bool:
        index = min(max(0, index), self.trace.n - 1)
        changed = index != self.position
        self.position = index
        return changed


FIRST_TICK_S = 0.5  # the screen gets its first data half a second after start, whatever the interval


class LiveFeed:
    """A source sampled on the sampler thread; ``on_tick`` is called there with each tick."""

    def __init__(
        self,
        source: Source,
        interval_s: float,
        on_tick: Callable[[Tick], None],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self.sampler = Sampler(source, interval_s, on_tick, on_error, first_after_s=FIRST_TICK_S)

    def host_info(self) -> HostInfo:
        return self.source.host_info()

    def status(self) -> SourceStatus:
        return self.source.status()

    def start(self) -> None:
        self.sampler.start()

    def stop(self) -> None:
        self.sampler.stop()
        self.source.close()
