""":class:`Exporter`: the metrics server over a sampled source, which ``gpu-triage export`` (its handler is
:mod:`gpu_triage.commands.export`) and ``live --metrics`` share, so an SSH session and Prometheus read the
same engine's numbers. Closing it stops accepting and finishes the scrapes in flight."""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gpu_triage.config import Config
from gpu_triage.export.collector import TriageCollector
from gpu_triage.export.monitor import Monitor, TappedSource
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
        self.server = MetricsServer(listen, self.registry, web=web)

    def _snapshot(self) -> Any:
        return None if self.monitor is None else self.monitor.snapshot

    def attach(self, source: Source) -> Monitor:
        self.monitor = Monitor(source.host_info(), self.config, source.name)
        return self.monitor

    def tap(self, source: Source) -> TappedSource:
        """``source`` with every sampled tick also diagnosed for the metrics (``live --metrics``)."""
        monitor = self.attach(source)
        return TappedSource(source, monitor.ingest)

    def start(self) -> None:
        self.server.start()

    def close(self) -> None:
        self.server.close()
