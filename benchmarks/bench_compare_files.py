"""What `compare` pays per file: two datasets of many small files against the same ticks in one file a side.

    .venv/bin/python benchmarks/bench_compare_files.py [--files 1000] [--ticks 5] [--gpus 8] [--profile]
    .venv/bin/python benchmarks/bench_compare_files.py --copies 1000 [--ticks 5] [--gpus 8]

Each side is one simulated recording of files x ticks ticks at 2 s (side A data_pipeline, side B healthy),
written once as a single file and once cut into --files Parquet files of --ticks rows each (the rows and
the schema metadata of the single file, so both layouts hold exactly the same ticks). Then `compare A B
--json` runs in its own process for each layout: wall time, CPU time, peak RSS (getrusage of that
process alone). The difference between the two is what the files cost. --profile prints the top of a
cProfile of the many-files comparison, in process.

--copies N: a directory of N byte-for-byte copies of one file of --ticks ticks (a copy tool run twice, a
hostile user filling a shared dataset) against the one file, then the one file against itself: what the
copies cost.
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
    line = next((x for x in out.stderr.splitlines() if x.startswith("BENCH")), out.stderr[-800:])
    return line.removeprefix("BENCH ")


def make_side(root: Path, scenario: str, files: int, ticks: int, gpus: int) -> tuple[Path, Path]:
    """One recording as a single file, and the same rows cut into ``files`` files of ``ticks`` rows."""
    import pyarrow.parquet as pq

    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.trace.writer import TraceWriter

    single = root / f"{scenario}-one" / "run.parquet"
    single.parent.mkdir(parents=True)
    source = SimulatedSource(scenario, gpus=gpus, seed=1, interval_s=2.0)
    writer = TraceWriter(single, source.host_info(), 2.0, convert_in_child=False)
    for _ in range(files * ticks):
        writer.append(source.sample())
    writer.close()
    table = pq.read_table(single)
    many = root / f"{scenario}-many" / "host=sim" / "date=2026-01-05"
    many.mkdir(parents=True)
    for i in range(files):
        pq.write_table(table.slice(i * ticks, ticks), many / f"{i:06d}.parquet")
    return single, many.parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--copies", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.copies:
            import shutil

            one, _ = make_side(root, "healthy", 1, args.ticks, args.gpus)
            copies = root / "copies"
            copies.mkdir()
            for i in range(args.copies):
                shutil.copyfile(one, copies / f"run-{i:06d}.parquet")
            print(f"one file against itself: {run(['compare', str(one), str(one), '--json'])}")
            print(f"{args.copies} copies of it against it: {run(['compare', str(copies), str(one), '--json'])}")
            return 0
        one_a, many_a = make_side(root, "data_pipeline", args.files, args.ticks, args.gpus)
        one_b, many_b = make_side(root, "healthy", args.files, args.ticks, args.gpus)
        n = args.files * args.ticks
        print(f"one file a side ({n} ticks of {args.gpus} cards): {run(['compare', str(one_a), str(one_b), '--json'])}")
        print(
            f"{args.files} files x {args.ticks} ticks a side: "
            f"{run(['compare', str(many_a), str(many_b), '--json'])}"
        )
        if args.profile:
            import cProfile
            import pstats

            from gpu_triage.config import Config
            from gpu_triage.fleet_history.compare import compare_datasets

            prof = cProfile.Profile()
            prof.runcall(compare_datasets, str(many_a), str(many_b), Config())
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
