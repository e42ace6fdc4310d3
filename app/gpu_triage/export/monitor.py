"""What a scrape reports: the newest tick and its shown verdict, from the one judge
(:class:`~gpu_triage.verdicts.judge.Judge`).

:class:`Monitor` is fed ticks (``export``'s sampler thread: :meth:`Monitor.ingest` judges them) or judgements
(``live --metrics``: the dashboard judges each tick once and hands the judgement over, :meth:`Monitor.publish`),
and after each one publishes a new immutable :class:`Snapshot`: the tick, the source status (lost cards), the
shown verdict and when it began. The scrape thread only reads ``monitor.snapshot`` (one reference, swapped
whole), so a scrape always sees one tick and the verdict of that same tick, never a mix of two.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field

from gpu_triage.config import Config
from gpu_triage.diagnosis.engine import Verdict
from gpu_triage.diagnosis.lost import lost_gpu_seconds
from gpu_triage.model import HostInfo, Tick
from gpu_triage.sources.base import GpuFault, SourceStatus
from gpu_triage.verdicts.judge import Judge, Judgement

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
    # what is wrong with the cards themselves (SourceStatus.fault): served instead of the verdict while it holds
    fault: GpuFault | None = None
    fault_since: float | None = None
    gpus_expected: int | None = None  # NVIDIA GPUs the kernel lists (a simulated source: its own cards; None: unknown)
    gpus_missing: int = 0
    verdict: Verdict | None = None
    verdict_since: float | None = None
    tick_time: float | None = None
    # counters since the monitor started: each tick adds its rate x its interval (see _Totals)
    gpu_totals: dict[int, dict[str, float]] = field(default_factory=dict)
    net_totals: dict[str, dict[str, float]] = field(default_factory=dict)
    # GPU-seconds lost per bottleneck since the monitor started, each judged tick's (diagnosis/lost.py)
    lost_gpu_s: dict[str, float] = field(default_factory=dict)
    # seconds of the ticks whose loss has no figure (a bottleneck, and no covered card reads GPU-Util): not
    # added to lost_gpu_s as a 0, counted here so that a reader can tell "lost nothing" from "cannot say"
    unmeasured_s: float = 0.0


#: Per card: what accumulates into a counter, (tick field, counter key). The link rates are the deltas of
#: the driver's cumulative counters over the tick (or GPM's mean rate over it), so rate x interval gives the
#: bytes back; power x interval is the energy the tick's mean draw implies.
GPU_TOTALS: tuple[tuple[str, str], ...] = (
    ("pcie_rx_bytes_per_s", "pcie_rx_bytes"),
    ("pcie_tx_bytes_per_s", "pcie_tx_bytes"),
    ("nvlink_rx_bytes_per_s", "nvlink_rx_bytes"),
    ("nvlink_tx_bytes_per_s", "nvlink_tx_bytes"),
    ("power_w", "energy_joules"),
)
NET_TOTALS: tuple[tuple[str, str], ...] = (("rx_bytes_per_s", "receive_bytes"), ("tx_bytes_per_s", "transmit_bytes"))


class _Totals:
    """Counters built from per-tick rates, so that a scrape every 15 s of a 2 s tick sees every tick's bytes
    (a gauge of the newest tick's rate shows one tick in seven). A counter starts when its first value comes
    and only grows; a card's stops while the card is lost; an interface not in the newest tick is dropped
    (containers' veth pairs come and go: their counters must not pile up)."""

    def __init__(self) -> None:
        self.gpus: dict[int, dict[str, float]] = {}
        self.nets: dict[str, dict[str, float]] = {}

    def add(self, tick: Tick, lost: frozenset[int]) -> tuple[dict[int, dict[str, float]], dict[str, dict[str, float]]]:
        interval = tick.interval_s
        if interval is not None and math.isfinite(interval) and interval > 0:
            for g in tick.gpus:
                if g.index in lost:
                    continue
                _accumulate(self.gpus.setdefault(g.index, {}), g, GPU_TOTALS, interval)
            for n in tick.nets:
                _accumulate(self.nets.setdefault(n.name, {}), n, NET_TOTALS, interval)
        names = {n.name for n in tick.nets}
        self.nets = {k: v for k, v in self.nets.items() if k in names}
        # copies: the snapshot is read by scrapes while the next tick adds to these
        return {i: dict(v) for i, v in self.gpus.items()}, {k: dict(v) for k, v in self.nets.items()}


def _accumulate(into: dict[str, float], sample: object, fields: tuple[tuple[str, str], ...], interval: float) -> None:
    for field_name, key in fields:
        rate = getattr(sample, field_name, None)
        if rate is None:
            continue
        rate = float(rate)
        if math.isfinite(rate) and rate >= 0:
            into[key] = into.get(key, 0.0) + rate * interval


class Monitor:
    """The snapshot scrapes read, over the judge of ``interval_s`` ticks (the config's interval by default).
    Thread-safe ``ingest`` and ``publish``."""

    def __init__(self, host: HostInfo, config: Config, source_name: str, interval_s: float | None = None) -> None:
        self.config = config
        self.host = host
        self.judge = Judge(config.thresholds, config.window_s, interval_s or config.interval_s, host.cpu_count)
        self.judged: Judgement | None = None  # of the newest tick ingested
        self._lock = threading.RLock()  # ingest publishes under it
        self._totals = _Totals()
        self._lost: dict[str, float] = {}
        self._unmeasured = 0.0
        self.snapshot = Snapshot(host=host, source=source_name)

    def ingest(self, tick: Tick, status: SourceStatus | None = None, *, fresh: bool = False) -> Snapshot:
        """Judge one tick (``fresh``: it begins a file, the window starts afresh), publish and return the new
        snapshot."""
        with self._lock:
            self.judged = self.judge.take(tick, fresh=fresh)
            if self.judged.error is not None:  # a diagnosis bug must not stop the metrics (the judge logged it)
                log.debug("the verdict is not exported for the tick at %s", tick.ts)
            return self.publish(self.judged, status)

    def publish(self, judged: Judgement, status: SourceStatus | None = None) -> Snapshot:
        """Publish the tick someone else judged (the dashboard's) and return the new snapshot."""
        with self._lock:
            prev = self.snapshot
            tick, t, verdict = judged.tick, judged.t, judged.shown
            since = prev.verdict_since
            if verdict is None:
                since = None
            elif prev.verdict is None or prev.verdict.key != verdict.key or since is None:
                since = t
            status = status or SourceStatus()
            lost = frozenset(status.lost_gpus)
            gpu_totals, net_totals = self._totals.add(tick, lost)
            raw = judged.raw  # the raw verdict, as a recording stores it and the summary counts it
            if raw is not None:
                util = {g.index: g.util_pct for g in tick.gpus if g.index not in lost}
                gone = lost_gpu_seconds(str(raw.bottleneck), raw.gpus, util, tick.interval_s)
                if gone is None:
                    self._unmeasured += tick.interval_s or 0.0  # None only where the tick has seconds
                elif gone > 0:
                    self._lost[str(raw.bottleneck)] = self._lost.get(str(raw.bottleneck), 0.0) + gone
            fault = status.fault()
            fault_since = None if fault is None else prev.fault_since if fault == prev.fault else t
            self.snapshot = Snapshot(
                host=self.host,
                source=prev.source,
                tick=tick,
                ticks=prev.ticks + 1,
                gpu_available=status.gpu_available,
                lost_gpus=lost,
                fault=fault,
                fault_since=fault_since,
                gpus_expected=status.gpus_expected,
                gpus_missing=status.gpus_missing,
                verdict=verdict,
                verdict_since=since,
                tick_time=t,
                gpu_totals=gpu_totals,
                net_totals=net_totals,
                lost_gpu_s=dict(self._lost),
                unmeasured_s=self._unmeasured,
            )
            return self.snapshot
