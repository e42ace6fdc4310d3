"""Why the headless recorder's RSS is what it is: RSS after each import stage, then over a recording.

    .venv/bin/python benchmarks/bench_record.py [--source sim:data_pipeline|live] [--seconds 30] [--interval 0.5]

Prints the RSS after Python, the live source (psutil, NVML) and the recorder, and checks that none of
Textual, polars, pyarrow and numpy is loaded by a live `record` (it writes its Arrow stream itself and converts
it to Parquet in a child at the stop). Then runs `gpu-triage record` as a child for --seconds and
prints its RSS every 10 s (flat = no leak) and its CPU per tick.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

STAGES = """
import psutil, sys
p = psutil.Process()
def show(what): print(f"  after {what:<28} RSS {p.memory_info().rss / 2**20:6.1f} MB")
show("python")
import gpu_triage.sources.live; show("live source (psutil, NVML)")
import gpu_triage.recorder, gpu_triage.trace.writer, gpu_triage.cli; show("recorder + cli")
heavy = [m for m in ("textual", "polars", "rich", "plotext", "pyarrow", "numpy") if m in sys.modules]
print("  heavy modules loaded by record:", heavy or "none")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="sim:data_pipeline")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args()
    print("record: RSS by import stage")
    subprocess.run([sys.executable, "-c", STAGES], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rec.parquet"
        cmd = [
            sys.executable,
            "-m",
            "gpu_triage",
            "record",
            "-o",
            str(out),
            "--source",
            args.source,
            "--interval",
            str(args.interval),
        ]
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc = psutil.Process(child.pid)
        began = time.monotonic()
        time.sleep(3)
        cpu0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        while time.monotonic() - began < args.seconds:
            time.sleep(min(10.0, max(0.1, args.seconds - (time.monotonic() - began))))
            print(f"  {time.monotonic() - began:5.0f} s  RSS {proc.memory_info().rss / 2**20:6.1f} MB")
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        elapsed = time.monotonic() - t0
        os.kill(child.pid, signal.SIGINT)
        child.wait(timeout=60)
        ticks = elapsed / args.interval
        print(
            f"record {args.source} every {args.interval:g} s: CPU {100 * cpu / elapsed:.2f} % of one core, "
            f"{1000 * cpu / ticks:.2f} ms CPU per tick (sampling + writing)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
