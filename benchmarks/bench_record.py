"""Why the headless recorder's RSS is what it is: RSS after each import stage, then over a recording.

    .venv/bin/python benchmarks/bench_record.py [--source sim:data_pipeline|live] [--seconds 30] [--interval 0.5]
                                                [--gpus 8] [--tree OTHER/app] [--verdict-ticks 600]

Prints the RSS after Python, the live source (psutil, NVML) and the recorder, and which of Textual, polars,
pyarrow and numpy a `record` loads (numpy: the engine that gives each tick its verdict, trace v3; never
pyarrow: it writes its Arrow stream itself and converts it to Parquet in a child at the stop). Then the
verdict's own cost per tick (trace v3): --verdict-ticks simulated ticks of --gpus cards through
`verdicts.judge.Judge` in this process, the window full, CPU per tick (median, p95). Then runs
`gpu-triage record` as a child for --seconds and prints its RSS every 10 s (flat = no leak) and its CPU per
tick; with --tree, the same child once more from another checkout's app/ directory (before/after).
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
import gpu_triage.recording.headless, gpu_triage.trace.writer, gpu_triage.cli; show("recorder + cli")
try:
    import gpu_triage.verdicts.judge, gpu_triage.diagnosis.engine; show("the engine (verdict per tick)")
except ImportError:
    pass
heavy = [m for m in ("textual", "polars", "rich", "plotext", "pyarrow", "numpy") if m in sys.modules]
print("  heavy modules loaded by record:", heavy or "none")
"""


def verdict_cost(gpus: int, ticks: int) -> None:
    """The verdict's CPU per tick: the judge alone, on simulated ticks made beforehand."""
    from gpu_triage.config import Config
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.verdicts.judge import Judge

    source = SimulatedSource("data_pipeline", gpus=gpus, cores=32, seed=1)
    made = [source.sample() for _ in range(ticks)]
    config = Config()
    judge = Judge(config.thresholds, config.window_s, 2.0, 32)
    costs = []
    for i, tick in enumerate(made):
        t0 = time.process_time()
        judge.take(tick, fresh=i == 0).stamped()
        costs.append(time.process_time() - t0)
    full = sorted(costs[150:] or costs)  # once the window holds its 150 ticks
    med, p95 = full[len(full) // 2], full[int(len(full) * 0.95)]
    print(f"verdict per tick ({gpus} cards, 32 cores, window full): CPU median {1000 * med:.2f} ms, "
          f"p95 {1000 * p95:.2f} ms; {100 * med / 2.0:.3f} % of a core at a 2 s tick")


def run_child(args: argparse.Namespace, env: dict[str, str], label: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rec.parquet"
        cmd = [sys.executable, "-m", "gpu_triage", "record", "-o", str(out), "--source", args.source,
               "--interval", str(args.interval)]
        if args.source != "live":
            cmd += ["--gpus", str(args.gpus)]
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        proc = psutil.Process(child.pid)
        began = time.monotonic()
        time.sleep(3)
        cpu0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        peak = 0.0
        while time.monotonic() - began < args.seconds:
            time.sleep(min(10.0, max(0.1, args.seconds - (time.monotonic() - began))))
            rss = proc.memory_info().rss / 2**20
            peak = max(peak, rss)
            print(f"  {label} {time.monotonic() - began:5.0f} s  RSS {rss:6.1f} MB")
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        elapsed = time.monotonic() - t0
        os.kill(child.pid, signal.SIGINT)
        child.wait(timeout=60)
        ticks = elapsed / args.interval
        print(
            f"{label}: record {args.source} every {args.interval:g} s: CPU {100 * cpu / elapsed:.2f} % of one core, "
            f"{1000 * cpu / ticks:.2f} ms CPU per tick (sampling, verdict, writing); RSS peak {peak:.1f} MB"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="sim:data_pipeline")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--verdict-ticks", type=int, default=600)
    ap.add_argument("--tree", help="another checkout's app/ directory: its `record` measured the same way")
    args = ap.parse_args()
    print("record: RSS by import stage")
    subprocess.run([sys.executable, "-c", STAGES], check=True)
    if args.verdict_ticks:
        verdict_cost(args.gpus, args.verdict_ticks)
    run_child(args, dict(os.environ), "this tree")
    if args.tree:
        env = dict(os.environ, PYTHONPATH=str(Path(args.tree).resolve()))
        run_child(args, env, "--tree")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
