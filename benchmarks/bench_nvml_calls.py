"""What single NVML reads cost on this driver, one card: which fields make nvmlDeviceGetFieldValues expensive,
and what nvmlDeviceGetSamples costs through pynvml (two driver calls: size, then data) against one call into
a buffer allocated once. Printed figures (median and p90 over --reps calls), no assertions.

    python benchmarks/bench_nvml_calls.py [--reps 200] [--card 0]

Needs a real driver (it says so and stops without one). Used to choose how the sampler reads each tick
(docs/performance.md, "The real-driver profile").
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def _time(fn: Callable[[], Any], reps: int) -> str:
    costs = []
    errors = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        try:
            fn()
        except Exception:  # noqa: BLE001 - a benchmark: count the failure, print it, go on
            errors += 1
        costs.append(time.perf_counter() - t0)
    costs.sort()
    note = f"  ({errors} failed)" if errors else ""
    return f"median {statistics.median(costs) * 1e3:7.3f} ms  p90 {costs[int(0.9 * len(costs))] * 1e3:7.3f} ms{note}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--card", type=int, default=0)
    args = parser.parse_args()
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver: nothing to measure
        print(f"no NVML here ({exc}); run this on the GPU machine")
        return 0
    m = pynvml
    h = m.nvmlDeviceGetHandleByIndex(args.card)
    print(f"card {args.card}: {m.nvmlDeviceGetName(h)}, driver {m.nvmlSystemGetDriverVersion()}, {args.reps} reps")
    agg = 0xFFFFFFFF
    fields: dict[str, list[Any]] = {
        "PCIe TX bytes": [m.NVML_FI_DEV_PCIE_COUNT_TX_BYTES],
        "PCIe RX bytes": [m.NVML_FI_DEV_PCIE_COUNT_RX_BYTES],
        "PCIe TX+RX": [m.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, m.NVML_FI_DEV_PCIE_COUNT_RX_BYTES],
        "NVLink TX (all links)": [(m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, agg)],
        "NVLink TX+RX (all links)": [
            (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, agg),
            (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, agg),
        ],
        "NVLink TX+RX link 0": [
            (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
            (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0),
        ],
        "all four (today's request)": [
            m.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
            m.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
            (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, agg),
            (m.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, agg),
        ],
        "power (field)": [m.NVML_FI_DEV_POWER_INSTANT],
    }
    print("== nvmlDeviceGetFieldValues")
    for name, ids in fields.items():
        print(f"  {name:32s} {_time(lambda ids=ids: m.nvmlDeviceGetFieldValues(h, ids), args.reps)}")
        values = m.nvmlDeviceGetFieldValues(h, ids)
        print(f"  {'':32s} returns {[v.nvmlReturn for v in values]}")

    print("== GPU-Util")
    util = m.NVML_GPU_UTILIZATION_SAMPLES
    last = [0]

    def through_pynvml() -> None:
        try:
            _vt, samples = m.nvmlDeviceGetSamples(h, util, last[0])
            if samples:
                last[0] = max(s.timeStamp for s in samples)
        except m.NVMLError_NotFound:
            pass

    print(f"  {'pynvml nvmlDeviceGetSamples':32s} {_time(through_pynvml, args.reps)}")
    fn = m._nvmlGetFunctionPointer("nvmlDeviceGetSamples")  # noqa: SLF001 - the binding's own lookup
    count0 = ctypes.c_uint(0)
    vtype = ctypes.c_uint(0)
    fn(h, ctypes.c_uint(util), ctypes.c_ulonglong(0), ctypes.byref(vtype), ctypes.byref(count0), None)
    print(f"  driver buffer holds {count0.value} samples")
    buf = (m.c_nvmlSample_t * max(1, 2 * count0.value))()
    last2 = [0]

    def size_only() -> None:
        count = ctypes.c_uint(0)
        fn(h, ctypes.c_uint(util), ctypes.c_ulonglong(last2[0]), ctypes.byref(vtype), ctypes.byref(count), None)

    def one_call() -> None:
        count = ctypes.c_uint(len(buf))
        ret = fn(h, ctypes.c_uint(util), ctypes.c_ulonglong(last2[0]), ctypes.byref(vtype), ctypes.byref(count), buf)
        if ret == 0 and count.value:
            last2[0] = max(buf[i].timeStamp for i in range(count.value))

    print(f"  {'size query alone (NULL buffer)':32s} {_time(size_only, args.reps)}")
    print(f"  {'one call into a kept buffer':32s} {_time(one_call, args.reps)}")
    print(f"  {'nvmlDeviceGetUtilizationRates':32s} {_time(lambda: m.nvmlDeviceGetUtilizationRates(h), args.reps)}")
    print("== others")
    for name, call in (
        ("nvmlDeviceGetMemoryInfo", lambda: m.nvmlDeviceGetMemoryInfo(h)),
        ("nvmlDeviceGetPowerUsage", lambda: m.nvmlDeviceGetPowerUsage(h)),
        ("nvmlDeviceGetComputeRunningProcesses", lambda: m.nvmlDeviceGetComputeRunningProcesses(h)),
    ):
        print(f"  {name:32s} {_time(call, args.reps)}")
    m.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
