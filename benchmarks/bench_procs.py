"""What the GPU process reader costs per tick: printed figures, no assertions.

The reader finds each GPU process's DataLoader workers through /proc/PID/task/TID/children (one file per
thread) and reads each process's CPU time. A training process has many threads (torch starts ~40), so the
file count, not the process count, sets the cost.

Two set-ups, both "a training process with 40 threads and 8 workers of 10 threads each" per card:
- a fake /proc tree (files under a temporary directory, a fake psutil): our own Python overhead per tick,
  at 1 and 8 cards;
- real processes (Linux only): one such family started here, read from the real /proc with the real
  psutil, so the kernel's side of each read is in the figure.

Run: .venv/bin/python benchmarks/bench_procs.py [--ticks 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gpu_triage.nvmlwrap import load_nvml  # noqa: E402
from gpu_triage.sources.procs import GpuProcessReader, descendants_procfs  # noqa: E402

MAIN_THREADS, WORKERS, WORKER_THREADS = 40, 8, 10
CpuTimes = namedtuple("CpuTimes", "user system")


class _FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def create_time(self) -> float:
        return 1.0

    def name(self) -> str:
        return "python"

    def cpu_times(self) -> CpuTimes:
        return CpuTimes(time.monotonic(), 0.5)


class _FakePsutil:
    """Only what the reader asks of psutil, near-free, so the figure is the reader's own cost."""

    LINUX = True
    NoSuchProcess = ProcessLookupError
    AccessDenied = PermissionError
    ZombieProcess = ProcessLookupError

    def Process(self, pid: int) -> _FakeProc:  # noqa: N802 - psutil's name
        return _FakeProc(pid)


def fake_proc_tree(root: Path, trainers: list[int]) -> None:
    """Each trainer pid: MAIN_THREADS threads, the main thread's children file lists WORKERS workers, each
    worker has WORKER_THREADS threads and no children (empty children files, as the kernel shows them);
    every process has a stat file (its CPU time)."""
    next_pid = 500_000
    for trainer in trainers:
        workers = list(range(next_pid, next_pid + WORKERS))
        next_pid += WORKERS * (WORKER_THREADS + 1)
        for pid, threads, kids in [(trainer, MAIN_THREADS, workers)] + [(w, WORKER_THREADS, []) for w in workers]:
            (root / str(pid)).mkdir(parents=True)
            (root / str(pid) / "stat").write_text(f"{pid} (python) S 1 {pid} {pid} 0 -1 0 0 0 0 0 {pid} 7 0 0 20\n")
            for n in range(threads):
                tid_dir = root / str(pid) / "task" / str(pid + n)
                tid_dir.mkdir(parents=True, exist_ok=True)
                text = "".join(f"{k} " for k in kids) if n == 0 else ""
                (tid_dir / "children").write_text(text)


def stats_us(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered) * 1e6:8.1f} µs  p95 {p95 * 1e6:8.1f} µs"


def cpu_per_tick(fn: Any, ticks: int) -> list[float]:
    out = []
    for _ in range(ticks):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return out


def wall_per_tick(fn: Any, ticks: int) -> list[float]:
    out = []
    for _ in range(ticks):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def bench_fake_tree(cards: int, ticks: int) -> None:
    from fake_nvml import FakeHandle, FakeProcess, h200_box  # noqa: PLC0415 - the test fake lives in tests/

    fake = h200_box(cards)
    trainers = [400_000 + 1000 * i for i in range(cards)]
    for card, pid in zip(fake.cards, trainers, strict=True):
        card.processes = [FakeProcess(pid=pid, usedGpuMemory=1 << 30)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fake_proc_tree(root, trainers)
        files = sum(1 for _ in root.glob("*/task/*/children"))
        reader = GpuProcessReader(
            load_nvml(fake),
            [(i, FakeHandle(i)) for i in range(cards)],
            _FakePsutil(),
            use_procfs=True,
            proc_root=root,
        )
        reader.sample()
        rows = reader.sample()
        assert all(r.workers == WORKERS for r in rows), rows
        walk = wall_per_tick(lambda: descendants_procfs(trainers[0], root), ticks)
        whole = wall_per_tick(reader.sample, ticks)
    print(f"fake /proc, {cards} card(s), {files} children files")
    print(f"  one family's walk (wall)     : {stats_us(walk)}")
    print(f"  reader.sample() (wall)       : {stats_us(whole)}")


_FAMILY = f"""
import multiprocessing as mp, threading, time, sys
def idle(n):
    for _ in range(n - 1):
        threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
    time.sleep(120)
if __name__ == "__main__":
    for _ in range({WORKERS}):
        mp.Process(target=idle, args=({WORKER_THREADS},), daemon=True).start()
    for _ in range({MAIN_THREADS} - 1):
        threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
    print("ready", flush=True)
    time.sleep(120)
"""


def bench_real(ticks: int) -> None:
    if not Path("/proc/self/task").is_dir():
        print("real /proc: not here")
        return
    import psutil  # noqa: PLC0415

    from fake_nvml import FakeHandle, FakeProcess, h200_box  # noqa: PLC0415

    family = subprocess.Popen([sys.executable, "-c", _FAMILY], stdout=subprocess.PIPE, text=True)
    try:
        assert family.stdout is not None
        family.stdout.readline()
        time.sleep(0.5)  # let every worker start its threads
        found = descendants_procfs(family.pid)
        if found is None:
            print("real /proc: the kernel has no /proc/PID/task/TID/children")
            return
        fake = h200_box(1)
        fake.cards[0].processes = [FakeProcess(pid=family.pid, usedGpuMemory=1 << 30)]
        reader = GpuProcessReader(load_nvml(fake), [(0, FakeHandle(0))], psutil, use_procfs=True)
        reader.sample()
        rows = reader.sample()
        threads = sum(len(os.listdir(f"/proc/{p}/task")) for p in [family.pid, *found])
        walk = cpu_per_tick(lambda: descendants_procfs(family.pid), ticks)
        whole = cpu_per_tick(reader.sample, ticks)
        print(f"real /proc, 1 family: {len(found)} descendants, {threads} threads, {rows[0].workers} workers seen")
        print(f"  one family's walk (CPU)      : {stats_us(walk)}")
        print(f"  reader.sample() (CPU)        : {stats_us(whole)}")
    finally:
        for pid in descendants_procfs(family.pid) or []:  # only the processes started here
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        family.kill()
        family.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    args = parser.parse_args()
    for cards in (1, 8):
        bench_fake_tree(cards, args.ticks)
    bench_real(args.ticks)


if __name__ == "__main__":
    main()
