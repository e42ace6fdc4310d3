"""Side-by-side cost of terminal GPU monitors: CPU seconds, peak RSS and terminal bytes per second.

Each command runs in its own pseudo-terminal (so full-screen tools draw as they would over SSH) for the
same number of seconds; we drain and count what it writes, sample its RSS every second, and read its CPU
time (children included) just before stopping it: over the whole run (start-up included) and in the steady
state after --warmup seconds.

    python benchmarks/compare_monitors.py --seconds 60 \
        --cmd "gpu-triage=python3 -m gpu_triage --interval 2" \
        --cmd "nvitop=nvitop --interval 2" \
        --cmd "dmon=nvidia-smi dmon -d 2"

Prints one table row per command. Commands that are not installed are reported as such.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shlex
import shutil
import signal
import struct
import sys
import termios
import time

import psutil


def _cpu_of(proc: psutil.Process) -> float:
    """CPU seconds of a process and all its descendants, living and reaped."""
    t = proc.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in proc.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


def run_one(
    label: str, argv: list[str], seconds: float, cols: int, rows: int, warmup: float = 0.0
) -> dict[str, object]:
    if shutil.which(argv[0]) is None:
        return {"label": label, "error": f"{argv[0]} not found"}
    pid, fd = pty.fork()
    if pid == 0:  # child: the monitor, on the pty
        os.environ["TERM"] = "xterm-256color"
        os.environ["COLUMNS"], os.environ["LINES"] = str(cols), str(rows)
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = psutil.Process(pid)
    written = 0
    peak_rss = 0
    cpu = 0.0
    cpu_at_warm: float | None = None
    warm_at = 0.0
    started = time.monotonic()
    next_probe = started
    while (now := time.monotonic()) - started < seconds:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            written += len(chunk)
        if now >= next_probe:
            next_probe = now + 1.0
            try:
                family = [proc, *proc.children(recursive=True)]
                peak_rss = max(peak_rss, sum(p.memory_info().rss for p in family))
                cpu = _cpu_of(proc)
                if cpu_at_warm is None and now - started >= warmup:
                    cpu_at_warm = cpu
                    warm_at = now
            except psutil.Error:
                break
    elapsed = time.monotonic() - started
    steady = None
    if cpu_at_warm is not None and elapsed - (warm_at - started) > 1:
        steady = 100 * (cpu - cpu_at_warm) / (started + elapsed - warm_at)
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    if not os.read(fd, 65536):
                        break
                except OSError:
                    break
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    os.close(fd)
    return {
        "label": label,
        "seconds": round(elapsed, 1),
        "cpu_s": round(cpu, 2),
        "cpu_pct_of_core": round(100 * cpu / elapsed, 2),
        "steady_cpu_pct_of_core": None if steady is None else round(steady, 2),
        "peak_rss_mb": round(peak_rss / 1e6, 1),
        "tty_bytes_per_s": round(written / elapsed),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cols", type=int, default=120)
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument(
        "--warmup",
        type=float,
        default=10.0,
        help="seconds after start before the steady-state CPU figure starts counting (start-up excluded)",
    )
    ap.add_argument("--cmd", action="append", required=True, metavar="LABEL=COMMAND")
    args = ap.parse_args()
    print(
        f"{'tool':<22}{'seconds':>8}{'CPU s':>8}{'% core':>8}{'steady %':>10}{'peak RSS MB':>13}{'tty B/s':>9}"
    )
    for spec in args.cmd:
        label, _, command = spec.partition("=")
        r = run_one(label, shlex.split(command), args.seconds, args.cols, args.rows, args.warmup)
        if "error" in r:
            print(f"{label:<22}{r['error']}")
        else:
            print(
                f"{label:<22}{r['seconds']:>8}{r['cpu_s']:>8}{r['cpu_pct_of_core']:>8}"
                f"{r['steady_cpu_pct_of_core'] if r['steady_cpu_pct_of_core'] is not None else 'n/a':>10}"
                f"{r['peak_rss_mb']:>13}{r['tty_bytes_per_s']:>9}"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
