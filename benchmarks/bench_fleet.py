"""The fleet dataset's cost: `record --fast -o DIR/` of a simulated day, then `diagnose DIR --summary` and
`compare DIR DIR`.

    .venv/bin/python benchmarks/bench_fleet.py [--hours 24] [--gpus 8] [--scenario data_pipeline]

Each command runs in its own process; printed: wall time, CPU time and peak RSS (getrusage of that process
alone), files and bytes written. Targets (issue 14): `record --fast` of a day under 200 MB; the summary of a
day of 8 cards at 2 s under 300 MB (and under 10 s on the machine of the figures: see docs/performance.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = """
import resource, sys, time
from gpu_triage.cli import main
t0 = time.perf_counter()
rc = main(sys.argv[1:])
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
cpu = ru.ru_utime + ru.ru_stime
print(f"BENCH rc={rc} wall={wall:.1f}s cpu={cpu:.1f}s peak_rss={ru.ru_maxrss / 1024:.0f}MB", file=sys.stderr)
"""


def run(argv: list[str]) -> str:
    out = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True, check=False)
    line = next((x for x in out.stderr.splitlines() if x.startswith("BENCH")), out.stderr[-500:])
    return line.removeprefix("BENCH ")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--scenario", default="data_pipeline")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        rec = run(
            [
                "record",
                "--fast",
                "--source",
                f"sim:{args.scenario}",
                "--gpus",
                str(args.gpus),
                "--duration",
                str(args.hours * 3600),
                "-o",
                f"{root}/",
            ]
        )
        files = list(root.rglob("*.parquet"))
        size = sum(f.stat().st_size for f in files)
        print(
            f"record --fast {args.hours:g} h of {args.gpus} cards at 2 s into DIR/: {rec}; "
            f"{len(files)} files, {size / 1e6:.1f} MB"
        )
        summ = run(["diagnose", str(root), "--summary"])
        print(f"diagnose DIR --summary of it: {summ}")
        both = run(["compare", str(root), str(root), "--json"])
        print(f"compare DIR DIR (the day against itself, each side read as one recording): {both}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
