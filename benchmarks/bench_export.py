"""What `gpu-triage export` costs: a scrape with 8 simulated cards, and the daemon's CPU and RSS at 2 s.

    .venv/bin/python benchmarks/bench_export.py [--scrapes 2000] [--seconds 60] [--interval 2] [--source sim:healthy]
    .venv/bin/python benchmarks/bench_export.py --source live          # on a GPU machine: the real driver

1. Scrape, in process: a Monitor fed 200 ticks of an 8-card simulated server (data_pipeline: processes,
   disks, every field), then the collector formatted by prometheus_client (`generate_latest`) --scrapes
   times: median, p95, max, and the size of the page. That is the whole cost a scrape adds (no diagnosis,
   no NVML call at scrape time).
2. Scrape over HTTP: `gpu-triage export` as a child, GET /metrics in a loop (keep-alive off, as
   Prometheus): median and p95 round trip on loopback.
3. The daemon at --interval (default 2 s) for --seconds, scraped every 15 s as Prometheus would: CPU as a
   share of one core (start-up excluded: measured from 5 s in), RSS every 10 s (flat = no leak), peak RSS.

Targets (issue 14): a scrape <= 10 ms, RSS <= 80 MB, CPU no more than `nvidia-smi dmon` on the same
machine (that comparison needs the GPU machine: run `nvidia-smi dmon -d 2` beside it under `pidstat`).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

import psutil


def scrape_in_process(scrapes: int) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_triage.config import Config
    from gpu_triage.export.collector import TriageCollector
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.sources.sim import SimulatedSource

    source = SimulatedSource("data_pipeline", gpus=8, seed=0)
    monitor = Monitor(source.host_info(), Config(), source.name)
    ingest = []
    for _ in range(200):
        tick = source.sample()
        t0 = time.perf_counter()
        monitor.ingest(tick, source.status())
        ingest.append(time.perf_counter() - t0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot))
    times = []
    for _ in range(scrapes):
        t0 = time.perf_counter()
        page = generate_latest(registry)
        times.append(time.perf_counter() - t0)
    times.sort()
    series = sum(1 for line in page.decode().splitlines() if line and not line.startswith("#"))
    print(f"scrape in process, 8 cards ({series} series, {len(page) / 1024:.1f} KiB page), {scrapes} scrapes:")
    print(
        f"  median {1e3 * statistics.median(times):.2f} ms   p95 {1e3 * times[int(0.95 * len(times))]:.2f} ms   "
        f"max {1e3 * times[-1]:.2f} ms"
    )
    ingest.sort()
    print(
        "  per tick on the sampler thread (window + diagnosis + tracker): "
        f"median {1e3 * statistics.median(ingest):.2f} ms"
        f"   p95 {1e3 * ingest[int(0.95 * len(ingest))]:.2f} ms"
    )


def start_export(source: str, interval: float) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable,
        "-m",
        "gpu_triage",
        "export",
        "--listen",
        "127.0.0.1:0",
        "--interval",
        str(interval),
        "--source",
        source,
    ]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    for line in child.stdout:
        m = re.search(r"on (http://\S+/metrics)", line)
        if m:
            return child, m.group(1)
    raise SystemExit(f"export did not start: exit {child.wait()}")


def get(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as resp:
        resp.read()
    return time.perf_counter() - t0


def scrape_over_http(source: str, n: int) -> None:
    child, url = start_export(source, 0.5)
    try:
        time.sleep(3)  # a few ticks, a verdict
        times = sorted(get(url) for _ in range(n))
        print(f"scrape over HTTP on loopback ({source}), {n} scrapes:")
        print(f"  median {1e3 * statistics.median(times):.2f} ms   p95 {1e3 * times[int(0.95 * len(times))]:.2f} ms")
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(30)


def daemon_cost(source: str, interval: float, seconds: float) -> None:
    child, url = start_export(source, interval)
    proc = psutil.Process(child.pid)
    try:
        time.sleep(5)  # start-up (imports, first ticks) excluded
        cpu0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        next_scrape = t0
        next_print = t0 + 10
        peak = 0
        print(f"export --source {source} --interval {interval:g} for {seconds:g} s, scraped every 15 s:")
        while (now := time.monotonic()) - t0 < seconds:
            if now >= next_scrape:
                get(url)
                next_scrape += 15
            rss = proc.memory_info().rss
            peak = max(peak, rss)
            if now >= next_print:
                print(f"  {now - t0:5.0f} s  RSS {rss / 2**20:6.1f} MB")
                next_print += 10
            time.sleep(0.5)
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        elapsed = time.monotonic() - t0
        print(
            f"  CPU {100 * cpu / elapsed:.2f} % of one core ({cpu:.2f} s over {elapsed:.0f} s)   "
            f"peak RSS {peak / 2**20:.1f} MB"
        )
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scrapes", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--source", default="sim:healthy", help="the daemon's source (sim:SCENARIO with 8 cards, or live)")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    scrape_in_process(args.scrapes)
    scrape_over_http(args.source, 200)
    daemon_cost(args.source, args.interval, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
