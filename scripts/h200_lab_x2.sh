#!/usr/bin/env bash
# Issue #11's mechanisms recorded by our own recorder (1 s and 2 s ticks side by side) and issue #12's real job
# logs, on the 2-card H200 machine (device kind nvidia-h200-x2), in one call of under 10 minutes.
# Run from the repo root with $OUT set; LAB names the folder holding x2_mechanisms.py and joblogs.py (lab/ in
# the repo; the device run carried them as .devout/lab). Everything lands in $OUT/lab.tgz, re-packed after
# each phase so that a run cut short still returns what it finished, and the whole log in $OUT/log.txt.
. scripts/h200_env.sh
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
LAB=${LAB:-lab}
# The first call ran the default PHASES; the second re-ran mechanism 2 with a real model (PHASES=loader0rn50),
# because the MLP left the cards nearly idle; the third (PHASES=loader0rn50omp1) with one intra-op thread,
# because in the second torch's threads (collating 600 KB images) kept each process at ~1400 % CPU.
PHASES=${PHASES:-h2d loader0 ddp joblogs stuck}
want() { [[ " $PHASES " == *" $1 "* ]]; }
RES=/tmp/labres
M=$RES/marks.json
export PIDDIR=/tmp/lab-pids
mkdir -p "$RES/joblogs" "$PIDDIR"
save() { cp "$OUT/log.txt" "$RES/" 2>/dev/null; tar czf "$OUT/lab.tgz" -C "$RES" .; }
now() { date -u +%Y-%m-%dT%H:%M:%S+00:00; }

{ echo "== machine"; nvidia-smi; nvidia-smi topo -m; uname -r; nproc; free -g; df -h /var/tmp
  python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'cards', torch.cuda.device_count())"
  python3 -m pip list 2>/dev/null | grep -iE "^(torch|torchvision|transformers|lightning|pytorch-lightning|tqdm|accelerate|numpy|deepspeed|megatron[-a-z]*) "
  python3 -c "import deepspeed" 2>&1 | tail -1; python3 -c "import megatron" 2>&1 | tail -1
} > "$RES/machine.txt" 2>&1
cat "$RES/machine.txt"

rec_start() {  # our recorder, at 1 s and 2 s ticks, beside one mechanism
  NAME=$1
  python3 -m gpu_triage record -o "$RES/h200x2-$NAME-1s.parquet" --interval 1 > "$RES/rec-$NAME-1s.log" 2>&1 &
  R1=$!
  python3 -m gpu_triage record -o "$RES/h200x2-$NAME-2s.parquet" --interval 2 > "$RES/rec-$NAME-2s.log" 2>&1 &
  R2=$!
  sleep 4
}
rec_stop() { sleep 4; kill -INT $R1 $R2; wait $R1 $R2; cat "$RES"/rec-$NAME-*.log; save; }
killranks() {  # end the torchrun ranks of mode $1 by the pids they wrote (they live in sessions of their own)
  for sig in TERM KILL; do
    for f in "$PIDDIR/$1"-rank*.pid; do
      [ -f "$f" ] || continue
      p=$(cat "$f")
      grep -q x2_mechanisms "/proc/$p/cmdline" 2>/dev/null && kill -$sig "$p" && echo "SIG$sig rank pid $p ($f)"
    done
    sleep 3
  done
  rm -f "$PIDDIR/$1"-rank*.pid
}
per_card() {  # the same workload as one process per card
  P=""
  for c in 0 1; do
    CUDA_VISIBLE_DEVICES=$c timeout -k 5 80 python3 "$LAB/x2_mechanisms.py" "$@" > "$RES/$1-$4-card$c.log" 2>&1 &
    P="$P $!"
  done
  wait $P; cat "$RES/$1-$4"-card*.log | grep -v ^MARK; sleep 4
}
torchrun2() { local lim=$1; shift; timeout -k 5 "$lim" python3 -m torch.distributed.run --standalone --nproc_per_node 2 "$LAB/x2_mechanisms.py" "$@"; }

if want h2d; then
echo "== 1 host-to-device copy bound $(now)"
rec_start h2d
per_card h2d "$M" --batch 256 --secs 22
per_card h2d "$M" --batch 1024 --secs 22
rec_stop
fi

if want loader0; then
echo "== 2 DataLoader num_workers=0, CPU-heavy __getitem__ $(now)"
rec_start loader0
per_card loader0 "$M" --batch 64 --rounds 8 --secs 22
per_card loader0 "$M" --batch 256 --rounds 4 --secs 22
rec_stop
fi
if want loader0rn50; then
echo "== 2b the same with ResNet-50 (a real step on the card) $(now)"
rec_start loader0rn50
per_card loader0 "$M" --batch 64 --rounds 8 --model resnet50 --secs 22
per_card loader0 "$M" --batch 128 --rounds 4 --model resnet50 --secs 22
rec_stop
fi
if want loader0rn50omp1; then  # the third call: as torchrun-launched jobs run, one intra-op thread per process
echo "== 2c the same with OMP_NUM_THREADS=1 $(now)"
export OMP_NUM_THREADS=1
rec_start loader0rn50omp1
per_card loader0 "$M" --batch 64 --rounds 8 --model resnet50 --secs 22
per_card loader0 "$M" --batch 128 --rounds 4 --model resnet50 --secs 22
rec_stop
unset OMP_NUM_THREADS
fi

if want ddp; then
echo "== 3 DDP, rank 0 checkpoints with fsync $(now)"
rec_start ddp-ckpt
torchrun2 110 ddp_ckpt "$M" --dim 4096 --layers 8 --batch 8192 --every 8 --secs 30 2>&1 | tee "$RES/ddp-ckpt-a.log" | grep -vE "^MARK|Warning|warn"
killranks ddp_ckpt; sleep 4
torchrun2 120 ddp_ckpt "$M" --dim 8192 --layers 4 --batch 4096 --every 12 --secs 30 2>&1 | tee "$RES/ddp-ckpt-b.log" | grep -vE "^MARK|Warning|warn"
killranks ddp_ckpt
rec_stop
fi

if want joblogs; then
echo "== 5 job logs for issue #12 (four real trainings at once, two per card) $(now)"
J=""
CUDA_VISIBLE_DEVICES=0 timeout -k 5 75 python3 "$LAB/joblogs.py" tqdm --secs 20 > "$RES/joblogs/tqdm.log" 2>&1 & J="$J $!"
CUDA_VISIBLE_DEVICES=0 timeout -k 5 90 python3 "$LAB/joblogs.py" hf --secs 25 > "$RES/joblogs/hf_trainer.log" 2>&1 & J="$J $!"
CUDA_VISIBLE_DEVICES=1 timeout -k 5 75 python3 "$LAB/joblogs.py" lightning --secs 25 > "$RES/joblogs/lightning.log" 2>&1 & J="$J $!"
CUDA_VISIBLE_DEVICES=1 timeout -k 5 75 python3 "$LAB/joblogs.py" imagenet --secs 25 > "$RES/joblogs/imagenet_example.log" 2>&1 & J="$J $!"
wait $J
for f in "$RES"/joblogs/*.log; do echo "-- $f $(wc -c < "$f") bytes"; tr '\r' '\n' < "$f" | grep -E "TRUE|Error|error" | tail -3; done
save
fi

if want stuck; then
echo "== 4 stuck collective: one rank stops calling collectives, the other spins in all_reduce $(now)"
rec_start stuck
for setting in "1 16777216 a" "0 268435456 b"; do
  set -- $setting
  rm -f "$PIDDIR"/stuck-started
  torchrun2 150 stuck "$M" --hang-rank "$1" --numel "$2" --warm 6 > "$RES/stuck-$3.log" 2>&1 &
  T=$!
  for i in $(seq 90); do [ -f "$PIDDIR/stuck-started" ] && break; sleep 1; done
  sleep 35
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used,power.draw --format=csv
  sleep 5
  echo "{\"mode\": \"stuck_end\", \"tag\": \"$3\", \"end\": \"$(now)\"}" >> "$RES/stuck-ends.jsonl"
  killranks stuck
  wait $T; grep -vE "^MARK" "$RES/stuck-$3.log" | tail -5
  sleep 4
done
rec_stop
fi
if want validate; then  # a third setting of each mechanism, recorded after the rules were set (PHASES=validate)
echo "== V validation: third settings, never used to choose a threshold $(now)"
rec_start val-h2d
per_card h2d "$M" --batch 512 --secs 22
rec_stop
rec_start val-loader0
per_card loader0 "$M" --batch 128 --rounds 6 --secs 22
rec_stop
rec_start val-ddp-ckpt
torchrun2 110 ddp_ckpt "$M" --dim 6144 --layers 6 --batch 6144 --every 10 --secs 30 2>&1 | tee "$RES/val-ddp-ckpt.log" | grep -vE "^MARK|Warning|warn"
killranks ddp_ckpt
rec_stop
rec_start val-stuck
rm -f "$PIDDIR"/stuck-started
torchrun2 150 stuck "$M" --hang-rank 1 --numel 67108864 --warm 6 > "$RES/val-stuck.log" 2>&1 &
T=$!
for i in $(seq 90); do [ -f "$PIDDIR/stuck-started" ] && break; sleep 1; done
sleep 35
echo "{\"mode\": \"stuck_end\", \"tag\": \"a\", \"end\": \"$(now)\"}" >> "$RES/stuck-ends.jsonl"
killranks stuck
wait $T; grep -vE "^MARK" "$RES/val-stuck.log" | tail -5
rec_stop
fi

nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv
echo "== done $(now)"; ls -la "$RES"
save
