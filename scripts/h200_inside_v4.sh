#!/usr/bin/env bash
# Issue 34's held-out family on one real H200: lab/inside_family2.py's ten mechanisms, recorded by our own
# `gpu-triage record` with its py-spy sampler on (trace v4: every Python thread of each dump; a burst of dumps
# when a card starts waiting; the 45/55 % waiting band) at 2 s, beside a neutral recorder at 0.5 s with
# --no-stacks and a control recorder at 2 s with --no-stacks. benchmarks/bench_stacks_cost.py runs the jobs: each
# runs its first OFF seconds with the sampler's recorder stopped, then sampled, so its own step times give the cost
# to the job and the recorders' CPU (py-spy children counted) the cost to the monitor.
# The device tool sends /work/main's checkout: run from its root with .devrun/ carried, holding a copy of this
# branch's app/, lab/, benchmarks/, scripts/ and the py-spy wheel in .devrun/whl/. Results: $OUT/inside-$PART.tgz,
# re-packed every 30 s so that a call cut short still returns what it finished.
# PART=f (default): the family, ten runs of 32 s, the first 10 s of each unsampled (under 8 minutes).
# PART=g: the steady cost, four of them for 75 s, the first 15 s unsampled: one burst per 60 s sampled, as a
# long wait has (under 6 minutes).
set -u
: "${OUT:?OUT must name the folder for the results}"
export PYTHONUNBUFFERED=1
cd .devrun || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/app PATH=/tmp/site/bin:$PATH
PART=${PART:-f}
RES=/tmp/inside-$PART
mkdir -p "$RES"
exec > >(tee "$RES/log.txt") 2>&1
{ date -u; nvidia-smi; uname -r; nproc; free -g
  python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  py-spy --version; echo "ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>&1)"; id; } > "$RES/machine.txt" 2>&1
cat "$RES/machine.txt"
case $PART in
  f) SECS=32 OFF=10 RUNS="gil_thread:t3 pin_memory_thread:b32 sync_checkpoint:every5 cpu_tokenize:n256
       sync_tiny_kernels:k200 logging_hook:n600 cpu_augment_accum:a4 cpu_embedding_lookup:r65536 slow_collate:b256
       autograd_hook:p16" ;;
  g) SECS=75 OFF=15 RUNS="pin_memory_thread:b32 cpu_tokenize:n256 gil_thread:t3 autograd_hook:p16" ;;
esac
( while sleep 30; do tar czf "$OUT/part.tgz" -C "$RES" . 2>/dev/null && mv "$OUT/part.tgz" "$OUT/inside-$PART.tgz"; done ) &
PACKER=$!
python3 benchmarks/bench_stacks_cost.py "$RES" --runs "$(echo $RUNS)" --secs "$SECS" --off-s "$OFF" \
  --prefix "h200-inside-$PART" -- python3 lab/inside_family2.py
kill $PACKER
python3 - "$RES" "$PART" <<'PY'
import sys
import pyarrow.parquet as pq
t = pq.read_table(f"{sys.argv[1]}/h200-inside-{sys.argv[2]}-2s.parquet", columns=["ts", "stacks", "verdict"])
rows = [x for x in t.column("stacks").to_pylist() if x]
n = sum(len(x) for x in rows)
th = sum(len(s.get("thread_list") or []) for x in rows for s in x)
print(f"{t.num_rows} ticks, {n} stack samples with {th} threads, "
      f"{sum(1 for x in t.column('verdict').to_pylist() if x)} stored verdicts")
PY
ls -la "$RES"
rm -f "$OUT/part.tgz"; tar czf "$OUT/inside-$PART.tgz" -C "$RES" .
