"""Start-up to the first frame: seconds (and CPU seconds) from exec to the dashboard's first painted frame.

    python benchmarks/bench_startup.py [--runs 5] [--size 160x50] [--cmd "live"] [--cmd "demo healthy --gpus 2"]

Each run starts `python -m gpu_triage ARGS` in its own pseudo-terminal (TERM=xterm-256color, as over SSH),
reads what it writes until the key line of the first frame ("q quit") appears, and notes the wall time and
the process's CPU time (user + system) at that moment; the process is then killed. Prints, per command, the
median and the range over --runs, and with --importtime the ten slowest imports of one more start
(`python -X importtime`, cumulative microseconds).

Default commands: `live` (the real source: NVML, psutil; without a driver it shows the host only) and
`demo healthy --gpus 2`. Target (issue 15): first frame <= 1 s on the GPU machine.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shlex
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time

import psutil

MARKER = b"q quit"


def first_frame(args: list[str], cols: int, rows: int, timeout_s: float = 30.0) -> tuple[float, float]:
    """(wall seconds, CPU seconds) from exec to the first frame's key line; nan when it never came."""
    began = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:  # child: the dashboard, as a user starts it
        os.environ["TERM"] = "xterm-256color"
        os.environ["COLORTERM"] = "truecolor"
        os.execv(sys.executable, [sys.executable, "-m", "gpu_triage", *args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = psutil.Process(pid)
    seen = b""
    wall = cpu = float("nan")
    while time.monotonic() - began < timeout_s:
        if select.select([fd], [], [], 0.02)[0]:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
            if MARKER in seen:
                wall = time.monotonic() - began
                t = proc.cpu_times()
                cpu = t.user + t.system
                break
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(fd)
    return wall, cpu


def slowest_imports(args: list[str], top: int = 10) -> list[str]:
    """The slowest cumulative imports of `-X importtime` for a command that stops right after importing."""
    code = (
        "import sys; from gpu_triage import cli; ns = cli.build_parser().parse_args(sys.argv[1:]); "
        "cli.prepare_imports(ns); import gpu_triage.ui.run, gpu_triage.ui.app; "
        + ("import gpu_triage.sources.live" if not args or args[0] == "live" else "import gpu_triage.sources.sim")
    )
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args], capture_output=True, text=True, check=False
    ).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    rows.sort(reverse=True)
    return [f"{us / 1000:8.1f} ms {name}" for us, name in rows[:top]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--size", default="160x50")
    ap.add_argument("--cmd", action="append", metavar="ARGS", help="gpu-triage arguments (repeatable)")
    ap.add_argument("--importtime", action="store_true", help="also print the slowest imports of each command")
    a = ap.parse_args()
    cols, rows = (int(v) for v in a.size.split("x"))
    for spec in a.cmd or ["live", "demo healthy --gpus 2"]:
        args = shlex.split(spec)
        runs = [first_frame(args, cols, rows) for _ in range(a.runs)]
        walls = [w for w, _ in runs if w == w]
        cpus = [c for _, c in runs if c == c]
        if not walls:
            print(f"{spec:<28} no first frame within 30 s")
            continue
        print(
            f"{spec:<28} first frame {statistics.median(walls):.2f} s (range {min(walls):.2f}-{max(walls):.2f}), "
            f"CPU {statistics.median(cpus):.2f} s (range {min(cpus):.2f}-{max(cpus):.2f}), {len(walls)} runs, "
            f"{cols}x{rows}"
        )
        if a.importtime:
            for line in slowest_imports(args):
                print("   ", line)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
