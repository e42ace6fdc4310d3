#!/usr/bin/env bash
# Issue #15 on the 2-card H200 machine (device kind nvidia-h200-x2), one call of about 4-5 minutes: what the
# monitors cost side by side under a PyTorch load on both cards, where the recorder's RSS goes (by stage), and
# start-up to the first frame. Run from the repo root with $OUT set and .whl/ carried (textual & co., and
# nvitop 1.7.2, whose only dependencies, nvidia-ml-py < 13.616 and psutil, are in the machine's image).
#   RUNS (default 3) runs of SECS (default 60) seconds of the four monitors at once at a 2 s interval.
# Results: $OUT/log.txt (everything), $OUT/cost.txt (the tables).
. scripts/h200_env.sh
set -o pipefail
RUNS=${RUNS:-3}
SECS=${SECS:-60}
# pip compiles a package's modules when it installs it; h200_env.sh installs with --no-compile, so without this
# the first start of each tool would measure Python compiling textual, not our start-up
python3 -m compileall -q -j 0 /tmp/site app > /dev/null
{ echo "== versions"; python3 --version; nproc
  python3 -c "import pyarrow, numpy, textual, psutil, pynvml; print('pyarrow', pyarrow.__version__, 'numpy', numpy.__version__, 'textual', textual.__version__, 'psutil', psutil.__version__)"
  python3 -m pip list 2>/dev/null | grep -iE "^(nvidia-ml-py|torch|pyarrow|nvitop) "
  python3 -m nvitop --version
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
} 2>&1 | tee "$OUT/cost.txt"

# The load: a bf16 matmul loop on each card, for the whole session (killed at the end).
. scripts/h200_load.sh

echo "== parts of a tick on the real driver (benchmarks/bench_tick_parts.py, 40 ticks at 0.5 s)" | tee -a "$OUT/cost.txt"
timeout 120 python3 benchmarks/bench_tick_parts.py --ticks 40 --interval 0.5 --top 15 2>&1 | tee -a "$OUT/cost.txt"

echo "== RSS of each command as a user starts it (benchmarks/rss_commands.py --source live)" | tee -a "$OUT/cost.txt"
timeout 120 python3 benchmarks/rss_commands.py --source live 2>&1 | tee -a "$OUT/cost.txt"
echo "== the RSS floor by stack: NVML, then nvitop's stack or a bare Textual app (benchmarks/rss_floor.py)" | tee -a "$OUT/cost.txt"
timeout 120 python3 benchmarks/rss_floor.py 2>&1 | tee -a "$OUT/cost.txt"
echo "== the GPU process reader on a real family (benchmarks/bench_procs.py)" | tee -a "$OUT/cost.txt"
timeout 120 python3 benchmarks/bench_procs.py --ticks 100 2>&1 | tee -a "$OUT/cost.txt"

echo "== the recorder's RSS by stage (live source, 2 cards under load)" | tee -a "$OUT/cost.txt"
timeout 120 python3 benchmarks/rss_stages.py --source live --interval 0.1 --top 8 2>&1 | tee -a "$OUT/cost.txt"
echo "== the recorder's stop: the Parquet made in a child or in-process (benchmarks/bench_record_close.py)" | tee -a "$OUT/cost.txt"
timeout 120 python3 benchmarks/bench_record_close.py --ticks 1800 --gpus 8 2>&1 | tee -a "$OUT/cost.txt"

echo "== start-up to the first frame (under the load)" | tee -a "$OUT/cost.txt"
timeout 120 python3 benchmarks/bench_startup.py --runs 3 --cmd live --cmd "demo healthy --gpus 2" --importtime 2>&1 \
  | tee -a "$OUT/cost.txt"

echo "== monitors side by side: all four at once, $RUNS x $SECS s at 2 s, 160x50, steady after 10 s" | tee -a "$OUT/cost.txt"
timeout $((RUNS * (SECS + 25) + 30)) python3 benchmarks/compare_monitors.py --together --runs "$RUNS" \
  --seconds "$SECS" --warmup 10 --cols 160 --rows 50 \
  --cmd "gpu-triage live=python3 -m gpu_triage live --interval 2" \
  --cmd "gpu-triage record=sh -c 'exec python3 -m gpu_triage record -o /tmp/cmp-\$\$.parquet --interval 2'" \
  --cmd "nvitop=python3 -m nvitop --interval 2" \
  --cmd "nvidia-smi dmon=nvidia-smi dmon -d 2" \
  --cmd "gpu-triage export=python3 -m gpu_triage export --interval 2 --listen 127.0.0.1:9840" \
  2>&1 | tee -a "$OUT/cost.txt"

echo "== one real scrape of export (2 cards under load), and its time over 20 scrapes" | tee -a "$OUT/cost.txt"
python3 -m gpu_triage export --listen 127.0.0.1:9839 --interval 2 > /tmp/export.log 2>&1 &
E=$!
sleep 7
python3 - "$OUT/h200-metrics.txt" <<'PY' 2>&1 | tee -a "$OUT/cost.txt"
import statistics, sys, time, urllib.request
times = []
for _ in range(20):
    t0 = time.perf_counter()
    body = urllib.request.urlopen("http://127.0.0.1:9839/metrics", timeout=5).read()
    times.append((time.perf_counter() - t0) * 1000)
    time.sleep(0.1)
open(sys.argv[1], "wb").write(body)
print(f"scrape over HTTP: median {statistics.median(times):.2f} ms, max {max(times):.2f} ms, "
      f"{len(body)} bytes, {sum(1 for l in body.decode().splitlines() if l.startswith('gpu_triage'))} samples")
PY
kill -TERM "$E"; wait "$E"; echo "export exit status $?"; cat /tmp/export.log
kill $LOADS 2>/dev/null; wait $LOADS 2>/dev/null
ls -la /tmp/cmp-*.parquet 2>/dev/null
echo "== done"
