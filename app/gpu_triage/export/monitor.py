"""The headless twin of the dashboard's diagnosis: window → engine → tracker, one verdict per tick.

:class:`Monitor` is fed ticks (from the sampler thread) and after each one publishes a new immutable
:class:`Snapshot`: the tick, the source status (lost cards), the shown verdict and when it began. The
scrape thread only reads ``monitor.snapshot`` (one reference, swapped whole), so a scrape always sees one
tick and the verdict of that same tick, never a mix of two.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_triage.config import Config
from gpu_triage.diagnosis.engine import Verdict, diagnose
from gpu_triage.diagnosis.tracker import VerdictTracker
from gpu_triage.model import HostInfo, Tick
from gpu_triage.sources.base import Source, SourceStatus
from gpu_triage.window import RollingWindow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape reports. ``verdict_since`` and ``tick_time`` are seconds since the epoch (tick time)."""

    host: HostInfo
    source: str
    tick: Tick | None = None
    ticks: int = 0
    gpu_available: bool = True
    lost_gpus: frozenset[int] = field(default_factory=frozenset)
    verdict: Verdict | None = None
    verdict_since: float | None = None
    tick_time: float | None = None


class Monitor:
    """Window, engine and tracker as the dashboard runs them, without a screen. Thread-safe ``ingest``."""

    def __init__(self, host: HostInfo, config: Config, source_name: str) -> None:
        self.config = config
        self.host = host
        self._window = RollingWindow(config.window_ticks)
        self._tracker = VerdictTracker(config.thresholds)
        self._lock = threading.Lock()
        self.snapshot = Snapshot(host=host, source=source_name)

    def ingest(self, tick: Tick, status: SourceStatus | None = None) -> Snapshot:
        """Add one tick, diagnose, publish and return the new snapshot."""
        with self._lock:
            prev = self.snapshot
            self._window.append(tick)
            t = tick.ts.timestamp()
            verdict: Verdict | None
            try:
                view = self._window.view()
                raw = diagnose(view, self.config.thresholds, self.host.cpu_count)
                verdict = self._tracker.update(t, raw, view)
            except Exception:  # a diagnosis bug must not stop the metrics; it is logged with its traceback
                log.exception("diagnosis failed at %s; the verdict is not exported for this tick", tick.ts)
                verdict = None
            since = prev.verdict_since
            if verdict is None:
                since = None
            elif prev.verdict is None or prev.verdict.key != verdict.key or since is None:
                since = t
            status = status or SourceStatus()
            self.snapshot = Snapshot(
                host=self.host,
                source=prev.source,
                tick=tick,
                ticks=prev.ticks + 1,
                gpu_available=status.gpu_available,
                lost_gpus=frozenset(status.lost_gpus),
                verdict=verdict,
                verdict_since=since,
                tick_time=t,
            )
            return self.snapshot


class TappedSource:
    """A source that also hands each tick (and the source's status) to ``tap``: how ``live --metrics``
    feeds the exporter's monitor from the dashboard's own sampler, so both see the same ticks."""

    def __init__(self, inner: Source, tap: Callable[[Tick, SourceStatus], object]) -> None:
        self._inner = inner
        self._tap = tap
        self.name = inner.name

    def host_info(self) -> HostInfo:
        return self._inner.host_info()

    def sample(self) -> Tick:
        tick = self._inner.sample()
        try:
            self._tap(tick, self._inner.status())
        except Exception:  # the metrics must never cost the dashboard its tick; logged with the traceback
            log.exception("metrics: the tick of %s was not exported", tick.ts)
        return tick

    def status(self) -> SourceStatus:
        return self._inner.status()

    def close(self) -> None:
        self._inner.close()
