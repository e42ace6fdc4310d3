"""Per-step cost of gpu_triage.pulse: a bare loop vs the same loop through pulse.watch, and pulse.step.

The target (issue #12): under 1 % of a 10 ms training step, i.e. under 100 us per step. The loop body is
empty so that what is left is pulse's own cost (two perf_counter calls, a few additions, and the file it
writes every PUBLISH_EVERY_S, amortised over the steps in between). Prints microseconds per step.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

STEPS = 200_000


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        os.environ["GPU_TRIAGE_PULSE_DIR"] = d
        from gpu_triage import pulse

        data = list(range(STEPS))
        best_bare = best_watch = best_step = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _b in iter(data):
                pass
            best_bare = min(best_bare, time.perf_counter() - t)
            t = time.perf_counter()
            for _b in pulse.watch(data, batch_size=64):
                pass
            best_watch = min(best_watch, time.perf_counter() - t)
            t = time.perf_counter()
            for _b in data:
                pulse.step(64)
            best_step = min(best_step, time.perf_counter() - t)
        # one publish (open, write, rename) on its own
        p = pulse._get()
        n = 2000
        t = time.perf_counter()
        for _ in range(n):
            p.publish()
        publish_us = (time.perf_counter() - t) / n * 1e6

    watch_us = (best_watch - best_bare) / STEPS * 1e6
    step_us = (best_step - best_bare) / STEPS * 1e6
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}")
    print(f"pulse.watch: {watch_us:.2f} us per step over a bare loop ({watch_us / 10_000 * 100:.3f} % of a 10 ms step)")
    print(f"pulse.step:  {step_us:.2f} us per step ({step_us / 10_000 * 100:.3f} % of a 10 ms step)")
    print(f"one publish (JSON + CRC + pwrite, every {pulse.PUBLISH_EVERY_S} s): {publish_us:.1f} us "
          f"({publish_us / (pulse.PUBLISH_EVERY_S * 1e6) * 100:.3f} % of wall time)")


if __name__ == "__main__":
    main()
