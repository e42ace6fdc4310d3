"""What following a job log costs per tick (--job-log): printed figures, no assertions.

Three writers: a steady tqdm bar (10 redraws per second, the usual), a flood (16 MB of tqdm lines between two
ticks: a writer far faster than the 2 s tick), and a 1 GiB line (sparse file: no disk used). For each, the
CPU time of one LogTracker.sample() (read, split, parse newest-first) and the largest buffer kept.
Run: .venv/bin/python benchmarks/bench_joblog.py
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from gpu_triage.sources.job import LogTracker  # noqa: E402
from gpu_triage.sources.joblog import parse_line  # noqa: E402


def bar(i: int) -> bytes:
    return b"\rtrain: %d%%|#####     | %d/100000 [00:10<00:10, 48.21it/s, loss=0.1234]" % (i % 100, i)


def cpu_ms(fn) -> float:
    t = time.process_time()
    fn()
    return (time.process_time() - t) * 1000


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "train.log"
        log.write_bytes(b"")
        tr = LogTracker(log, batch_size=64)
        tr.sample(0.0, 2.0)
        # steady: 20 redraws per 2 s tick
        costs = []
        for k in range(200):
            with open(log, "ab") as fh:
                fh.write(b"".join(bar(k * 20 + j) for j in range(20)))
            costs.append(cpu_ms(lambda k=k: tr.sample(2.0 * k, 2.0)))
        costs.sort()
        print(f"steady tqdm (20 redraws per tick): median {costs[len(costs) // 2]:.3f} ms CPU per tick, "
              f"max {costs[-1]:.3f} ms")
        # flood: 16 MB between two ticks
        chunk = b"".join(bar(i) for i in range(200_000))[: 16 << 20]
        with open(log, "ab") as fh:
            fh.write(chunk)
        ms = cpu_ms(lambda: tr.sample(1000.0, 2.0))
        print(f"flood ({len(chunk) / 1e6:.0f} MB of tqdm redraws in one tick): {ms:.0f} ms CPU for that tick, "
              f"then caught up; skipped {tr.follower.skipped_bytes / 1e6:.1f} MB")
        # 1 GiB line
        before = tr.follower.skipped_bytes
        with open(log, "r+b") as fh:
            end = fh.seek(0, os.SEEK_END)
            fh.truncate(end + (1 << 30))
            fh.seek(end + (1 << 30))
            fh.write(bar(7) + b"\n")
        ms = cpu_ms(lambda: tr.sample(1002.0, 2.0))
        print(f"1 GiB line: {ms:.1f} ms CPU, {(tr.follower.skipped_bytes - before) / 2**30:.2f} GiB skipped, "
              f"partial line kept {len(tr.follower._partial)} bytes")
        # hostile lines: 8 lines of 8190 '1's (quadratic for a tqdm pattern that backtracks), then a
        # tick's worth of lines at the parse cap
        log.write_bytes(("1" * 8190 + "\n").encode() * 8)
        digits = LogTracker(log)
        ms = cpu_ms(lambda: digits.sample(0.0, 2.0))
        print(f"8 lines of 8190 '1's (the issue's log): {ms:.1f} ms CPU for the tick")
        log.write_bytes((("global_step=1 RunningAvgSamplesPerSec=1 " * 200)[:8190] + "\n").encode() * 2000)
        flood = LogTracker(log)
        flood.follower.tail_start = flood.follower.budget = 32 << 20
        ms = cpu_ms(lambda: flood.sample(0.0, 2.0))
        print(f"2000 adversarial 8 KiB lines in one tick: {ms:.0f} ms CPU, {flood.parsed_chars / 1024:.0f} KiB parsed")
        for n in (1024, 8192):
            line = "1" * n
            t = time.perf_counter()
            for _ in range(20):
                parse_line(line)
            print(f"parse_line('1' * {n}): {(time.perf_counter() - t) / 20 * 1e3:.2f} ms")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this benchmark process: {rss:.0f} MB")
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
