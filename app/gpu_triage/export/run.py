""":class:`Exporter`: the metrics server over a sampled source, which ``gpu-triage export`` (its handler is
:mod:`gpu_triage.commands.export`) and ``live --metrics`` share, so an SSH session and Prometheus read the
same engine's numbers. Closing it stops accepting and gives the answers being written a bounded grace."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gpu_triage.config import Config
from gpu_triage.export.collector import RecordingCollector, TriageCollector
from gpu_triage.export.monitor import Monitor
from gpu_triage.export.server import MetricsServer
from gpu_triage.export.webconfig import WebConfig
from gpu_triage.sources.base import Source

log = logging.getLogger(__name__)


class Exporter:
    """A bound metrics server and, once :meth:`attach` is called, the monitor it reports."""

    def __init__(
        self, listen: str, config: Config, *, pid_labels: bool = False, web: WebConfig | None = None
    ) -> None:
        self.config = config
        self.monitor: Monitor | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)  # the exporter's own CPU and memory, for its cost
        self.registry.register(TriageCollector(self._snapshot, pid_labels=pid_labels))
        self._recording_up: Callable[[], bool] | None = None
        # the page is rendered once per tick (and per format) however many scrape it: see .server
        self.server = MetricsServer(listen, self.registry, generation=self._generation, web=web)

    def _snapshot(self) -> Any:
        return None if self.monitor is None else self.monitor.snapshot

    def _generation(self) -> object:
        snap = self._snapshot()
        up = None if self._recording_up is None else self._recording_up()
        return (None if snap is None else (id(snap), snap.ticks), up)

    def report_recording(self, up: Callable[[], bool]) -> None:
        """Serve ``gpu_triage_recording_up`` from ``up`` (``export --record``)."""
        self._recording_up = up
        self.registry.register(RecordingCollector(up))

    def attach(self, source: Source, interval_s: float | None = None) -> Monitor:
        """The monitor of ``source``'s ticks, taken every ``interval_s`` (the config's by default): ``export``
        ingests them; ``live --metrics`` publishes the dashboard's own judgements."""
        self.monitor = Monitor(source.host_info(), self.config, source.name, interval_s)
        return self.monitor

    def start(self) -> None:
        self.server.start()

    def close(self) -> None:
        self.server.close()
