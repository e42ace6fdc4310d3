#!/usr/bin/env bash
# Third session on the real H200: after the overhead and screen work, the monitors side by side again
# (steady state after a warm-up, and whole runs) under a PyTorch load, start-up time, the recorder's RSS by
# import stage, and a fresh live screenshot. Needs .whl/ and .devlab/workloads.py carried. Results in $OUT.
. "$(dirname "$0")/h200_env.sh"
echo "== start-up (no load)"
for i in 1 2 3; do ( time python3 -c "import gpu_triage.ui.app, gpu_triage.sources.live" ) 2>&1 | grep -E "real|user"; done
timeout 60 python3 benchmarks/bench_record.py --source live --seconds 20
SECS=${SECS:-45} python3 .devlab/workloads.py "$OUT/labels.json" compute_healthy,launch_bound,dataloader_epoch_restart,dataloader_cpu_saturated,dataloader_starved > /tmp/workloads.log 2>&1 &
W=$!
python3 scripts/live_screenshot.py --after 200 --size 160x48 --out "$OUT/live-h200-160x48.svg" --detail "$OUT/live-h200-detail-160x48.svg" > /tmp/shot.log 2>&1 &
S=$!
python3 scripts/live_screenshot.py --after 200 --size 80x24 --out "$OUT/live-h200-80x24.svg" > /tmp/shot2.log 2>&1 &
S2=$!
sleep 5
echo "== monitors side by side, 50 s each (steady state after 10 s), while the workloads run"
python3 benchmarks/compare_monitors.py --seconds 50 --warmup 10 \
  --cmd "gpu-triage live=python3 -m gpu_triage --interval 2" \
  --cmd "gpu-triage record=python3 -m gpu_triage record -o /tmp/cmp.parquet --interval 2" \
  --cmd "nvitop=python3 -m nvitop --interval 2" \
  --cmd "nvidia-smi dmon=nvidia-smi dmon -d 2"
wait $S $S2; echo "== screenshots"; cat /tmp/shot.log /tmp/shot2.log
kill $W 2>/dev/null; wait $W; cat /tmp/workloads.log
ls -la "$OUT"
