"""``gpu_triage_gpu_lost_seconds_total{bottleneck}``: the GPU-seconds each bottleneck lost since the exporter started
(in base units, as promtool wants: /3600 for GPU-hours),
added up by the monitor from each judged tick (:func:`gpu_triage.diagnosis.lost.lost_gpu_seconds`, the summary's
definition too); a tick of no figure adds nothing there and its seconds to
``gpu_triage_gpu_lost_unmeasured_seconds_total``. Its own module: the collector's page is at the file-length cap."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from gpu_triage.diagnosis.vocab import GPU_FAULT, SEVERITY, Bottleneck
from gpu_triage.export.monitor import Snapshot

PREFIX = "gpu_triage"
LOST_DOC = ("GPU-seconds lost since the exporter started, per bottleneck: each judged tick's cards the verdict covers "
            "x the tick x their idle share (a hang: the whole tick), docs/diagnosis.md \"GPU-hours lost\"")
#: Every bottleneck a verdict can lose time to: each series exists from the first tick (at 0), so increase()
#: counts a bottleneck's first loss too; a bounded set (the vocabulary), never a pid or a name.
LOST_BOTTLENECKS = tuple(b for b in SEVERITY if b not in (GPU_FAULT, Bottleneck.NONE))
UNMEASURED_DOC = ("Seconds of judged ticks whose verdict named a bottleneck but none of the cards it covers reads "
                  "GPU-Util: their GPU-seconds lost are unknown, not added to gpu_triage_gpu_lost_seconds_total "
                  "(a total still at 0 beside this is n/a, not 0)")


def lost(snap: Snapshot) -> Iterator[Metric]:
    if snap.tick_time is None:
        return
    counter = CounterMetricFamily(f"{PREFIX}_gpu_lost_seconds", LOST_DOC, labels=["bottleneck"])
    for b in (*LOST_BOTTLENECKS, *sorted(set(snap.lost_gpu_s) - set(LOST_BOTTLENECKS))):
        counter.add_metric([str(b)], snap.lost_gpu_s.get(b, 0.0))
    yield counter
    unmeasured = CounterMetricFamily(f"{PREFIX}_gpu_lost_unmeasured_seconds", UNMEASURED_DOC)
    unmeasured.add_metric([], snap.unmeasured_s)
    yield unmeasured
