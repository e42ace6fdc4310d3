"""Cost of one simulated tick (SimulatedSource.sample) by server size and scenario; prints figures.

The simulated source feeds the demo and the tests, and a --fast recording of it writes ticks back to back,
so a tick must stay far below the 2 s interval: the target is well under 1 ms for 16 cards x 128 cores.

    .venv/bin/python benchmarks/bench_sim.py
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from gpu_triage.sources.sim import SCENARIOS, SimulatedSource

START = datetime(2026, 1, 1, tzinfo=UTC)


def per_tick_us(scenario: str, gpus: int, cores: int, n: int = 2000) -> tuple[float, float]:
    src = SimulatedSource(scenario, gpus=gpus, cores=cores, start=START)
    for _ in range(50):  # warm-up
        src.sample()
    costs = []
    for _ in range(n):
        t0 = time.perf_counter()
        src.sample()
        costs.append(time.perf_counter() - t0)
    costs.sort()
    return costs[len(costs) // 2] * 1e6, costs[int(len(costs) * 0.99)] * 1e6


def main() -> None:
    print(f"{'scenario':18} {'cards':>5} {'cores':>5} {'median us':>10} {'p99 us':>8}")
    for gpus, cores in ((1, 16), (8, 32), (16, 128)):
        for scenario in SCENARIOS:
            med, p99 = per_tick_us(scenario, gpus, cores)
            print(f"{scenario:18} {gpus:5d} {cores:5d} {med:10.0f} {p99:8.0f}")


if __name__ == "__main__":
    main()
