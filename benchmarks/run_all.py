"""Every figure of docs/performance.md, one script after another (about 6 minutes on the 2-core CI box).

    .venv/bin/python benchmarks/run_all.py [--quick]

--quick shortens the pty runs to 20 s and the memory test to one day of ticks. On the GPU machine,
benchmarks/bench_sampler.py also measures the real driver, and compare_monitors.py (all monitors
at once under load) gives the side-by-side table against nvitop and nvidia-smi dmon; bench_stacks_cost.py (run
by `lab/h200.py run stacks-cost` and `run family`) what the stack sampler costs the monitor and the job.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    q = args.quick
    runs = [
        ("machine", ["sh", "-c", "lscpu | grep 'Model name'; nproc"]),
        ("sampling cost per tick (bench_sampler)", [sys.executable, str(HERE / "bench_sampler.py")]),
        ("GPU process reader per tick (bench_procs)", [sys.executable, str(HERE / "bench_procs.py")]),
        ("owner attribution per process (bench_owner)", [sys.executable, str(HERE / "bench_owner.py")]),
        (
            "dashboard: CPU, RSS, tty bytes, startup, memory over days (bench_dashboard)",
            [
                sys.executable,
                str(HERE / "bench_dashboard.py"),
                "--seconds",
                "20" if q else "60",
                "--ticks",
                "43200" if q else "302400",
            ],
        ),
        ("recording: size of a day, append cost (bench_trace)", [sys.executable, str(HERE / "bench_trace.py")]),
        (
            "headless record: RSS and CPU (bench_record)",
            [sys.executable, str(HERE / "bench_record.py"), "--seconds", "20" if q else "60"],
        ),
        ("headless record: RSS by stage (rss_stages)", [sys.executable, str(HERE / "rss_stages.py")]),
        ("RSS of each long-running command (rss_commands)", [sys.executable, str(HERE / "rss_commands.py")]),
        (
            "start-up to the first frame (bench_startup)",
            [sys.executable, str(HERE / "bench_startup.py"), "--runs", "3" if q else "5"],
        ),
        (
            "export: scrape time, daemon CPU and RSS (bench_export)",
            [sys.executable, str(HERE / "bench_export.py"), "--seconds", "20" if q else "60"],
        ),
        (
            "fleet dataset: record a day, summarise it (bench_fleet)",
            [sys.executable, str(HERE / "bench_fleet.py"), "--hours", "6" if q else "24"],
        ),
    ]
    status = 0
    for title, cmd in runs:
        print(f"\n== {title}", flush=True)
        status |= subprocess.run(cmd).returncode
    return status


if __name__ == "__main__":
    raise SystemExit(main())
