"""The RSS floor of a terminal GPU monitor, by stack: what a process holds before it does any work of its own.

    python benchmarks/rss_floor.py [--seconds 2]

Each stage runs in a fresh interpreter and adds one layer to the one before; the figure is VmRSS from
/proc/self/status after the stage (for a Textual app: after it has run for --seconds, headless, with one
widget updated every 0.2 s). Printed figures, no assertions. The stages:

  python                   the interpreter alone
  + NVML                   pynvml started through our load_nvml (with its heap trim), a handle and one
                           utilization sample per card: what every NVML monitor pays (GPU machines only)
  + psutil + curses        the rest of nvitop's stack, imported
  + Textual app            instead of curses: an empty Textual app, running (asyncio loaded without ssl,
                           as the dashboard loads it)
  + numpy                  numpy on one BLAS thread, as the dashboard loads it
  + the dashboard's code   every gpu_triage module the live dashboard imports, imported (not running)

issue 15 asks `live` to hold no more than nvitop in the same run; the "+ Textual app" row is the least any
Textual dashboard holds with NVML started, before it draws a GPU or diagnoses anything.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

_RSS = """
def _rss():
    import re
    text = open("/proc/self/status").read()
    return int(re.search(r"^VmRSS:\\s+(\\d+) kB", text, re.M).group(1)) / 1024
"""

_NVML = """
from gpu_triage.nvmlwrap import load_nvml
nvml = load_nvml()
for i in range(nvml.m.nvmlDeviceGetCount()):
    nvml.m.nvmlDeviceGetUtilizationRates(nvml.m.nvmlDeviceGetHandleByIndex(i))
"""

_NVITOP_STACK = """
import curses, psutil
psutil.cpu_percent(percpu=True)
"""

_NUMPY = """
from gpu_triage.heavy_imports import import_numpy_with_one_blas_thread
import_numpy_with_one_blas_thread()
"""

_DASHBOARD_CODE = """
import gpu_triage.ui.run, gpu_triage.ui.app, gpu_triage.sources.live, gpu_triage.sources.nvml, gpu_triage.sources.host
"""

_TEXTUAL_APP = """
from gpu_triage.heavy_imports import import_asyncio_without_tls
import_asyncio_without_tls()
from textual.app import App
from textual.widgets import Static

class Floor(App[float]):
    def compose(self):
        yield Static("0", id="n")

    def on_mount(self):
        self.count = 0
        self.set_interval(0.2, self.step)
        self.set_timer({seconds}, lambda: self.exit(_rss()))

    def step(self):
        self.count += 1
        self.query_one("#n", Static).update(str(self.count))

print(Floor().run(headless=True, size=(160, 50)))
"""


def _stage(body: str) -> float | None:
    out = subprocess.run([sys.executable, "-c", _RSS + body], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return None
    return float(out.stdout.strip().splitlines()[-1])


def _has_nvml() -> bool:
    return _stage(_NVML + "print(0)") is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each Textual app runs (default 2)")
    args = parser.parse_args()
    app = _TEXTUAL_APP.format(seconds=args.seconds)
    nvml = _NVML if _has_nvml() else ""
    print(f"python {sys.version.split()[0]}; NVML {'started' if nvml else 'not available: its rows are skipped'}")
    rows = [("python", "print(_rss())")]
    if nvml:
        rows.append(("+ NVML", nvml + "print(_rss())"))
    rows += [
        ("+ psutil + curses (nvitop's stack)", nvml + _NVITOP_STACK + "print(_rss())"),
        ("+ Textual app, instead of curses", nvml + "import psutil\n" + app),
        ("+ numpy", nvml + "import psutil\n" + _NUMPY + app),
        ("+ the dashboard's code", nvml + "import psutil\n" + _NUMPY + _DASHBOARD_CODE + app),
    ]
    for label, body in rows:
        rss = _stage(body)
        print(f"  {label:36s} " + (f"{rss:6.1f} MB" if rss is not None else "failed"))


if __name__ == "__main__":
    main()
