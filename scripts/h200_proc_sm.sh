#!/usr/bin/env bash
# Per-process SM share on the real driver (issue 13's leftover): NVML's nvmlDeviceGetProcessUtilization under
# a bf16 matmul load on card 0, read raw and through the live source's process reader, then recorded.
# Run from the repo root with $OUT set and .whl/ carried (device kind nvidia-h200 or nvidia-h200-x2).
. scripts/h200_env.sh
LOAD_CARDS=0 . scripts/h200_load.sh
python3 - <<'PY'
import time
import pynvml
from gpu_triage.sources.live import LiveSource
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
since = 0
for i in range(3):
    time.sleep(1.0)
    t0 = time.perf_counter()
    try:
        got = pynvml.nvmlDeviceGetProcessUtilization(h, since)
        cost = (time.perf_counter() - t0) * 1e3
        print(f"raw call {i}: {len(got)} samples in {cost:.3f} ms:", [(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in got][:6])
        since = max([since] + [s.timeStamp for s in got])
    except pynvml.NVMLError as exc:
        print(f"raw call {i}: {exc}")
src = LiveSource()
for i in range(6):
    time.sleep(1.0)
    tick = src.sample()
    print(f"tick {i}: card 0 util {tick.gpus[0].util_pct} sm_active {tick.gpus[0].sm_active_pct}; procs",
          [(p.pid, p.name, p.gpu_index, p.sm_pct) for p in tick.procs if p.gpu_index >= 0])
src.close()
PY
rm -f /tmp/sm.parquet
timeout 20 python3 -m gpu_triage record -o /tmp/sm.parquet --interval 1 --duration 8
python3 - <<'PY'
from gpu_triage.trace.reader import open_trace
t = open_trace("/tmp/sm.parquet")
for tk in t.ticks()[-4:]:
    print(tk.ts.time(), "card0 util", tk.gpus[0].util_pct, "procs", [(p.pid, p.sm_pct) for p in tk.procs if p.gpu_index >= 0])
PY
kill $LOADS 2>/dev/null; wait $LOADS 2>/dev/null
echo "== done"
