#!/usr/bin/env bash
# Issue 15 on the 2-card H200 machine (kind nvidia-h200-x2), one call of about 4 minutes: where a tick's CPU
# goes on the real driver, and where live's memory goes, before changing anything ("profile before changing").
#   1. benchmarks/bench_tick_parts.py: each NVML function's cost per tick, each reader, diagnosis, export.
#   2. RSS of the imports and of nvmlInit (with the flags NVML offers), and numpy's OpenBLAS threads.
#   3. py-spy (carried wheel in .whl/) on live, record and export at once, 0.5 s ticks, on-CPU samples only,
#      written as collapsed stacks ($OUT/pyspy-*.txt) that benchmarks/pyspy_top.py summarises.
# Run from the repo root with $OUT set and .whl/ carried.
. scripts/h200_env.sh
set -o pipefail
python3 -m compileall -q -j 0 /tmp/site app > /dev/null
export PATH=/tmp/site/bin:$PATH
py-spy --version
. scripts/h200_load.sh

echo "== 1. parts of a tick on the real driver (2 cards under load)"
timeout 120 python3 benchmarks/bench_tick_parts.py --ticks 60 --interval 0.5 --top 30

echo "== 2. memory: imports, nvmlInit"
for e in "" "OPENBLAS_NUM_THREADS=1"; do
  env $e python3 - "$e" <<'PY'
import sys
def st():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "Threads"):
            out[k] = v.strip()
    return out
print("env:", sys.argv[1] or "(default)")
print("  python      ", st())
import numpy
print("  numpy       ", st())
import textual.app
print("  + textual   ", st())
import gpu_triage.ui.app
print("  + ui.app    ", st())
import pynvml
pynvml.nvmlInit()
print("  + nvmlInit  ", st())
hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
for h in hs:
    pynvml.nvmlDeviceGetUtilizationRates(h)
print("  + handles   ", st())
PY
done
for flags in 0 1 2; do
  python3 - "$flags" <<'PY'
import sys, pynvml
def rss():
    return {k: v.strip() for k, _, v in (l.partition(":") for l in open("/proc/self/status")) if k in ("VmRSS", "RssAnon")}
b = rss()
try:
    pynvml.nvmlInitWithFlags(int(sys.argv[1]))
    a = rss()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceGetUtilizationRates(h)
    print(f"nvmlInitWithFlags({sys.argv[1]}): before {b} after init {a} after a call {rss()}")
except pynvml.NVMLError as exc:
    print(f"nvmlInitWithFlags({sys.argv[1]}): {exc}")
PY
done

echo "== 3. py-spy of live, record and export at once (0.5 s ticks, 60 s, 160x50)"
timeout 150 python3 benchmarks/compare_monitors.py --together --seconds 62 --warmup 10 --cols 160 --rows 50 \
  --cmd "live=py-spy record --nonblocking -r 400 -d 55 --format raw -o $OUT/pyspy-live.txt -- python3 -m gpu_triage live --interval 0.5" \
  --cmd "record=py-spy record --nonblocking -r 400 -d 55 --format raw -o $OUT/pyspy-record.txt -- python3 -m gpu_triage record -o /tmp/prof.parquet --interval 0.5" \
  --cmd "export=py-spy record --nonblocking -r 400 -d 55 --format raw -o $OUT/pyspy-export.txt -- python3 -m gpu_triage export --interval 0.5 --listen 127.0.0.1:9841" 2>&1
ls -la "$OUT"
for f in "$OUT"/pyspy-*.txt; do [ -s "$f" ] && python3 benchmarks/pyspy_top.py "$f" --top 30; done
kill $LOADS 2>/dev/null; wait $LOADS 2>/dev/null
echo "== done"
