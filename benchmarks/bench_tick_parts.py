"""Where one tick's CPU goes, on the machine it runs on: each NVML function, each reader, diagnosis, export.

Printed figures, no assertions (speed targets live in benchmarks, not tests). Meant for the real driver
(issue 15: "profile the sampler on the real driver"); without one it uses the fake NVML of tests/ so the
script itself stays runnable on the CI box.

    python benchmarks/bench_tick_parts.py [--ticks 60] [--interval 0.5] [--top 25]

What it prints, per tick (median over the ticks; CPU time of this thread where it says CPU):
  - every NVML function called during sampling: calls per tick and milliseconds per tick (wall time inside
    the driver call, measured by a timing wrapper around the pynvml module: the outside world, not ours);
  - the three readers of the live source (GPUs, GPU processes, host), thread CPU and wall;
  - diagnosis over a full window, the verdict tracker, the Prometheus collector's rendering of one scrape;
  - the top functions of a cProfile of the whole tick (our code and the driver's wrappers together).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gpu_triage.config import Config  # noqa: E402
from gpu_triage.diagnosis.engine import diagnose  # noqa: E402
from gpu_triage.diagnosis.tracker import VerdictTracker  # noqa: E402
from gpu_triage.nvmlwrap import NvmlUnavailable, load_nvml  # noqa: E402
from gpu_triage.sources.live import LiveSource  # noqa: E402
from gpu_triage.window import RollingWindow  # noqa: E402


class TimedModule:
    """The pynvml module with every ``nvml*`` function timed (wall time per call, summed by name)."""

    def __init__(self, module: Any) -> None:
        self._m = module
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)
        self.on = False

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._m, name)
        if not (name.startswith("nvml") and callable(value)) or isinstance(value, type):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                if self.on:
                    self.calls[name] += 1
                    self.seconds[name] += time.perf_counter() - t0

        return timed


def _med_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:8.3f} ms" if values else "     n/a"


def _module(real: bool) -> tuple[Any, str]:
    if real:
        import pynvml  # noqa: PLC0415

        return pynvml, "real NVML"
    from fake_nvml import FakeProcess, h200_box  # noqa: PLC0415 - the test fake lives in tests/

    fake = h200_box(2, pcie_tx_rate=1e9, nvlink_tx_rate_per_link=1e9, util=lambda t: (t * 37) % 100)
    for i, card in enumerate(fake.cards):
        card.processes = [FakeProcess(pid=4_000_000 + i, usedGpuMemory=1 << 30)]
    return fake, "fake NVML (no driver here)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    try:
        load_nvml().shutdown()
        real = True
    except NvmlUnavailable:
        real = False
    module, what = _module(real)
    timed = TimedModule(module)
    source = LiveSource(timed)
    cards = len(source.host_info().gpus)
    cpu_count = source.host_info().cpu_count
    print(f"{what}: {cards} card(s), {cpu_count} logical CPUs, {args.ticks} ticks at {args.interval} s")
    if not real:
        print("(fake NVML: the driver-call column is Python, not a driver; run this on the GPU machine)")

    cfg = Config()
    window = RollingWindow(cfg.window_ticks)
    tracker = VerdictTracker(cfg.thresholds)
    parts: dict[str, list[float]] = defaultdict(list)
    readers = {
        "GPU reader": lambda: source._gpus.sample() if source._gpus else None,  # noqa: SLF001
        "process reader": lambda: (
            source._procs.sample(source._gpus.lost) if source._procs and source._gpus else None  # noqa: SLF001
        ),
        "host reader": source._host.sample,  # noqa: SLF001
    }
    # fill the window first so diagnosis runs over a full one, as in steady state
    for _ in range(min(cfg.window_ticks, 40)):
        window.append(source.sample())
    timed.on = True
    profile = cProfile.Profile()
    for _ in range(args.ticks):
        time.sleep(args.interval)
        for name, read in readers.items():
            c0, w0 = time.thread_time(), time.perf_counter()
            read()
            parts[f"{name} (CPU)"].append(time.thread_time() - c0)
            parts[f"{name} (wall)"].append(time.perf_counter() - w0)
        c0 = time.thread_time()
        profile.enable()
        tick = source.sample()
        profile.disable()
        parts["whole sample() (CPU, profiled)"].append(time.thread_time() - c0)
        window.append(tick)
        c0 = time.thread_time()
        view = window.view()
        raw = diagnose(view, cfg.thresholds, cpu_count)
        parts["diagnose(window) (CPU)"].append(time.thread_time() - c0)
        c0 = time.thread_time()
        tracker.update(tick.ts.timestamp(), raw, view)
        parts["tracker (CPU)"].append(time.thread_time() - c0)
    timed.on = False
    # the readers ran twice per tick (once alone, once inside sample()): halve the NVML counts
    print("\n== NVML functions per tick (wall inside the call; the readers ran twice per tick, halved)")
    rows = sorted(timed.seconds.items(), key=lambda kv: -kv[1])
    total = 0.0
    for name, secs in rows:
        per = secs / args.ticks / 2
        total += per
        print(f"  {name:44s} {timed.calls[name] / args.ticks / 2:6.1f} calls  {per * 1e3:8.3f} ms")
    print(f"  {'all NVML calls':44s} {'':12s} {total * 1e3:8.3f} ms")
    print("\n== parts of a tick (median)")
    for name, values in parts.items():
        print(f"  {name:44s} {_med_ms(values)}")
    try:
        from gpu_triage.export.collector import TriageCollector  # noqa: PLC0415
        from gpu_triage.export.monitor import Monitor  # noqa: PLC0415

        monitor = Monitor(source.host_info(), cfg, "live")
        for _ in range(5):
            monitor.ingest(source.sample(), source.status())
        collector = TriageCollector(lambda: monitor.snapshot)
        costs = []
        for _ in range(20):
            c0 = time.thread_time()
            list(collector.collect())
            costs.append(time.thread_time() - c0)
        print(f"  {'export: collect() of one scrape (CPU)':44s} {_med_ms(costs)}")
        costs = []
        for _ in range(20):
            tick = source.sample()
            c0 = time.thread_time()
            monitor.ingest(tick, source.status())
            costs.append(time.thread_time() - c0)
        print(f"  {'export: Monitor.ingest (CPU)':44s} {_med_ms(costs)}")
    except ImportError as exc:
        print(f"  export not measured: {exc}")
    print(f"\n== cProfile of sample() over {args.ticks} ticks, top {args.top} by own time")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:12000])
    source.close()


if __name__ == "__main__":
    main()
