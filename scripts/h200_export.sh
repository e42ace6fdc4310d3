#!/usr/bin/env bash
# gpu-triage export on the real H200 machine (not run yet; for the integrator): the scrape and the daemon's
# CPU and RSS with the real driver, side by side with `nvidia-smi dmon -d 2` over the same 60 s, and one
# scrape of the real card saved for docs/metrics.md. Run from the repo root as the other h200 scripts
# (wheels in .whl/, prometheus_client among them). Everything goes to $OUT.
. "$(dirname "$0")/h200_env.sh"
python3 -c "import prometheus_client; print('prometheus_client', prometheus_client.__file__)"
echo "== bench_export with the live source (8-card sim for the in-process scrape, then the real card)"
timeout 200 python3 benchmarks/bench_export.py --source live --seconds 60 --interval 2 | tee "$OUT/bench_export.txt"
echo "== nvidia-smi dmon -d 2 for 60 s: its CPU and RSS"
nvidia-smi dmon -d 2 > /dev/null &
D=$!
sleep 5
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u0 s0 _ < "/proc/$D/stat"
sleep 60
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u1 s1 _ < "/proc/$D/stat"
echo "nvidia-smi dmon: CPU $(( (u1 + s1 - u0 - s0) )) ticks of $(getconf CLK_TCK)/s over 60 s; RSS $(grep VmRSS /proc/$D/status)"
kill "$D"
echo "== one real scrape"
python3 -m gpu_triage export --listen 127.0.0.1:9839 --interval 2 > /tmp/export.log 2>&1 &
E=$!
sleep 8
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9839/metrics').read().decode())" > "$OUT/h200-metrics.txt"
kill -TERM "$E"; wait "$E"; echo "export exit status $?"; cat /tmp/export.log
grep -c '^gpu_triage' "$OUT/h200-metrics.txt"
