"""`gpu-triage compact`: its CPU, wall time, memory and the storage it leaves, and the per-card question on
what it leaves.

    .venv/bin/python benchmarks/bench_compact.py [--hosts 10] [--days 10] [--gpus 8] [--data noise|fleet]
        [--workers N] [--tree OTHER/app] [--dir /tmp/x] [--keep] [--reuse] [--no-queries] [--recompute]

Generates HOSTS x DAYS host-days of hourly trace files (2 s ticks, GPUS cards, each tick with a stored verdict)
with vectorised pyarrow (no Tick objects), as the recorder lays them out:

- ``--data noise`` (the default): every numeric field of every card filled with uniform noise, 32 cores: the
  worst case for compression, a day of 8 cards ~27 MiB;
- ``--data fleet``: ``bench_fleet_stored.py``'s host-day: GPU-Util in whole per cent shaped by runs of
  bottlenecks, one process per card with its Slurm job and user, every other field null (~1 MiB a host-day).

Then

1. per-GPU utilisation over every host-day (mean GPU-Util per host and card) on the hourly files, in DuckDB
   and polars;
2. `gpu-triage compact DIR [--workers N]` in its own process: wall, CPU of the process *and of its worker
   processes* (getrusage of self and children), peak RSS of each; the bytes on disk before and after (every
   file under DIR) and their ratio; with ``--tree``, first the same compact from another checkout's app/
   directory on a copy of the same files (before/after);
3. the per-GPU question again, on the daily files.

Each query runs in a fresh process (no cache of the previous run but the OS page cache, warmed by one
untimed run first); printed: the best wall time of --repeat runs and the answer's row count. With
--recompute, also the cost of computing verdicts that files lack: one host-hour written without them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GEN = r"""
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
import numpy as np, pyarrow as pa
from gpu_triage.model import HostInfo
from gpu_triage.trace.layout import trace_metadata
from gpu_triage.trace.schema import TRACE_SCHEMA
from gpu_triage.trace.target import write_parquet_atomic

root, hosts, days, gpus = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
verdicts = sys.argv[5] == "1"
hours = int(sys.argv[6]) if len(sys.argv) > 6 else 24
INTERVAL, N, CORES = 2.0, 1800, 32
rng = np.random.default_rng(0)
gpu_t = TRACE_SCHEMA.field("gpus").type.value_type
start0 = datetime(2026, 1, 1, tzinfo=UTC)

def col(field, n):
    t = field.type
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], t.value_type))
    return pa.nulls(n, t)

def hour(ts0):
    n, m = N, N * gpus
    ts = (ts0 + np.arange(1, n + 1) * INTERVAL * 1e6).astype("int64")
    base = rng.uniform(20, 95, gpus)
    fields = {}
    for f in gpu_t:
        name = f.name
        if name == "index":
            a = np.tile(np.arange(gpus, dtype=np.uint16), n)
        elif name.endswith("_pct"):
            a = np.clip(np.repeat(base[None, :], n, 0).ravel() + rng.normal(0, 8, m), 0, 100)
        elif name == "mem_total_bytes":
            a = np.full(m, 141 * 2**30, np.uint64)
        elif name == "mem_used_bytes":
            a = rng.integers(2**33, 2**37, m).astype(np.uint64)
        elif name in ("power_w", "temp_c", "sm_clock_mhz") or name.endswith("_per_s"):
            a = rng.uniform(50, 700, m)
        else:
            fields[name] = pa.nulls(m, f.type)
            continue
        fields[name] = pa.array(a).cast(f.type)
    cards = pa.StructArray.from_arrays([fields[f.name] for f in gpu_t], fields=list(gpu_t))
    cols = {
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "interval_s": pa.array(np.full(n, INTERVAL)),
        "gpus": pa.ListArray.from_arrays(pa.array(np.arange(0, m + 1, gpus, dtype=np.int32)), cards),
        "cpu_pct": pa.ListArray.from_arrays(pa.array(np.arange(0, n * CORES + 1, CORES, dtype=np.int32)),
                                            pa.array(rng.uniform(0, 100, n * CORES).astype(np.float32))),
        "iowait_pct": pa.array(rng.uniform(0, 5, n).astype(np.float32)),
        "host_mem_used_bytes": pa.array(np.full(n, 2**38, np.uint64)),
        "host_mem_total_bytes": pa.array(np.full(n, 2**40, np.uint64)),
    }
    if verdicts:
        vt = TRACE_SCHEMA.field("verdict").type
        pick = rng.integers(0, 3, n)
        words = [("sawtooth", "data_pipeline", "data_pipeline"), ("steady_high", "none", "none"),
                 ("steady_low", "communication", "communication")]  # the engine's words (diagnosis/vocab.py)
        kids = [pa.array([words[i][k] for i in pick]) for k in range(3)]
        kids.append(pa.array(["likely"] * n))
        kids.append(pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.uint16())))
        cols["verdict"] = pa.StructArray.from_arrays(kids, fields=list(vt))
    arrays = [cols.get(f.name) if f.name in cols else col(f, n) for f in TRACE_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA)

for h in range(hosts):
    info = HostInfo(hostname=f"gpu{h:03d}", cpu_count=CORES)
    meta = trace_metadata(info, INTERVAL)
    for d in range(days):
        day = start0 + timedelta(days=d)
        folder = root / f"host=gpu{h:03d}" / f"date={day:%Y-%m-%d}"
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(hours):
            t0 = day + timedelta(hours=k)
            table = hour(t0.timestamp() * 1e6).replace_schema_metadata(meta)
            write_parquet_atomic(table, folder / f"{t0:%H%M%S}-abc{h:03d}.parquet")
"""

QUERY = r"""
import sys, time
engine, root = sys.argv[1], sys.argv[2]
if engine == "duckdb":
    import duckdb
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # it writes to stdout, where the figure goes
    sql = (f"SELECT host, g.index AS gpu, avg(g.util_pct) AS util FROM (SELECT host, unnest(gpus) AS g "
           f"FROM read_parquet('{root}/host=*/date=*/*.parquet', hive_partitioning = true)) GROUP BY ALL")
    run = lambda: con.sql(sql).fetchall()
else:
    import polars as pl
    q = (pl.scan_parquet(f"{root}/host=*/date=*/*.parquet", hive_partitioning=True).select("host", "gpus")
         .explode("gpus").select("host", pl.col("gpus").struct.field("index").alias("gpu"),
                                 pl.col("gpus").struct.field("util_pct"))
         .group_by("host", "gpu").agg(pl.col("util_pct").mean().alias("util")))
    run = lambda: q.collect()
t0 = time.perf_counter()
rows = len(run())
print(f"{time.perf_counter() - t0:.3f} {rows}")
"""

FLEET = r"""
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from bench_fleet_stored import generate
generate(Path(sys.argv[1]), int(sys.argv[2]) * int(sys.argv[3]), int(sys.argv[3]), int(sys.argv[4]), True)
"""

RUN = r"""
import resource, sys, time
from gpu_triage.cli import main
t0 = time.perf_counter()
rc = main(sys.argv[1:])
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"BENCH rc={rc} wall={wall:.1f}s cpu={me.ru_utime + me.ru_stime:.1f}s "
      f"workers_cpu={kids.ru_utime + kids.ru_stime:.1f}s peak_rss={me.ru_maxrss / 1024:.0f}MB "
      f"worker_peak_rss={kids.ru_maxrss / 1024:.0f}MB", file=sys.stderr)
"""


def disk_bytes(root: Path) -> tuple[int, int]:
    """Every regular file under ``root`` (the daily files, and anything else a layout keeps beside them)."""
    files = [f for f in root.rglob("*") if f.is_file()]
    return len(files), sum(f.stat().st_size for f in files)


def query(engine: str, root: Path, repeat: int) -> str:
    best, rows = float("inf"), "?"
    for i in range(repeat + 1):  # the first run warms the page cache and is not counted
        out = subprocess.run([sys.executable, "-c", QUERY, engine, str(root)], capture_output=True,
                             text=True, check=False)
        if out.returncode:
            return f"failed: {out.stderr.strip().splitlines()[-1:]}"
        wall, rows = out.stdout.split()[-2:]
        if i:
            best = min(best, float(wall))
    return f"{best:.2f} s ({rows} rows)"


def compact(root: Path, workers: int | None, env: dict[str, str], label: str, host_days: int) -> None:
    cmd = [sys.executable, "-c", RUN, "compact", str(root)] + (["--workers", str(workers)] if workers else [])
    n0, before = disk_bytes(root)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    bench = next((x for x in out.stderr.splitlines() if x.startswith("BENCH")), out.stderr[-500:])
    n1, after = disk_bytes(root)
    fields = dict(kv.split("=", 1) for kv in bench.removeprefix("BENCH ").split())
    try:
        cpu = float(fields["cpu"].rstrip("s")) + float(fields.get("workers_cpu", "0s").rstrip("s"))
        per_day = f"; {cpu:.1f} CPU s in all, {cpu / host_days:.2f} CPU s a host-day"
    except (KeyError, ValueError):
        per_day = ""
    print(f"compact ({label}): {bench.removeprefix('BENCH ')}{per_day}\n  {out.stdout.strip()}\n"
          f"  on disk: {n0} files {before / 2**20:.1f} MiB -> {n1} files {after / 2**20:.1f} MiB "
          f"({after / before:.2f}x the input)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--data", choices=("noise", "fleet"), default="noise")
    ap.add_argument("--workers", type=int, help="compact's --workers (default: its own, one per usable core)")
    ap.add_argument("--tree", help="another checkout's app/ directory: its compact first, on a copy of the files")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each query (the best is printed)")
    ap.add_argument("--no-queries", action="store_true", help="time compact only")
    ap.add_argument("--dir", help="where to generate (default: a temporary directory, removed after)")
    ap.add_argument("--keep", action="store_true", help="keep --dir afterwards")
    ap.add_argument("--reuse", action="store_true",
                    help="use the hourly files --dir holds already (kept by --keep before compact ran)")
    ap.add_argument("--recompute", action="store_true", help="also time verdicts computed for one host-hour")
    args = ap.parse_args()
    tmp = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-compact-"))
    root = tmp / "fleet"
    host_days = args.hosts * args.days
    try:
        t0 = time.perf_counter()
        if not (args.reuse and root.is_dir()):
            if args.data == "fleet":
                subprocess.run([sys.executable, "-c", FLEET, str(root), str(args.hosts), str(args.days),
                                str(args.gpus), str(Path(__file__).parent)], check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            else:
                subprocess.run([sys.executable, "-c", GEN, str(root), str(args.hosts), str(args.days),
                                str(args.gpus), "1"], check=True)
        n, size = disk_bytes(root)
        print(f"generated {host_days} host-days ({args.data}), {n} hourly files, {size / 2**20:.0f} MiB "
              f"in {time.perf_counter() - t0:.0f} s")
        if not args.no_queries:
            for engine in ("duckdb", "polars"):
                print(f"per-GPU util, hourly files  {engine:7s} {query(engine, root, args.repeat)}")
        if args.tree:
            other = tmp / "fleet-tree"
            shutil.rmtree(other, ignore_errors=True)
            shutil.copytree(root, other)
            env = dict(os.environ, PYTHONPATH=str(Path(args.tree).resolve()))
            compact(other, None, env, f"--tree {args.tree}", host_days)
            shutil.rmtree(other, ignore_errors=True)
        compact(root, args.workers, dict(os.environ), "this tree", host_days)
        if not args.no_queries:
            for engine in ("duckdb", "polars"):
                print(f"per-GPU util, daily files   {engine:7s} {query(engine, root, args.repeat)}")
        if args.recompute:
            small = tmp / "recompute"
            subprocess.run([sys.executable, "-c", GEN, str(small), "1", "1", str(args.gpus), "0", "1"], check=True)
            compact(small, 1, dict(os.environ), "one host-hour without verdicts", 1)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
