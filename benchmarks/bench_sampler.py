"""What one tick of the live source costs: printed figures, no assertions (speed targets live here, not in tests).

With the fake NVML (tests/fake_nvml.py) at 1, 8 and 16 cards it measures our own code's cost per tick and
per card (the fake's calls are near-free Python, so this is our overhead on top of the driver's), split
into the NVML reader, the process reader and the host reader. With a real driver present it also
measures the real LiveSource (driver call costs included).

Run: .venv/bin/python benchmarks/bench_sampler.py [--ticks 200] [--real-ticks 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gpu_triage.nvmlwrap import NvmlUnavailable, load_nvml  # noqa: E402
from gpu_triage.sources.host import HostReader  # noqa: E402
from gpu_triage.sources.live import LiveSource  # noqa: E402
from gpu_triage.sources.nvml import NvmlGpuReader  # noqa: E402


def stats_ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (
        f"median {statistics.median(ordered) * 1e3:7.3f} ms  p95 {p95 * 1e3:7.3f} ms  max {ordered[-1] * 1e3:7.3f} ms"
    )


def bench_fake(cards: int, ticks: int) -> None:
    from fake_nvml import FakeProcess, h200_box  # noqa: PLC0415 - the test fake lives in tests/

    fake = h200_box(cards, pcie_tx_rate=1e9, nvlink_tx_rate_per_link=1e9, util=lambda t: (t * 37) % 100)
    for card in fake.cards:
        card.processes = [FakeProcess(pid=4_000_000 + len(card.processes), usedGpuMemory=1 << 30)]
    source = LiveSource(fake, clock=lambda: fake.now_us / 1e6)
    gpu_reader = NvmlGpuReader(load_nvml(fake), clock=lambda: fake.now_us / 1e6)
    whole, gpu_only = [], []
    for _ in range(ticks):
        fake.advance(2.0)
        t0 = time.perf_counter()
        source.sample()
        t1 = time.perf_counter()
        gpu_reader.sample()
        t2 = time.perf_counter()
        whole.append(t1 - t0)
        gpu_only.append(t2 - t1)
    per_card = [g / cards for g in gpu_only]
    print(f"fake NVML, {cards:2d} cards  whole tick : {stats_ms(whole)}")
    print(f"                   GPU part   : {stats_ms(gpu_only)}")
    print(f"                   per card   : {stats_ms(per_card)}")
    source.close()


def bench_host(ticks: int) -> None:
    reader = HostReader()
    costs = []
    for _ in range(ticks):
        t0 = time.perf_counter()
        reader.sample()
        costs.append(time.perf_counter() - t0)
    print(f"host (psutil, this machine)   : {stats_ms(costs)}")


def bench_real(ticks: int, interval_s: float) -> None:
    try:
        load_nvml().shutdown()
    except NvmlUnavailable as exc:
        print(f"real NVML: not here ({exc})")
        return
    source = LiveSource()
    cards = len(source.host_info().gpus)
    costs = []
    for _ in range(ticks):
        time.sleep(interval_s)
        t0 = time.perf_counter()
        source.sample()
        costs.append(time.perf_counter() - t0)
    print(f"real NVML, {cards} card(s) whole tick : {stats_ms(costs)}")
    if cards:
        print(f"                      per card   : {stats_ms([c / cards for c in costs])}")
    source.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--real-ticks", type=int, default=40)
    parser.add_argument("--real-interval", type=float, default=0.25)
    args = parser.parse_args()
    for cards in (1, 8, 16):
        bench_fake(cards, args.ticks)
    bench_host(args.ticks)
    bench_real(args.real_ticks, args.real_interval)


if __name__ == "__main__":
    main()
