"""Time of one diagnose() call on a full window: 8 cards x 150 ticks (300 s at 2 s), 32 cores, per scenario,
on the dashboard's window (RollingWindow) and on the offline engine's view of the same ticks read from Arrow
(offline.columns: its rows are converted lazily, as `diagnose FILE` reads them).
Target: under 5 ms per tick on the 2-core CI machine. Usage: python benchmarks/bench_diagnosis.py
Figures (CPU median of all calls, dashboard / offline, on the shared 2-core box, two runs): 1.35-1.95 /
1.42-2.05 ms with the engine's numpy shortcuts, 1.78-2.83 / 1.74-2.92 ms without them (docs/performance.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

import numpy as np

from gpu_triage.diagnosis.engine import diagnose
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.offline.columns import RecordingColumns
from gpu_triage.sources.sim import SCENARIOS, SimulatedSource
from gpu_triage.trace.schema import ticks_to_batch
from gpu_triage.window import RollingWindow, WindowView

TICKS = 150
CALLS = 30


def _median_ms(views: Callable[[], WindowView], th: Thresholds, cpu: list[float]) -> tuple[float, float]:
    """(median, max) wall ms of ``CALLS`` diagnose() calls, each on a fresh view; each call's CPU ms added to
    ``cpu`` (on a shared box the CPU time moves less than the wall time)."""
    times = []
    for _ in range(CALLS):
        view = views()
        t0, c0 = time.perf_counter(), time.process_time()
        diagnose(view, th, 32)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    times.sort()
    return times[len(times) // 2], times[-1]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> None:
    th = Thresholds()
    worst = worst_off = 0.0
    cpu: list[float] = []
    cpu_off: list[float] = []
    print(f"{'scenario':18} {'median ms':>10} {'max ms':>8} {'offline median':>15} {'max ms':>8}")
    for sc in SCENARIOS:
        src = SimulatedSource(sc, gpus=8, cores=32, seed=0, interval_s=2.0, start=datetime(2026, 1, 1, tzinfo=UTC))
        ticks = [src.sample() for _ in range(TICKS)]
        w = RollingWindow(TICKS)
        w.extend(ticks)
        med, top = _median_ms(w.view, th, cpu)
        cols = RecordingColumns()
        cols.push(ticks_to_batch(ticks), np.full(TICKS, 2.0), keep=TICKS)
        off, off_top = _median_ms(partial(cols.view, 0, TICKS), th, cpu_off)
        worst, worst_off = max(worst, med), max(worst_off, off)
        print(f"{sc:18} {med:10.2f} {top:8.2f} {off:15.2f} {off_top:8.2f}")
    print(f"worst median: {worst:.2f} ms per tick, offline {worst_off:.2f} ms (target < 5 ms)")
    print(f"CPU median of all calls: {_median(cpu):.2f} ms per tick, offline {_median(cpu_off):.2f} ms")


if __name__ == "__main__":
    main()
