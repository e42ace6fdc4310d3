"""Figures for the recorder and reader: a day of 8 simulated cards at 2 s (43,200 ticks).

Prints bytes on disk, append cost per tick, conversion cost, open + first tick, seek, recover.
Run: .venv/bin/python benchmarks/bench_trace.py [--ticks N] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_triage.commands.recover import run_recover
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.schema import ticks_to_batch
from gpu_triage.trace.writer import TraceWriter, stream_path_for


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=43_200)
    ap.add_argument("--scenario", default="data_pipeline")
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    import os

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    source = SimulatedSource(args.scenario, gpus=args.gpus, cores=32, seed=0, interval_s=2.0)
    t0 = time.perf_counter()
    ticks = [source.sample() for _ in range(args.ticks)]
    print(f"simulated {len(ticks)} ticks of {args.gpus} cards ({args.scenario}) in {time.perf_counter() - t0:.1f} s")

    conv = []
    for t in ticks[:2000]:
        a = time.perf_counter()
        ticks_to_batch([t])
        conv.append(time.perf_counter() - a)
    print(f"tick -> Arrow batch: median {statistics.median(conv) * 1e6:.0f} us")

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "day.parquet"
        writer = TraceWriter(target, source.host_info(), 2.0)
        costs = []
        for t in ticks:
            a = time.perf_counter()
            writer.append(t)
            costs.append(time.perf_counter() - a)
        costs.sort()
        stream_bytes = writer.bytes_written
        print(
            f"append (convert + write + flush to the OS; fsync every 5 s of clock): median "
            f"{costs[len(costs) // 2] * 1e6:.0f} us, p99 {costs[int(len(costs) * 0.99)] * 1e6:.0f} us, "
            f"max {costs[-1] * 1e3:.1f} ms"
        )
        print(f"stream while recording: {stream_bytes / 1e6:.1f} MB ({stream_bytes / len(ticks):.0f} B/tick)")
        a = time.perf_counter()
        writer.close()
        print(f"close (stream -> zstd Parquet, atomic): {time.perf_counter() - a:.2f} s")
        size = target.stat().st_size
        print(f"Parquet on disk: {size / 1e6:.2f} MB ({size / len(ticks):.0f} B/tick)")

        a = time.perf_counter()
        trace = open_trace(target)
        first = trace.tick(0)
        print(f"open + first tick: {(time.perf_counter() - a) * 1e3:.0f} ms ({trace.n} rows, {len(first.gpus)} cards)")
        seeks = []
        for i in range(0, trace.n, trace.n // 50):
            a = time.perf_counter()
            trace.tick(i)
            seeks.append(time.perf_counter() - a)
        print(f"seek (tick(i) anywhere): median {statistics.median(seeks) * 1e6:.0f} us, max {max(seeks) * 1e3:.2f} ms")
        a = time.perf_counter()
        window = trace.ticks(trace.n // 2, trace.n // 2 + 150)
        print(f"a 5-minute window (150 ticks): {(time.perf_counter() - a) * 1e3:.1f} ms ({len(window)} ticks)")

        # recover: a stream of the whole day, as a killed recorder leaves it
        target2 = Path(tmp) / "killed.parquet"
        w2 = TraceWriter(target2, source.host_info(), 2.0)
        for t in ticks:
            w2.append(t)
        w2.abort()
        stream = stream_path_for(target2)
        a = time.perf_counter()
        leftover = open_trace(stream)
        leftover.tick(0)
        print(f"open the leftover stream + first tick: {(time.perf_counter() - a) * 1e3:.0f} ms")
        a = time.perf_counter()
        run_recover(argparse.Namespace(file=str(stream), output=None))
        print(f"recover (stream -> Parquet): {time.perf_counter() - a:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
