"""Side-by-side cost of terminal GPU monitors: CPU seconds, peak RSS and terminal bytes per second.

Each command runs in its own pseudo-terminal (so full-screen tools draw as they would over SSH) for the
same number of seconds; we drain and count what it writes, sample its RSS every second, and read its CPU
time (children included) just before stopping it: over the whole run (start-up included) and in the steady
state after --warmup seconds.

    python benchmarks/compare_monitors.py --seconds 60 \
        --cmd "gpu-triage=python3 -m gpu_triage --interval 2" \
        --cmd "nvitop=nvitop --interval 2" \
        --cmd "dmon=nvidia-smi dmon -d 2"

Prints one table row per command. Commands that are not installed are reported as such. ``--together`` runs
all commands at the same time (the same load for each, as issue 15 measured them); ``--runs N`` repeats and
prints the median [min-max] of each figure.
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
import statistics
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


class _Monitor:
    """One command on its own pty: what it wrote, its peak RSS and its CPU (whole run and after warm-up)."""

    def __init__(self, label: str, argv: list[str], cols: int, rows: int) -> None:
        self.label = label
        self.written = 0
        self.peak_rss = 0
        self.cpu = 0.0
        self.cpu_at_warm: float | None = None
        self.warm_at = 0.0
        self.open = True
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child: the monitor, on the pty
            os.environ["TERM"] = "xterm-256color"
            os.environ["COLUMNS"], os.environ["LINES"] = str(cols), str(rows)
            try:
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = psutil.Process(self.pid)

    def drain(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self.open = False
        self.written += len(chunk)

    def probe(self, now: float, started: float, warmup: float) -> None:
        try:
            family = [self.proc, *self.proc.children(recursive=True)]
            self.peak_rss = max(self.peak_rss, sum(p.memory_info().rss for p in family))
            self.cpu = _cpu_of(self.proc)
            if self.cpu_at_warm is None and now - started >= warmup:
                self.cpu_at_warm = self.cpu
                self.warm_at = now
        except psutil.Error:
            self.open = False

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                if select.select([self.fd], [], [], 0.1)[0]:
                    try:
                        if not os.read(self.fd, 65536):
                            break
                    except OSError:
                        break
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.fd)

    def result(self, started: float, elapsed: float) -> dict[str, object]:
        steady = None
        if self.cpu_at_warm is not None and elapsed - (self.warm_at - started) > 1:
            steady = 100 * (self.cpu - self.cpu_at_warm) / (started + elapsed - self.warm_at)
        return {
            "label": self.label,
            "seconds": round(elapsed, 1),
            "cpu_s": round(self.cpu, 2),
            "cpu_pct_of_core": round(100 * self.cpu / elapsed, 2),
            "steady_cpu_pct_of_core": None if steady is None else round(steady, 2),
            "peak_rss_mb": round(self.peak_rss / 1e6, 1),
            "tty_bytes_per_s": round(self.written / elapsed),
        }


def run_together(
    specs: list[tuple[str, list[str]]], seconds: float, cols: int, rows: int, warmup: float = 0.0
) -> list[dict[str, object]]:
    """Run every command at once, each on its own pty, for the same seconds; one result per command."""
    results: list[dict[str, object]] = []
    monitors: list[_Monitor] = []
    for label, argv in specs:
        if shutil.which(argv[0]) is None:
            results.append({"label": label, "error": f"{argv[0]} not found"})
        else:
            monitors.append(_Monitor(label, argv, cols, rows))
    started = time.monotonic()
    next_probe = started
    while (now := time.monotonic()) - started < seconds and any(m.open for m in monitors):
        ready, _, _ = select.select([m.fd for m in monitors if m.open], [], [], 0.2)
        for m in monitors:
            if m.fd in ready:
                m.drain()
        if now >= next_probe:
            next_probe = now + 1.0
            for m in monitors:
                if m.open:
                    m.probe(now, started, warmup)
    elapsed = time.monotonic() - started
    for m in monitors:
        if m.open:
            m.probe(time.monotonic(), started, warmup)
        results.append(m.result(started, elapsed))
    for m in monitors:
        m.stop()
    order = [label for label, _ in specs]
    return sorted(results, key=lambda r: order.index(str(r["label"])))


def run_one(
    label: str, argv: list[str], seconds: float, cols: int, rows: int, warmup: float = 0.0
) -> dict[str, object]:
    return run_together([(label, argv)], seconds, cols, rows, warmup)[0]


COLUMNS = ("seconds", "cpu_s", "cpu_pct_of_core", "steady_cpu_pct_of_core", "peak_rss_mb", "tty_bytes_per_s")


def _fmt(values: list[object]) -> str:
    """One figure, or the median [min-max] of several runs."""
    nums = [float(v) for v in values if isinstance(v, (int, float))]
    if not nums:
        return "n/a"
    if len(nums) == 1:
        return f"{nums[0]:g}"
    return f"{statistics.median(nums):g} [{min(nums):g}-{max(nums):g}]"


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
    ap.add_argument(
        "--together",
        action="store_true",
        help="run all commands at the same time (same load, same seconds) instead of one after another",
    )
    ap.add_argument("--runs", type=int, default=1, help="repeat; with more than one, median [min-max] per figure")
    ap.add_argument("--cmd", action="append", required=True, metavar="LABEL=COMMAND")
    args = ap.parse_args()
    specs = []
    for spec in args.cmd:
        label, _, command = spec.partition("=")
        specs.append((label, shlex.split(command)))
    width = max(22, *(len(label) + 2 for label, _ in specs))
    per_label: dict[str, list[dict[str, object]]] = {label: [] for label, _ in specs}
    for run in range(args.runs):
        if args.together:
            results = run_together(specs, args.seconds, args.cols, args.rows, args.warmup)
        else:
            results = [run_one(label, argv, args.seconds, args.cols, args.rows, args.warmup) for label, argv in specs]
        for r in results:
            per_label[str(r["label"])].append(r)
        if args.runs > 1:
            print(f"run {run + 1}/{args.runs}: " + "; ".join(
                f"{r['label']} {r.get('steady_cpu_pct_of_core', r.get('error'))} % steady, "
                f"{r.get('peak_rss_mb')} MB, {r.get('tty_bytes_per_s')} B/s" for r in results
            ), flush=True)
    mode = "together" if args.together else "one after another"
    print(f"{args.runs} run(s) of {args.seconds:g} s, {mode}, {args.cols}x{args.rows}, steady after {args.warmup:g} s")
    print(f"{'tool':<{width}}{'seconds':>10} {'CPU s':>20} {'% core':>20} {'steady %':>20} {'peak RSS MB':>22}"
          f" {'tty B/s':>18}")
    for label, _ in specs:
        rs = per_label[label]
        errors = [r["error"] for r in rs if "error" in r]
        if errors:
            print(f"{label:<{width}}{errors[0]}")
            continue
        cells = [_fmt([r[c] for r in rs]) for c in COLUMNS]
        widths = (10, 20, 20, 20, 22, 18)
        print(f"{label:<{width}}" + " ".join(f"{cell:>{w}}" for cell, w in zip(cells, widths, strict=True)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
