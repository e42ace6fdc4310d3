"""One tick of the pulse reader over a directory someone filled with 100,000 pulse files.

A flood of files costs the reader a directory listing and at most ``MAX_PULSE_FILES`` opens a tick, not an
open and a read of every file (which took 2.1-2.3 s a tick, longer than the tick). Prints milliseconds per
tick for the flooded directory and for one of two ranks only.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

FLOOD = 100_000


def _tick_ms(reader: object, ticks: int = 5) -> float:
    best = float("inf")
    for _ in range(ticks):
        t = time.perf_counter()
        reader.sample(now=time.time(), interval_s=2.0)  # type: ignore[attr-defined]
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    logging.getLogger("gpu_triage").setLevel(logging.ERROR)  # the "not read" warning is the point, not output
    from gpu_triage import pulse
    from gpu_triage.sources.pulsereader import MAX_PULSE_FILES, PID_MAX, PulseReader

    with tempfile.TemporaryDirectory() as d:
        rec = {"rank": 0, "t": time.time(), "steps": 1, "samples": 1, "pid": os.getpid()}
        Path(d, f"pulse-{os.getpid()}.json").write_bytes(pulse.encode_record(rec))
        Path(d, f"pulse-{os.getppid()}.json").write_bytes(pulse.encode_record({**rec, "rank": 1, "pid": os.getppid()}))
        two = _tick_ms(PulseReader(d))
        body = b"x" * 512
        for pid in range(PID_MAX - FLOOD + 1, PID_MAX + 1):
            with open(os.path.join(d, f"pulse-{pid}.json"), "wb") as f:
                f.write(body)
        flooded = _tick_ms(PulseReader(d))
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}")
    print(f"two ranks: {two:.2f} ms per tick")
    print(f"{FLOOD:,} more pulse files: {flooded:.1f} ms per tick (at most {MAX_PULSE_FILES} opened)")


if __name__ == "__main__":
    main()
