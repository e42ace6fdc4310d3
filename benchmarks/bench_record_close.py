"""What the recorder's stop costs: converting its stream to Parquet in a child process or in-process.

    .venv/bin/python benchmarks/bench_record_close.py [--ticks 1800] [--gpus 8]

Each variant runs in a fresh interpreter that has not loaded pyarrow (as a recorder): it appends --ticks
simulated ticks (8 cards, their processes, 32 cores; the default is an hour at 2 s, one file of an hourly
dataset), then closes the writer. Printed per variant: the recorder's RSS before the stop and its peak (VmHWM)
after it, the stop's wall time, the child converter's peak RSS (RUSAGE_CHILDREN) and the Parquet's size; and
the per-tick cost of appending (the Arrow stream written without pyarrow).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

RUN = """
import json, resource, sys, tempfile, time
from pathlib import Path
ticks, gpus, in_child = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "child"
from gpu_triage.sources.spec import make_source
from gpu_triage.trace.writer import TraceWriter

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")

source = make_source("sim:data_pipeline", gpus=gpus, seed=1)
made = [source.sample() for _ in range(min(ticks, 600))]  # sampled once, appended round-robin
with tempfile.TemporaryDirectory() as tmp:
    target = Path(tmp) / "hour.parquet"
    writer = TraceWriter(target, source.host_info(), 2.0, convert_in_child=in_child)
    cpu = time.process_time()
    for i in range(ticks):
        writer.append(made[i % len(made)])
    append_ms = (time.process_time() - cpu) / ticks * 1e3
    stream_mb = writer.bytes_written / 1e6
    before = status("VmRSS")
    began = time.perf_counter()
    writer.close()
    wall = time.perf_counter() - began
    child_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"append_ms": append_ms, "stream_mb": stream_mb, "rss_before_mb": before,
                      "hwm_after_mb": status("VmHWM"), "rss_after_mb": status("VmRSS"), "close_s": wall,
                      "child_peak_mb": child_peak if in_child else None,
                      "parquet_mb": target.stat().st_size / 1e6, "pyarrow_in_recorder": "pyarrow" in sys.modules}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=1800)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    print(f"{args.ticks} ticks of {args.gpus} cards (sim:data_pipeline), Python {sys.version.split()[0]}")
    for variant in ("child", "in-process"):
        out = subprocess.run(
            [sys.executable, "-c", RUN, str(args.ticks), str(args.gpus), variant],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(out.stdout.splitlines()[-1])
        child = f", converter peak {r['child_peak_mb']:.1f} MB" if r["child_peak_mb"] is not None else ""
        print(
            f"{variant:>10}: append {r['append_ms']:.3f} ms/tick ({r['stream_mb']:.1f} MB stream); recorder RSS "
            f"{r['rss_before_mb']:.1f} MB before the stop, {r['rss_after_mb']:.1f} after, peak {r['hwm_after_mb']:.1f}"
            f"; stop {r['close_s']:.2f} s{child}; Parquet {r['parquet_mb']:.1f} MB; pyarrow in the recorder: "
            f"{r['pyarrow_in_recorder']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
