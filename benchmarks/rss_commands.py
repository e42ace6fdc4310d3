"""RSS of each long-running command after a few ticks, as a user starts it: printed figures, no assertions.

    python benchmarks/rss_commands.py [--source sim:healthy] [--gpus 2] [--ticks 5]

Starts `export` (without and with --record), `record` and the dashboard (headless, through Textual's test
driver, with a simulated source as `demo SCENARIO` builds it) as subprocesses, waits for a few ticks at
0.2 s, and prints VmRSS and VmHWM from /proc/PID/status plus whether pyarrow / polars are loaded (mapped).
Linux only. With `--source live` the export/record rows use the real driver (the dashboard row stays
simulated); every NVML client pays the driver's own ~26 MB on top (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

_LIVE_APP = """
import sys, argparse
from gpu_triage.cli import prepare_imports
prepare_imports(argparse.Namespace(command="demo"))  # what `gpu-triage demo` loads first, and how
import asyncio
from gpu_triage.config import Config
from gpu_triage.ui.run import build_app
args = argparse.Namespace(scenario="healthy", gpus={gpus}, cores=32, seed=0, speed=1.0, record={record!r})
config = Config()
config.interval_s = 0.2
app = build_app("demo", args, config)
async def go():
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause({wait})
        print(open("/proc/self/status").read(), flush=True)
        print("MAPS", open("/proc/self/maps").read(), flush=True)
asyncio.run(go())
"""


def _status(text: str) -> dict[str, float]:
    return {k: int(v) / 1024 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M)}


def _row(name: str, status: str, maps: str) -> None:
    s = _status(status)
    libs = [lib for lib in ("pyarrow", "polars") if lib in maps]
    print(f"  {name:28s} RSS {s['VmRSS']:6.1f} MB   peak {s['VmHWM']:6.1f} MB   loaded: {', '.join(libs) or '-'}")


def _export(source: str, gpus: int, ticks: int, record: str | None) -> None:
    cmd = [sys.executable, "-m", "gpu_triage", "export", "--listen", "127.0.0.1:0", "--interval", "0.2"]
    cmd += ["--source", source] + (["--gpus", str(gpus)] if source.startswith("sim") else [])
    cmd += ["--record", record] if record else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        url = next(m.group(1) for line in proc.stdout if (m := re.search(r"on (http://\S+/metrics)", line)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            body = urllib.request.urlopen(url, timeout=10).read().decode()
            m = re.search(r"^gpu_triage_ticks_total (\S+)", body, re.M)
            if m and float(m.group(1)) >= ticks:
                break
            time.sleep(0.1)
        status = open(f"/proc/{proc.pid}/status").read()
        maps = open(f"/proc/{proc.pid}/maps").read()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    _row("export" + (" --record DIR" if record else ""), status, maps)


def _record(source: str, gpus: int, ticks: int, out: str) -> None:
    cmd = [sys.executable, "-m", "gpu_triage", "record", "--source", source, "--interval", "0.2", "-o", out]
    cmd += ["--gpus", str(gpus)] if source.startswith("sim") else []
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5 + 0.2 * ticks)  # start-up, then the ticks (record prints no progress off a terminal)
        status = open(f"/proc/{proc.pid}/status").read()
        maps = open(f"/proc/{proc.pid}/maps").read()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    _row("record", status, maps)


def _dashboard(gpus: int, ticks: int, record: str | None) -> None:
    script = _LIVE_APP.format(gpus=gpus, record=record, wait=1.0 + 0.2 * ticks)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    status, _, maps = out.stdout.partition("MAPS")
    _row("dashboard (sim)" + (" --record FILE" if record else ""), status, maps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="sim:healthy")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--ticks", type=int, default=5)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, source {args.source}, {os.cpu_count()} CPUs, after {args.ticks} ticks")
    with tempfile.TemporaryDirectory() as tmp:
        _export(args.source, args.gpus, args.ticks, None)
        _export(args.source, args.gpus, args.ticks, os.path.join(tmp, "fleet"))
        _record(args.source, args.gpus, args.ticks, os.path.join(tmp, "rec.parquet"))
        _dashboard(args.gpus, args.ticks, None)
        _dashboard(args.gpus, args.ticks, os.path.join(tmp, "live.parquet"))


if __name__ == "__main__":
    main()
