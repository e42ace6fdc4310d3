#!/usr/bin/env bash
# Second session on the real H200: a generalisation recording with OTHER workload settings than the shared
# traces (shorter/longer phases, another sawtooth period, two starved workers, quicker epochs), the monitors
# side by side after the overhead work, and a screenshot of the live dashboard on the real card.
# Needs .whl/ and .devlab/workloads.py carried, like h200_session.sh. Results in $OUT.
. "$(dirname "$0")/h200_env.sh"
python3 -m gpu_triage record -o "$OUT/h200-gen-2s.parquet" --interval 2 > /tmp/rec2.log 2>&1 &
R1=$!
python3 -m gpu_triage record -o "$OUT/h200-gen-0.5s.parquet" --interval 0.5 > /tmp/rec05.log 2>&1 &
R2=$!
sleep 3
export SECS=${SECS:-30} SAW_ON=${SAW_ON:-2} SAW_OFF=${SAW_OFF:-6} STARVED_WORKERS=${STARVED_WORKERS:-2} \
       EPOCH_BATCHES=${EPOCH_BATCHES:-50} INIT_SLEEP=${INIT_SLEEP:-2} SAT_BATCH=${SAT_BATCH:-256}
echo "workloads: SECS=$SECS SAW_ON=$SAW_ON SAW_OFF=$SAW_OFF STARVED_WORKERS=$STARVED_WORKERS EPOCH_BATCHES=$EPOCH_BATCHES INIT_SLEEP=$INIT_SLEEP SAT_BATCH=$SAT_BATCH"
python3 .devlab/workloads.py "$OUT/labels.json" > /tmp/workloads.log 2>&1 &
W=$!
python3 scripts/live_screenshot.py --after 280 --size 160x48 --out "$OUT/live-h200-160x48.svg" --detail "$OUT/live-h200-detail-160x48.svg" > /tmp/shot.log 2>&1 &
S=$!
sleep 20
echo "== monitors side by side, 45 s each, while the workloads run"
python3 benchmarks/compare_monitors.py --seconds 45 \
  --cmd "gpu-triage live=python3 -m gpu_triage --interval 2" \
  --cmd "gpu-triage record=python3 -m gpu_triage record -o /tmp/cmp.parquet --interval 2" \
  --cmd "nvitop=python3 -m nvitop --interval 2" \
  --cmd "nvidia-smi dmon=nvidia-smi dmon -d 2"
wait $W
echo "== workloads"; cat /tmp/workloads.log
wait $S; echo "== screenshot"; cat /tmp/shot.log
echo "== recorder cost (whole run)"; ps -o pid,etime,cputime,rss,args -p $R1,$R2
kill -INT $R1 $R2; wait $R1 $R2
cat /tmp/rec2.log /tmp/rec05.log | tail -4
ls -la "$OUT"
echo "== diagnose 2 s"; python3 -m gpu_triage diagnose "$OUT/h200-gen-2s.parquet"
