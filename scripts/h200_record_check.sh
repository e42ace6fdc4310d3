#!/usr/bin/env bash
# The recorder's real path on the GPU machine (issue 15, round 5): `record --source live` writes its stream
# without pyarrow and makes the Parquet in its child converter; a dataset rotates through the same child.
# Checks: exit 0, no stream or temporary file left, every file reads back, pyarrow never mapped by the recorder.
# Run from the repo root with $OUT set and .whl/ carried (device kind nvidia-h200 or nvidia-h200-x2).
. scripts/h200_env.sh
set -o pipefail
D=/tmp/rec-check; rm -rf $D; mkdir -p $D
echo "== one file: 20 s at 1 s, stopped by SIGTERM"
python3 -m gpu_triage record -o $D/one.parquet --interval 1 > $D/one.log 2>&1 &
R=$!; sleep 12
grep -c pyarrow /proc/$R/maps | sed 's/^/pyarrow mappings in the recording process: /'
grep -E "VmRSS|VmHWM" /proc/$R/status
sleep 8; kill -TERM $R; wait $R; echo "exit $?"; cat $D/one.log
echo "== a dataset rotating every 60 s (the shortest allowed), 75 s at 1 s, stopped by SIGTERM to the recorder and any converter at once"
python3 -m gpu_triage record -o $D/ds/ --rotate 60 --interval 1 > $D/ds.log 2>&1 &
R=$!; sleep 75
echo "after a rotation: pyarrow mappings $(grep -c pyarrow /proc/$R/maps); $(grep -E 'VmRSS|VmHWM' /proc/$R/status | tr -s ' \n\t' ' ')"
kill -TERM $R $(pgrep -P $R) 2>/dev/null; wait $R; echo "exit $?"; cat $D/ds.log
ls -laR $D | grep -E "parquet|arrows|tmp" 
python3 - $D <<'PY'
import sys
from pathlib import Path
from gpu_triage.trace.reader import open_trace
root = Path(sys.argv[1])
left = [p for p in root.rglob("*") if p.name.endswith(".partial.arrows") or ".tmp-" in p.name]
files = sorted(root.rglob("*.parquet"))
for f in files:
    t = open_trace(f)
    g = t.tick(t.n - 1).gpus[0]
    print(f"{f.relative_to(root)}: {t.n} ticks, recovered={t.recovered}, card 0 util {g.util_pct} sm {g.sm_active_pct} power {g.power_w}")
print("left behind:", left or "nothing")
PY
echo "== done"
