"""What owner attribution costs per GPU process: the first look (cgroup, status and environ read from
/proc and parsed) and every later tick (a cache hit on (pid, start time)), on this machine's own processes,
and parsing alone on the layouts kept in tests/data/cgroup/.

    .venv/bin/python benchmarks/bench_owner.py [--rounds 20]

Printed: microseconds per process for a cold read (a new reader each round, so nothing is cached), per
cached lookup, and per parse of each kept layout. The dashboard pays the cold read once per process and
the cached lookup every tick.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from gpu_triage.sources.owner import OwnerReader, parse_cgroup

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "cgroup"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:200]
    cold, hot = [], []
    for _ in range(args.rounds):
        reader = OwnerReader()
        t = time.perf_counter()
        for pid in pids:
            reader.owner(pid, 1.0)
        cold.append((time.perf_counter() - t) / len(pids) * 1e6)
        t = time.perf_counter()
        for pid in pids:
            reader.owner(pid, 1.0)
        hot.append((time.perf_counter() - t) / len(pids) * 1e6)
    print(f"machine: {os.cpu_count()} cores; {len(pids)} processes of this machine, {args.rounds} rounds")
    print(f"  first look (3 procfs reads + parse): median {statistics.median(cold):.1f} us per process")
    print(f"  cached (same pid and start time):     median {statistics.median(hot):.2f} us per process")
    for layout in sorted(p for p in DATA.iterdir() if p.name != "README.md"):
        text = layout.read_text()
        n = 2000
        t = time.perf_counter()
        for _ in range(n):
            parse_cgroup(text)
        print(f"  parse {layout.name:<28} {(time.perf_counter() - t) / n * 1e6:6.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
