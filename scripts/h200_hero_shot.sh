#!/usr/bin/env bash
# The README's live picture on the real H200 (device kind nvidia-h200): the dashboard on NVML + psutil while the
# lab's PyTorch workloads run one after another (WORKLOADS, SECS seconds each; defaults: compute, a launch-bound
# loop, then DataLoader workers re-spawned every epoch, 60 s each), shot at 160x48 after AFTER seconds (default
# 180, inside the last workload). Needs .whl/ and .devlab/workloads.py (a copy of ../shared/lab/workloads.py)
# carried. SVG in $OUT; make the PNG here with scripts/screenshots.py's to_png.
. scripts/h200_env.sh
AFTER=${AFTER:-180}
WORKLOADS=${WORKLOADS:-compute_healthy,launch_bound,dataloader_epoch_restart}
SECS=${SECS:-60} python3 .devlab/workloads.py "$OUT/labels.json" "$WORKLOADS" > /tmp/workloads.log 2>&1 &
W=$!
python3 scripts/live_screenshot.py --after "$AFTER" --size 160x48 --out "$OUT/live-h200-160x48.svg" > /tmp/shot.log 2>&1
cat /tmp/shot.log
kill $W 2>/dev/null; wait $W; cat /tmp/workloads.log
ls -la "$OUT"
