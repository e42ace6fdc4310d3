"""Time and peak memory of `gpu-triage diagnose` on long recordings (issue #9 item 10, issue #14).

Each recording is generated into a temporary directory by tiling a simulated block (8 cards, 32 cores, 2 s
ticks, every scenario in turn for 10 minutes, with process lists) end to end with shifted timestamps, written
as the recorder writes Parquet (zstd, row groups of 8192 rows). Each diagnosis runs in a fresh Python process
(`python -m gpu_triage diagnose FILE --json`, output discarded); the figures are its wall time and its own
peak RSS (resource.getrusage in the child). Targets: 1,000,000 ticks of 8 cards under 60 s and 500 MB;
43,200 ticks of 8 cards (a day at 2 s) under 10 s and 300 MB; 50,000 ticks of 1 card in a few seconds.

Usage: python benchmarks/bench_offline.py [--quick]   (--quick: the day and the 50,000 ticks only)
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpu_triage.sources.sim import SCENARIOS, SimulatedSource
from gpu_triage.trace.schema import TS_TYPE, schema_with_metadata, ticks_to_batch

BLOCK_S = 600.0  # seconds per scenario in the tiled block


def make_recording(path: Path, ticks: int, gpus: int) -> None:
    schedule = [(sc, BLOCK_S) for sc in SCENARIOS if gpus > 1 or sc not in ("communication", "imbalanced",
                                                                            "single_card_busy")]
    src = SimulatedSource.from_schedule(schedule, gpus=gpus, cores=32, seed=1, interval_s=2.0,
                                        start=datetime(2026, 1, 1, tzinfo=UTC))
    block_n = min(ticks, round(len(schedule) * BLOCK_S / 2.0))
    block = pa.Table.from_batches([ticks_to_batch([src.sample() for _ in range(block_n)])])
    ts0 = block.column("ts").cast(pa.int64()).to_numpy()
    span_us = int(block_n * 2_000_000)
    schema = schema_with_metadata(src.host_info(), 2.0)
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        done = 0
        k = 0
        while done < ticks:
            take = min(block_n, ticks - done)
            ts = pa.array(ts0[:take] + k * span_us, type=pa.int64()).cast(TS_TYPE)
            part = block.slice(0, take).set_column(0, "ts", ts)
            writer.write_table(part.cast(schema), row_group_size=8192)
            done += take
            k += 1


def measure(path: Path) -> dict[str, float]:
    code = (
        "import resource, sys, time, os\n"
        "from gpu_triage.cli import main\n"
        "sys.stdout = open(os.devnull, 'w')\n"
        "t = time.perf_counter()\n"
        f"rc = main(['diagnose', {str(path)!r}, '--json'])\n"
        "wall = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_SELF)\n"
        "sys.stderr.write('RESULT %d %.3f %.3f %d\\n' % (rc, wall, u.ru_utime + u.ru_stime, u.ru_maxrss))\n"
    )
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    total = time.perf_counter() - t0
    line = [x for x in proc.stderr.splitlines() if x.startswith("RESULT")]
    if not line:
        raise SystemExit(f"diagnose failed:\n{proc.stderr}")
    _, rc, wall, cpu, rss_kb = line[-1].split()
    return {"rc": int(rc), "diagnose_s": float(wall), "cpu_s": float(cpu), "process_s": total,
            "peak_rss_mb": int(rss_kb) / 1024}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the 1,000,000-tick recording")
    args = ap.parse_args()
    cases = [("a day at 2 s, 8 cards", 43_200, 8), ("50,000 ticks, 1 card", 50_000, 1)]
    if not args.quick:
        cases.append(("1,000,000 ticks, 8 cards", 1_000_000, 8))
    print(f"machine: {_cpu_model()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, numpy {np.__version__}, pyarrow {pa.__version__}")
    print(f"{'recording':28} {'file MB':>8} {'diagnose s':>11} {'CPU s':>6} {'process s':>10} {'peak RSS MB':>12}")
    with tempfile.TemporaryDirectory(prefix="bench-offline-") as tmp:
        for label, n, gpus in cases:
            path = Path(tmp) / f"{n}-{gpus}.parquet"
            make_recording(path, n, gpus)
            r = measure(path)
            print(f"{label:28} {path.stat().st_size / 1e6:8.1f} {r['diagnose_s']:11.1f} {r['cpu_s']:6.1f} "
                  f"{r['process_s']:10.1f} "
                  f"{r['peak_rss_mb']:12.0f}", flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
