"""Probe the live source on a real GPU machine: which fields come back, what a tick costs.

Opens LiveSource on the real driver, samples every --interval seconds for --seconds while a workload
runs (start one yourself, or pass --burn to run a small matmul loop with torch if it is installed),
then prints per card which fields were present / always None, the cost per tick (median, p95, max),
and writes a few ticks as JSON (--dump). Needs only nvidia-ml-py, psutil, numpy and gpu_triage
(no polars, no textual).

Run on the GPU machine, from the repository root:
    PYTHONPATH=app python scripts/h200_probe.py --seconds 20 --interval 0.5 --dump 4 --json-out "$OUT/probe.json"
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from gpu_triage.model import GpuSample, Tick  # noqa: E402
from gpu_triage.sources.live import LiveSource  # noqa: E402
from gpu_triage.trace.row_codec import host_to_json, tick_to_row  # noqa: E402

BURN = (
    "import torch, time\n"
    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
    "end = time.time() + {seconds}\n"
    "while time.time() < end:\n"
    "    for _ in range(20): a @ a\n"
    "    torch.cuda.synchronize(); time.sleep(0.3)\n"
)


def tick_json(tick: Tick) -> dict:
    row = tick_to_row(tick)
    row["ts"] = tick.ts.isoformat()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description="Probe gpu-triage's live source on a real GPU machine.")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--dump", type=int, default=4, help="ticks to print/write as JSON")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--burn", action="store_true", help="run a torch matmul loop (sawtooth) meanwhile")
    args = parser.parse_args()

    t_open = time.perf_counter()
    source = LiveSource()
    open_s = time.perf_counter() - t_open
    status = source.status()
    info = source.host_info()
    print(f"opened in {open_s * 1e3:.1f} ms; gpu_available={status.gpu_available}; messages={status.messages}")
    print(f"driver {info.driver_version}  cuda {info.cuda_driver_version}  cpus {info.cpu_count}")
    for g in info.gpus:
        print(
            f"  GPU {g.index}: {g.name} {g.uuid} {g.pci_bus_id} mem {g.mem_total_bytes}"
            f" PCIe gen{g.pcie_gen_max} x{g.pcie_width_max}"
        )
    print(f"topology: {info.topology}")

    burner = None
    if args.burn:
        burner = subprocess.Popen([sys.executable, "-c", BURN.format(seconds=args.seconds + 2)])
        time.sleep(2.0)

    ticks: list[Tick] = []
    costs: list[float] = []
    next_at = time.monotonic() + args.interval
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at += args.interval
        t0 = time.perf_counter()
        ticks.append(source.sample())
        costs.append(time.perf_counter() - t0)
    status = source.status()
    source.close()
    if burner is not None:
        burner.wait(timeout=30)

    names = [f.name for f in fields(GpuSample) if f.name != "index"]
    print(f"\n{len(ticks)} ticks at {args.interval} s; lost GPUs: {sorted(status.lost_gpus)}")
    cards = sorted({g.index for t in ticks for g in t.gpus})
    for idx in cards:
        present, absent = [], []
        for name in names:
            values = [getattr(g, name) for t in ticks for g in t.gpus if g.index == idx]
            got = [v for v in values if v is not None]
            if got:
                present.append(f"{name}[{min(got):.4g}..{max(got):.4g}] {len(got)}/{len(values)}")
            else:
                absent.append(name)
        print(f"GPU {idx} present: " + "; ".join(present))
        print(f"GPU {idx} always None: {absent}")
    if ticks:
        t = ticks[-1]
        print(
            f"host: {len(t.cpu_pct)} cores, iowait {t.iowait_pct}, disks {[d.name for d in t.disks]},"
            f" procs {len(t.procs)}"
        )
        for p in t.procs[:8]:
            print(f"  proc {p.pid} {p.name} gpu{p.gpu_index} mem {p.gpu_mem_bytes} cpu {p.cpu_pct} workers {p.workers}")
    ordered = sorted(costs)
    if ordered:
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        per_card = f" ({statistics.median(ordered) / max(1, len(cards)) * 1e3:.2f} ms per card)" if cards else ""
        print(
            f"cost per tick: median {statistics.median(ordered) * 1e3:.2f} ms{per_card}, "
            f"p95 {p95 * 1e3:.2f} ms, max {ordered[-1] * 1e3:.2f} ms"
        )
    dump = [tick_json(t) for t in ticks[-args.dump:]] if args.dump > 0 else []
    payload = {"host": host_to_json(info), "ticks": dump, "costs_s": costs}
    text = json.dumps(payload, indent=1, default=str)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(text)
        print(f"wrote {args.json_out}")
    else:
        print(json.dumps(dump[:2], indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
