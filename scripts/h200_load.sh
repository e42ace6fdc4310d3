#!/usr/bin/env bash
# Sourced by the cost and profile sessions: a bf16 matmul loop on each listed card (default 0 1), started in
# the background and left running; $LOADS holds their pids so the session can end them (kill $LOADS).
cat > /tmp/load.py <<'PY'
import sys, time, torch
dev = torch.device(f"cuda:{sys.argv[1]}")
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
print(f"load on {dev}", flush=True)
while True:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize(dev)
    time.sleep(0.01)  # leave the CPU side nearly idle: the monitors' CPU is what is measured
PY
LOADS=""
LOAD_CARDS=${LOAD_CARDS:-0 1}
for card in $LOAD_CARDS; do python3 /tmp/load.py "$card" > "/tmp/load-$card.log" 2>&1 & LOADS="$LOADS $!"; done
for _ in $(seq 60); do [ "$(cat /tmp/load-*.log 2>/dev/null | grep -c '^load on')" -ge "$(echo $LOAD_CARDS | wc -w)" ] && break; sleep 1; done
cat /tmp/load-*.log
nvidia-smi --query-gpu=index,utilization.gpu,power.draw --format=csv,noheader
