"""Time of one diagnose() call on a full window: 8 cards x 150 ticks (300 s at 2 s), 32 cores, per scenario.
Target: under 5 ms per tick on the 2-core CI machine. Usage: python benchmarks/bench_diagnosis.py"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from gpu_triage.diagnosis.engine import diagnose
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.sources.sim import SCENARIOS, SimulatedSource
from gpu_triage.window import RollingWindow


def main() -> None:
    th = Thresholds()
    worst = 0.0
    print(f"{'scenario':18} {'median ms':>10} {'max ms':>8}")
    for sc in SCENARIOS:
        src = SimulatedSource(sc, gpus=8, cores=32, seed=0, interval_s=2.0, start=datetime(2026, 1, 1, tzinfo=UTC))
        w = RollingWindow(150)
        for _ in range(150):
            w.append(src.sample())
        times = []
        for _ in range(30):
            view = w.view()
            t0 = time.perf_counter()
            diagnose(view, th, 32)
            times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        worst = max(worst, times[len(times) // 2])
        print(f"{sc:18} {times[len(times) // 2]:10.2f} {times[-1]:8.2f}")
    print(f"worst median: {worst:.2f} ms per tick (target < 5 ms)")


if __name__ == "__main__":
    main()
