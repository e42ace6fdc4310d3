"""Probe on the 2-card H200 (device kind nvidia-h200-x2): do GPM's PCIe and NVLink rates agree with the
cumulative counters the sampler reads through nvmlDeviceGetFieldValues, and what does each cost?

A torch child process makes traffic in phases (idle; pageable host→card-0 copies; card-0→card-1 copies over
NVLink; idle); this process reads both sources on both cards every 0.5 s and prints them side by side (GB/s),
then the median cost per card of each read. Run from the repo root after scripts/h200_env.sh.
"""

from __future__ import annotations

import ctypes
import statistics
import subprocess
import sys
import time

import pynvml as m

LOAD = r"""
import time, torch
a = torch.empty(256 * 2**20, dtype=torch.uint8)           # pageable host memory
d0 = torch.empty(1024 * 2**20, dtype=torch.uint8, device="cuda:0")
d1 = torch.empty(1024 * 2**20, dtype=torch.uint8, device="cuda:1")
torch.cuda.synchronize()
def phase(name, seconds, fn):
    print(f"{time.time():.2f} phase {name}", flush=True)
    end = time.time() + seconds
    while time.time() < end:
        fn()
    torch.cuda.synchronize()
phase("idle", 3, lambda: time.sleep(0.05))
phase("h2d", 5, lambda: d0[: a.numel()].copy_(a))
phase("p2p", 5, lambda: d1.copy_(d0))
phase("idle2", 3, lambda: time.sleep(0.05))
print(f"{time.time():.2f} done", flush=True)
"""

AGG = 0xFFFFFFFF
GPM_IDS = {"pcie_tx": 20, "pcie_rx": 21, "nvlink_rx": 60, "nvlink_tx": 61}


def main() -> int:
    m.nvmlInit()
    handles = [m.nvmlDeviceGetHandleByIndex(i) for i in range(m.nvmlDeviceGetCount())]
    fids = [
        m.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        m.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, AGG),
        (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, AGG),
    ]
    scale = [1, 1, 1024, 1024]  # NVLink throughput counters count KiB
    samples = {h_i: [m.nvmlGpmSampleAlloc(), m.nvmlGpmSampleAlloc()] for h_i in range(len(handles))}
    for i, h in enumerate(handles):
        m.nvmlGpmSampleGet(h, samples[i][0])
    prev = {
        i: ([v.value.ullVal for v in m.nvmlDeviceGetFieldValues(h, fids)], time.monotonic())
        for i, h in enumerate(handles)
    }
    cost_fields: list[float] = []
    cost_gpm: list[float] = []
    child = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True)
    print("t(s)  card  | counters GB/s: pcie_tx pcie_rx nvl_tx nvl_rx | GPM GB/s: pcie_tx pcie_rx nvl_tx nvl_rx")
    t0 = time.monotonic()
    while child.poll() is None and time.monotonic() - t0 < 40:
        time.sleep(0.5)
        for i, h in enumerate(handles):
            c0 = time.perf_counter()
            vals = m.nvmlDeviceGetFieldValues(h, fids)
            cost_fields.append(time.perf_counter() - c0)
            now = time.monotonic()
            raw = [v.value.ullVal for v in vals]
            before, at = prev[i]
            counters = [(r - b) * s / (now - at) / 1e9 for r, b, s in zip(raw, before, scale, strict=True)]
            prev[i] = (raw, now)
            c0 = time.perf_counter()
            first, second = samples[i]
            m.nvmlGpmSampleGet(h, second)
            req = m.c_nvmlGpmMetricsGet_t()
            req.version = m.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = 8
            req.sample1, req.sample2 = first, second
            for k, mid in enumerate([2, 3, 5, 10, *GPM_IDS.values()]):
                req.metrics[k].metricId = mid
            m.nvmlGpmMetricsGet(req)
            cost_gpm.append(time.perf_counter() - c0)
            samples[i] = [second, first]
            gpm = {name: req.metrics[4 + k].value * 2**20 / 1e9 for k, name in enumerate(GPM_IDS)}
            rets = [req.metrics[k].nvmlReturn for k in range(8)]
            print(
                f"{now - t0:5.1f} {i}     | {counters[0]:7.2f} {counters[1]:7.2f} {counters[2]:7.2f} {counters[3]:7.2f}"
                f" | {gpm['pcie_tx']:7.2f} {gpm['pcie_rx']:7.2f} {gpm['nvlink_tx']:7.2f} {gpm['nvlink_rx']:7.2f}"
                + ("" if not any(rets) else f"  returns {rets}"),
                flush=True,
            )
    out = child.communicate(timeout=30)[0]
    print(out)
    print(f"cost per card: nvmlDeviceGetFieldValues (4 fields) median {statistics.median(cost_fields) * 1e3:.3f} ms;"
          f" nvmlGpmSampleGet + nvmlGpmMetricsGet (8 metrics) median {statistics.median(cost_gpm) * 1e3:.3f} ms")
    # the single-call GPU-Util read, again under load
    fn = m._nvmlGetFunctionPointer("nvmlDeviceGetSamples")  # noqa: SLF001
    vt, cnt = ctypes.c_uint(0), ctypes.c_uint(0)
    kind = ctypes.c_uint(m.NVML_GPU_UTILIZATION_SAMPLES)
    fn(handles[0], kind, ctypes.c_ulonglong(0), ctypes.byref(vt), ctypes.byref(cnt), None)
    print(f"GPU-Util sample buffer: {cnt.value} samples")
    m.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
