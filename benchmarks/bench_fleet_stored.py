"""`diagnose DIR --summary` over many host-days of trace-v3 files whose verdicts are stored.

    .venv/bin/python benchmarks/bench_fleet_stored.py [--host-days 1000] [--days 10] [--gpus 8] [--hourly]
                                                      [--dir /tmp/bench-stored] [--keep] [--workers N]

Generates the dataset cheaply: each file's Arrow table is built with vectorised pyarrow calls (no Tick
objects), in the full trace schema (every column and field, written as the recorder writes its Parquet:
`trace.target.write_parquet_atomic`), with only what the summary reads filled in: `ts`, `interval_s`, each
card's `index`, `util_pct` (whole per cent, as NVML gives it), `mem_used_bytes` and `mem_total_bytes`, one GPU
process per card with its Slurm job and user, and the `verdict` column in runs of bottlenecks (lengths drawn
from an exponential distribution, mean 10 minutes; GPU-Util shaped by each run's bottleneck); every other
field null, every other list empty. One file per host and day (8 cards, 2 s: 43,200 ticks, as `compact`
leaves a day), or 24 hourly files per host-day with `--hourly` (as `record -o DIR/` writes them).

Then runs `gpu-triage diagnose DIR --summary --json` in a child process and prints its wall time, its CPU
time and that of the worker processes it started (getrusage of the child and its children), the child's peak
RSS, and the files' count and size. The dataset is deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

TICK_S = 2.0
DAY_TICKS = int(86400 / TICK_S)
# bottleneck -> (pattern, share of the time, GPU-Util mean, spread)
REGIMES = {
    "none": ("steady_high", 0.45, 95.0, 3.0),
    "data_pipeline": ("sawtooth", 0.25, 45.0, 25.0),
    "storage_io": ("sawtooth", 0.08, 30.0, 20.0),
    "communication": ("steady_low", 0.08, 60.0, 10.0),
    "memory_idle": ("idle", 0.08, 0.0, 0.0),
    "launch_overhead": ("steady_low", 0.06, 55.0, 8.0),
}
RUN_MEAN_TICKS = 300  # 10 minutes


def _nulls_struct(typ: pa.StructType, n: int, given: dict[str, pa.Array]) -> pa.StructArray:
    arrays = [given.get(typ.field(i).name, pa.nulls(n, typ.field(i).type)) for i in range(typ.num_fields)]
    return pa.StructArray.from_arrays(arrays, fields=[typ.field(i) for i in range(typ.num_fields)])


def _lists(typ: pa.ListType, offsets: np.ndarray, values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=typ)


def _empty_lists(typ: pa.DataType, n: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], typ.value_type),
                                    type=typ)


def day_table(schema: pa.Schema, start: datetime, ticks: int, gpus: int, rng: np.random.Generator,
              job: str) -> pa.Table:
    """One file's table: ``ticks`` ticks of ``gpus`` cards from ``start``."""
    n, g = ticks, gpus
    first_us = int(start.timestamp() * 1e6)
    ts = pa.array(first_us + (np.arange(1, n + 1, dtype=np.int64) * int(TICK_S * 1e6)), pa.timestamp("us", "UTC"))
    # the verdicts in runs, and GPU-Util shaped by each run's bottleneck
    names = list(REGIMES)
    shares = np.array([REGIMES[b][1] for b in names])
    lengths = np.maximum(1, rng.exponential(RUN_MEAN_TICKS, size=n // 10 + 10).astype(np.int64))
    ends = np.cumsum(lengths)
    runs = int(np.searchsorted(ends, n)) + 1
    which = rng.choice(len(names), size=runs, p=shares / shares.sum())
    per_tick = np.repeat(which, lengths[:runs])[:n]
    mean = np.array([REGIMES[b][2] for b in names])[per_tick]
    spread = np.array([REGIMES[b][3] for b in names])[per_tick]
    util = np.clip(np.rint(mean[:, None] + spread[:, None] * rng.uniform(-1, 1, size=(n, g))), 0, 100)
    gpu_t = schema.field("gpus").type
    gpu_values = _nulls_struct(gpu_t.value_type, n * g, {
        "index": pa.array(np.tile(np.arange(g, dtype=np.uint16), n)),
        "util_pct": pa.array(util.reshape(-1).astype(np.float32)),
        "mem_used_bytes": pa.array(np.full(n * g, 100 * 2**30, dtype=np.uint64)),
        "mem_total_bytes": pa.array(np.full(n * g, 141 * 2**30, dtype=np.uint64)),
    })
    every_card = np.arange(0, (n + 1) * g, g, dtype=np.int32)
    proc_t = schema.field("procs").type
    proc_values = _nulls_struct(proc_t.value_type, n * g, {
        "pid": pa.array(np.tile(np.arange(1000, 1000 + g, dtype=np.uint32), n)),
        "gpu_index": pa.array(np.tile(np.arange(g, dtype=np.uint16), n)),
        "name": pa.DictionaryArray.from_arrays(np.zeros(n * g, np.int32), ["python"]).cast(pa.string()),
        "user": pa.DictionaryArray.from_arrays(np.zeros(n * g, np.int32), ["alice"]).cast(pa.string()),
        "slurm_job": pa.DictionaryArray.from_arrays(np.zeros(n * g, np.int32), [job]).cast(pa.string()),
        "workers_cpu_pct": _empty_lists(proc_t.value_type.field("workers_cpu_pct").type, n * g),
        "worker_pids": _empty_lists(proc_t.value_type.field("worker_pids").type, n * g),
    })
    verdict_t = schema.field("verdict").type

    def words(table: list[str]) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array(per_tick.astype(np.int32)), table).cast(pa.string())

    verdict = _nulls_struct(verdict_t, n, {
        "pattern": words([REGIMES[b][0] for b in names]),
        "bottleneck": words(names),
        "mechanism": words(names),
        "confidence": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), ["likely"]).cast(pa.string()),
        "gpus": _lists(verdict_t.field("gpus").type, every_card, pa.array(np.tile(np.arange(g, dtype=np.uint16), n))),
    })
    columns = {
        "ts": ts,
        "interval_s": pa.array(np.full(n, TICK_S)),
        "gpus": _lists(gpu_t, every_card, gpu_values),
        "procs": _lists(proc_t, every_card, proc_values),
        "verdict": verdict,
    }
    arrays = []
    for f in schema:
        if f.name in columns:
            arrays.append(columns[f.name])
        elif pa.types.is_list(f.type):
            arrays.append(_empty_lists(f.type, n))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def generate(root: Path, host_days: int, days: int, gpus: int, hourly: bool) -> tuple[int, int, float]:
    from gpu_triage.model import GpuInfo, HostInfo
    from gpu_triage.trace.schema import schema_with_metadata
    from gpu_triage.trace.target import write_parquet_atomic

    hosts = max(1, host_days // days)
    rng = np.random.default_rng(28)
    began = time.perf_counter()
    files = size = 0
    day0 = datetime(2026, 11, 1, tzinfo=UTC)
    for h in range(hosts):
        host = HostInfo(hostname=f"gpu{h:04d}", cpu_count=64,
                        gpus=[GpuInfo(i, "NVIDIA H200", mem_total_bytes=141 * 2**30) for i in range(gpus)])
        schema = schema_with_metadata(host, TICK_S)
        for d in range(min(days, host_days - h * days)):
            date = day0 + timedelta(days=d)
            folder = root / f"host={host.hostname}" / f"date={date:%Y-%m-%d}"
            folder.mkdir(parents=True, exist_ok=True)
            table = day_table(schema, date, DAY_TICKS, gpus, rng, job=str(4000 + h * days + d))
            pieces = [(table.slice(k * 1800, 1800), date + timedelta(hours=k)) for k in range(24)] if hourly else [
                (table, date)]
            for piece, begins in pieces:
                target = folder / f"{begins:%H%M%S}-bench00.parquet"
                write_parquet_atomic(piece, target)
                files += 1
                size += target.stat().st_size
        print(f"  host {h + 1}/{hosts}: {files} files, {size / 1e6:.0f} MB, {time.perf_counter() - began:.0f} s",
              file=sys.stderr, flush=True)
    return files, size, time.perf_counter() - began


RUN = """
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host-days", type=int, default=1000)
    ap.add_argument("--days", type=int, default=10, help="days per host (hosts = host-days / days)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hourly", action="store_true", help="24 files a host-day, as record -o DIR/ writes them")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/bench-stored"))
    ap.add_argument("--keep", action="store_true", help="keep the dataset (and reuse it when it exists)")
    args = ap.parse_args()
    root = args.dir
    if root.exists() and not args.keep:
        raise SystemExit(f"{root} exists: remove it, or pass --keep to summarise it as it is")
    try:
        if not root.exists():
            files, size, took = generate(root, args.host_days, args.days, args.gpus, args.hourly)
            print(f"generated {args.host_days} host-days ({files} files, {size / 1e6:.0f} MB, "
                  f"{size / args.host_days / 1e6:.2f} MB a host-day) in {took:.0f} s")
        out = subprocess.run([sys.executable, "-c", RUN, "diagnose", str(root), "--summary", "--json"],
                             capture_output=True, text=True, check=False)
        line = next((x for x in out.stderr.splitlines() if x.startswith("BENCH")), out.stderr[-800:])
        result = json.loads(out.stdout) if out.stdout.strip() else {}
        print(f"diagnose DIR --summary of {args.host_days} host-days: {line.removeprefix('BENCH ')}; "
              f"{result.get('files')} files read, {result.get('recomputed_files')} recomputed, "
              f"{len(result.get('hosts', {}))} hosts")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
