#!/usr/bin/env bash
# Fresh live screenshots on the real H200 (device kind nvidia-h200): the dashboard on NVML + psutil while a
# bf16 matmul loop runs on card 0, after AFTER seconds (default 70) of sampling, at 160x48 (with the card's
# detail view) and at 80x24. SVGs in $OUT; make the PNGs here with rsvg-convert. Needs .whl/ carried.
. scripts/h200_env.sh
AFTER=${AFTER:-70}
LOAD_CARDS=0 . scripts/h200_load.sh
python3 scripts/live_screenshot.py --after "$AFTER" --size 160x48 --out "$OUT/live-h200-160x48.svg" \
  --detail "$OUT/live-h200-detail-160x48.svg" > /tmp/shot.log 2>&1 &
S=$!
python3 scripts/live_screenshot.py --after "$AFTER" --size 80x24 --out "$OUT/live-h200-80x24.svg" > /tmp/shot2.log 2>&1 &
S2=$!
wait $S $S2; cat /tmp/shot.log /tmp/shot2.log
kill $LOADS 2>/dev/null; wait $LOADS 2>/dev/null
ls -la "$OUT"
