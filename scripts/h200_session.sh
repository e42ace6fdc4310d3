#!/usr/bin/env bash
# One session on the real H200 machine (no network there): prove the NVML path, record a labelled real
# trace with our own recorder while the lab's PyTorch workloads run, and measure monitors side by side.
# Run from the repo root with the wheels in .whl/ and the lab's workloads.py in .devlab/ (both carried).
# Everything it produces goes to $OUT: log.txt, probe.json, doctor.json, the recordings and labels.json.
. "$(dirname "$0")/h200_env.sh"
SECS=${SECS:-20}
nvidia-smi topo -m; python3 --version
python3 -c "import pynvml, textual, polars; print('nvidia-ml-py', pynvml.__file__, 'textual', textual.__version__, 'polars', polars.__version__)"
echo "== probe (NVML source under a matmul load)"
timeout 90 python3 scripts/h200_probe.py --seconds 20 --interval 0.5 --dump 4 --json-out "$OUT/probe.json" --burn
echo "== sampler benchmark (real NVML)"
timeout 90 python3 benchmarks/bench_sampler.py --real-ticks 40
echo "== doctor"
time python3 -m gpu_triage doctor --params 7e9; echo "doctor exit status $?"
python3 -m gpu_triage doctor --json --params 7e9 > "$OUT/doctor.json"
echo "== recording the lab workloads (SECS=$SECS)"
python3 -m gpu_triage record -o "$OUT/h200-own-2s.parquet" --interval 2 > /tmp/rec2.log 2>&1 &
R1=$!
python3 -m gpu_triage record -o "$OUT/h200-own-0.5s.parquet" --interval 0.5 > /tmp/rec05.log 2>&1 &
R2=$!
sleep 3
SECS=$SECS python3 .devlab/workloads.py "$OUT/labels.json" > /tmp/workloads.log 2>&1 &
W=$!
sleep 25
echo "== monitors side by side, 60 s each, while the workloads run"
python3 -m nvitop --help 2>&1 | grep -i -- "--interval" | head -3
python3 benchmarks/compare_monitors.py --seconds 60 \
  --cmd "gpu-triage live=python3 -m gpu_triage --interval 2" \
  --cmd "nvitop=python3 -m nvitop --interval 2" \
  --cmd "nvidia-smi dmon=nvidia-smi dmon -d 2"
wait $W
echo "== workloads"; cat /tmp/workloads.log
echo "== recorder cost (whole run)"; ps -o pid,etime,cputime,rss,args -p $R1,$R2
kill -INT $R1 $R2; wait $R1 $R2
cat /tmp/rec2.log /tmp/rec05.log | tail -4
ls -la "$OUT"
echo "== diagnose 2 s"; python3 -m gpu_triage diagnose "$OUT/h200-own-2s.parquet"
echo "== diagnose 0.5 s"; python3 -m gpu_triage diagnose "$OUT/h200-own-0.5s.parquet"
