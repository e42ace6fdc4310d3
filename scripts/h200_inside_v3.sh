#!/usr/bin/env bash
# The inside evidence end to end on one real H200: lab/inside_mechanisms.py's mechanisms at settings no earlier
# recording used, recorded by our own `gpu-triage record` with its py-spy sampler on (trace v3: the stacks and
# the verdict in the file), at 2 s; beside it a second recorder at 0.5 s with --no-stacks, the same jobs as the
# outside alone sees them. PART=c or PART=d (each under 10 minutes).
# Run from the repo root with $OUT set and .whl/ carried (py-spy among the wheels). Everything lands in
# $OUT/inside-$PART.tgz, re-packed after each run so that a call cut short still returns what it finished.
. scripts/h200_env.sh
export PATH=/tmp/site/bin:$PATH
PART=${PART:-c}
SECS=${SECS:-30}
RES=/tmp/inside-$PART
mkdir -p "$RES"
save() { cp "$OUT/log.txt" "$RES/" 2>/dev/null; tar czf "$OUT/inside-$PART.tgz" -C "$RES" .; }
{ nvidia-smi; uname -r; nproc; free -g
  python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  py-spy --version; cat /proc/sys/kernel/yama/ptrace_scope 2>&1; } > "$RES/machine.txt" 2>&1
cat "$RES/machine.txt"
case $PART in
  c) RUNS="cpu_offload_adamw:t8 cpu_offload_adamw:t2 latency_input:w2l50 latency_input:w6l10 python_host_loop:ms120
           python_host_loop:ms30" ;;
  d) RUNS="compile_recompile:every3 compile_recompile:every16 service_wait:ms200 service_wait:ms50
           cpu_model_part:t8 cpu_model_part:t2" ;;
  e) RUNS="cpu_offload_adamw:t6 latency_input:w3l30 python_host_loop:ms80 compile_recompile:every5
           service_wait:ms120 cpu_model_part:t4" ;;
esac
echo $RUNS | tr ' ' '\n' | tr ':' '-' > "$RES/inside-$PART.runs"
python3 -m gpu_triage record -o "$RES/h200-inside-$PART-2s.parquet" --interval 2 --log-file "$RES/rec-2s.debug" \
  --log-level info > "$RES/rec-2s.log" 2>&1 &
R1=$!
python3 -m gpu_triage record -o "$RES/h200-inside-$PART-0.5s.parquet" --interval 0.5 --no-stacks \
  > "$RES/rec-0.5s.log" 2>&1 &
R2=$!
sleep 6
for run in $RUNS; do
  name=${run%%:*}; setting=${run#*:}
  timeout -k 5 $((SECS + 90)) python3 lab/inside_mechanisms.py "$name" "$setting" "$RES/marks.json" --secs "$SECS" \
    > "$RES/$name-$setting.log" 2>&1
  echo "== $name $setting rc=$? $(grep -v ^MARK "$RES/$name-$setting.log" | tail -3)"
  grep ^MARK "$RES/$name-$setting.log" | cut -c1-400
  save; sleep 4
done
# what each recorder cost over the whole run (the 2 s one also reads stacks and stores a verdict per tick)
ps -o pid,rss,time,etimes,args -p "$R1,$R2" | cut -c1-160 | tee "$RES/recorder-cost.txt"
kill -INT $R1 $R2; wait $R1 $R2; cat "$RES"/rec-*.log
python3 - "$RES/h200-inside-$PART-2s.parquet" <<'PY'
import sys
import pyarrow.parquet as pq
t = pq.read_table(sys.argv[1], columns=["ts", "stacks", "verdict"])
n = sum(len(x) for x in t.column("stacks").to_pylist() if x)
v = sum(1 for x in t.column("verdict").to_pylist() if x)
print(f"{t.num_rows} ticks, {n} stack samples, {v} stored verdicts")
PY
ls -la "$RES"; save
