"""When the summary's recomputation is worth worker processes: `summarise()` of a dataset recorded without
verdicts (each file diagnosed again, a verdict every 30 s), in this process and with worker processes.

    .venv/bin/python benchmarks/bench_summary_workers.py [--hours 4] [--gpus 8] [--workers 2]

Writes --hours hourly files of a simulated data-pipeline stall (2 s ticks) with the dataset writer, then runs
`summarise(DIR, workers=1)` and `summarise(DIR, workers=N)` each in a child process and prints its wall time
and CPU time, its workers' included (getrusage of the child and of its children). What the default chooses
(`fleet_history.perfile.POOL_MIN_RECOMPUTED_TICKS`) is printed with them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = """
import resource, sys, time
from gpu_triage.config import Config
from gpu_triage.fleet_history.summary import summarise
if __name__ == "__main__":
    t0 = time.perf_counter()
    summarise(sys.argv[1], Config(), workers=int(sys.argv[2]))
    wall = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print(f"BENCH wall={wall:.1f}s cpu={cpu:.1f}s (imports included)", file=sys.stderr)
"""


def run(root: Path, workers: int) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:  # spawned workers re-import __main__
        f.write(RUN)
    out = subprocess.run([sys.executable, f.name, str(root), str(workers)], capture_output=True, text=True,
                         check=False)
    Path(f.name).unlink()
    return next((x for x in out.stderr.splitlines() if x.startswith("BENCH")), out.stderr[-800:]).removeprefix("BENCH ")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    from datetime import UTC, datetime

    from gpu_triage.fleet_history.perfile import POOL_MIN_RECOMPUTED_TICKS
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.storage.dataset import DatasetWriter

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = SimulatedSource("data_pipeline", gpus=args.gpus, seed=1, start=datetime(2026, 1, 5, tzinfo=UTC))
        writer = DatasetWriter(root, source.host_info(), 2.0, hostname="bench")
        ticks = args.hours * 1800 - 1  # ends before the next hour's file
        for _ in range(ticks):
            writer.append(source.sample())
        writer.close()
        chosen = "workers" if ticks >= POOL_MIN_RECOMPUTED_TICKS else "one process"
        print(f"{len(writer.files)} files, {ticks} ticks of {args.gpus} cards to recompute (the default: {chosen})")
        print(f"in one process: {run(root, 1)}")
        print(f"{args.workers} worker processes: {run(root, args.workers)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
