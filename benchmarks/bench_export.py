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

4. --abuse (alone: the other parts are skipped): the daemon, with --record, under hostile clients on
   loopback: --slow clients (default 1,500) that send a header line every 5 s; the daemon's threads and
   RSS while they hang on, and 50 scrapes one after the other meanwhile (p50, p99); --big connections
   (default 300) each sending 99 headers of 65,000 bytes, and the daemon's peak RSS (VmHWM) after; 50
   concurrent scrapers x 10 rounds (p50, p99, failures); then SIGTERM with the slow clients still
   attached: seconds to exit, and whether the hour was left as Parquet or as a .partial.arrows stream.

Targets (issue 14): a scrape <= 10 ms, RSS <= 80 MB, CPU no more than `nvidia-smi dmon` on the same
machine (that comparison needs the GPU machine: run `nvidia-smi dmon -d 2` beside it under `pidstat`).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

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


def start_export(source: str, interval: float, *extra: str) -> tuple[subprocess.Popen[str], str]:
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
        *extra,
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


def _status_kb(pid: int, field: str) -> float:
    m = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(m.group(1)) / 1024 if m else float("nan")


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _pct(times: list[float], q: float) -> float:
    times = sorted(times)
    return 1e3 * times[min(len(times) - 1, int(q * len(times)))]


def _try_get(url: str) -> float | None:
    try:
        return get(url)
    except OSError:
        return None


def under_abuse(source: str, slow_n: int, big_n: int) -> None:
    tmp = tempfile.TemporaryDirectory()
    dataset = Path(tmp.name) / "ds"
    child, url = start_export(source, 2.0, "--record", str(dataset))
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    stop = threading.Event()
    slow: list[socket.socket] = []
    try:
        time.sleep(3)
        print(f"export --source {source} --record, under abuse on loopback:")
        print(f"  idle: {_threads(child.pid)} threads, RSS {_status_kb(child.pid, 'VmRSS'):.1f} MB")
        for _ in range(slow_n):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                slow.append(sock)
            except OSError:
                break

        def drip() -> None:
            i = 0
            while not stop.wait(5.0):
                i += 1
                for sock in slow:
                    try:
                        sock.sendall(f"X-Drip-{i}: {i}\r\n".encode())
                    except OSError:
                        pass

        threading.Thread(target=drip, daemon=True).start()
        time.sleep(6)  # past one drip
        times = [t for t in (_try_get(url) for _ in range(50)) if t is not None]
        ok = f"p50 {_pct(times, 0.5):.1f} ms  p99 {_pct(times, 0.99):.1f} ms" if times else "none answered"
        print(
            f"  {len(slow)} slow clients dripping a header line every 5 s: {_threads(child.pid)} threads, "
            f"RSS {_status_kb(child.pid, 'VmRSS'):.1f} MB; 50 scrapes meanwhile: {len(times)} answered, {ok}"
        )
        line = b"X-Big: " + b"a" * 65000 + b"\r\n"

        def big() -> None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                    sock.sendall(b"GET /metrics HTTP/1.1\r\n")
                    for _ in range(99):
                        sock.sendall(line)
                    sock.sendall(b"\r\n")
                    sock.recv(100)
            except OSError:
                pass

        before = _status_kb(child.pid, "VmHWM")
        t0 = time.monotonic()
        clients = [threading.Thread(target=big) for _ in range(big_n)]
        for t in clients:
            t.start()
        for t in clients:
            t.join(120)
        print(
            f"  {big_n} connections x 99 headers of 65,000 B: peak RSS {before:.1f} -> "
            f"{_status_kb(child.pid, 'VmHWM'):.1f} MB, RSS after {_status_kb(child.pid, 'VmRSS'):.1f} MB "
            f"({time.monotonic() - t0:.1f} s)"
        )
        lat: list[float] = []
        failed = 0
        lock = threading.Lock()

        def scraper() -> None:
            nonlocal failed
            for _ in range(10):
                took = _try_get(url)
                with lock:
                    if took is None:
                        failed += 1
                    else:
                        lat.append(took)

        scrapers = [threading.Thread(target=scraper) for _ in range(50)]
        for t in scrapers:
            t.start()
        for t in scrapers:
            t.join(120)
        print(
            f"  50 concurrent scrapers x 10: {len(lat)} answered, {failed} failed, "
            f"p50 {_pct(lat, 0.5):.1f} ms  p99 {_pct(lat, 0.99):.1f} ms"
        )
        t0 = time.monotonic()
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(90)
            took_s = f"{time.monotonic() - t0:.1f} s"
        except subprocess.TimeoutExpired:
            took_s = "more than 90 s (killed)"
            child.kill()
            child.wait(30)
        parquet = len(list(dataset.rglob("*.parquet")))
        streams = len(list(dataset.rglob("*.partial.arrows")))
        print(
            f"  SIGTERM with {len(slow)} slow clients attached: exited after {took_s}; "
            f"{parquet} Parquet file(s), {streams} .partial.arrows left"
        )
    finally:
        stop.set()
        for sock in slow:
            sock.close()
        if child.poll() is None:
            child.kill()
            child.wait(30)
        tmp.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scrapes", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--source", default="sim:healthy", help="the daemon's source (sim:SCENARIO with 8 cards, or live)")
    ap.add_argument("--abuse", action="store_true", help="only the abuse run (part 4)")
    ap.add_argument("--slow", type=int, default=1500)
    ap.add_argument("--big", type=int, default=300)
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    if args.abuse:
        under_abuse(args.source, args.slow, args.big)
        return 0
    scrape_in_process(args.scrapes)
    scrape_over_http(args.source, 200)
    daemon_cost(args.source, args.interval, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
