"""What sampling a job's stacks costs the job: one training-like loop of short GPU steps, timed step by step,
with nothing watching and with lab/stack_sampler.py dumping it every 2 s or every 0.5 s, the phases
alternating (none, 2 s, none, 0.5 s, ...) so that the card's clocks drifting as it warms fall on both sides.

usage: python3 pyspy_cost.py OUT.json [--secs 20]

Each phase prints and writes the step time's mean, median and 99th percentile, and the sampler's own CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

DEV = os.environ.get("DEV", "cuda")


def phase(secs: float, step) -> list[float]:
    times = []
    t_end = time.time() + secs
    while time.time() < t_end:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--secs", type=float, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layers", type=int, default=8, help="matmuls per step: 8 is a short step, 800 a long one")
    a = p.parse_args()
    d = 4096 if DEV == "cuda" else 256
    w = torch.randn(d, d, device=DEV, dtype=torch.bfloat16 if DEV == "cuda" else torch.float32)
    x = torch.randn(256, d, device=DEV, dtype=w.dtype)

    def step() -> None:
        h = x
        for _ in range(a.layers):
            h = torch.relu(h @ w)
        if DEV == "cuda":
            torch.cuda.synchronize()

    phase(3, step)  # warm-up: cuBLAS handles, clocks
    here = os.path.dirname(os.path.abspath(__file__))
    pidfile = f"/tmp/pyspy-cost-{os.getpid()}.pid"
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    results = []
    for every in [e for _ in range(a.rounds) for e in (None, 2.0, None, 0.5)]:
        sampler = None
        if every:
            sampler = subprocess.Popen([sys.executable, f"{here}/stack_sampler.py", pidfile, f"/tmp/pyspy-cost-{every}.jsonl",
                                        "--every", str(every)], stdout=subprocess.PIPE, text=True)
            time.sleep(0.5)
        ts = phase(a.secs, step)
        cost = None
        if sampler:
            sampler.terminate()  # it finishes the sample in hand and prints its cost
            out, _ = sampler.communicate(timeout=30)
            cost = out.strip() or None
        ts_ms = sorted(t * 1000 for t in ts)
        row = {"sampling_every_s": every, "steps": len(ts), "mean_ms": round(statistics.fmean(ts_ms), 3),
               "p50_ms": round(ts_ms[len(ts_ms) // 2], 3), "p99_ms": round(ts_ms[int(len(ts_ms) * 0.99)], 3),
               "max_ms": round(ts_ms[-1], 3), "sampler": cost}
        print(json.dumps(row), flush=True)
        results.append(row)
    with open(a.out, "w") as f:
        json.dump({"torch": torch.__version__, "device": DEV, "layers": a.layers, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
