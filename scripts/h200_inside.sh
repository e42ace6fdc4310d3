#!/usr/bin/env bash
# Mechanisms no outside rule names, as real PyTorch jobs on one H200 (lab/inside_mechanisms.py), recorded by our
# own recorder at 2 s and 0.5 s ticks side by side while lab/stack_sampler.py takes each job's Python stacks
# (py-spy, carried as a wheel in .whl/) and its threads from /proc every 2 s. PART=a or PART=b (each under
# 10 minutes); PART=b ends with lab/pyspy_cost.py, what sampling costs a training step.
# Run from the repo root with $OUT set and .whl/ carried. Everything lands in $OUT/inside-$PART.tgz, re-packed
# after each run so that a call cut short still returns what it finished.
. scripts/h200_env.sh
export PATH=/tmp/site/bin:$PATH
PART=${PART:-a}
SECS=${SECS:-30}
RES=/tmp/inside-$PART
mkdir -p "$RES"
save() { cp "$OUT/log.txt" "$RES/" 2>/dev/null; tar czf "$OUT/inside-$PART.tgz" -C "$RES" .; }
{ nvidia-smi; uname -r; nproc; free -g
  python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  py-spy --version; cat /proc/sys/kernel/yama/ptrace_scope 2>&1; } > "$RES/machine.txt" 2>&1
cat "$RES/machine.txt"
case $PART in
  a) RUNS="cpu_offload_adamw:t16 cpu_offload_adamw:t4 latency_input:w4l5 latency_input:w8l20 python_host_loop:ms60
           python_host_loop:ms250 item_sync:every1 item_sync:every8 h2d_copy_1card:pinned h2d_copy_1card:pageable" ;;
  b) RUNS="compile_recompile:each compile_recompile:every8 service_wait:ms100 service_wait:ms400 slow_start:parse
           slow_start:poll cpu_model_part:t16 cpu_model_part:t4" ;;
esac
python3 -m gpu_triage record -o "$RES/h200-inside-$PART-2s.parquet" --interval 2 > "$RES/rec-2s.log" 2>&1 &
R1=$!
python3 -m gpu_triage record -o "$RES/h200-inside-$PART-0.5s.parquet" --interval 0.5 > "$RES/rec-0.5s.log" 2>&1 &
R2=$!
sleep 6
for run in $RUNS; do
  name=${run%%:*}; setting=${run#*:}
  PIDFILE=$RES/$name-$setting.pid timeout -k 5 $((SECS + 90)) python3 lab/inside_mechanisms.py "$name" "$setting" \
    "$RES/marks.json" --secs "$SECS" > "$RES/$name-$setting.log" 2>&1 &
  W=$!
  python3 lab/stack_sampler.py "$RES/$name-$setting.pid" "$RES/$name-$setting.stacks.jsonl" --every 2 \
    > "$RES/$name-$setting.sampler" 2>&1
  wait $W; echo "== $name $setting rc=$? $(grep -v ^MARK "$RES/$name-$setting.log" | tail -3) $(cat "$RES/$name-$setting.sampler")"
  grep ^MARK "$RES/$name-$setting.log" | cut -c1-400
  save; sleep 4
done
kill -INT $R1 $R2; wait $R1 $R2; cat "$RES"/rec-*.log
if [ "$PART" = b ]; then
  echo "== py-spy's cost to a training step"
  timeout 150 python3 lab/pyspy_cost.py "$RES/pyspy-cost.json" --secs 20
fi
ls -la "$RES"; save
