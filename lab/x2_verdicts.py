"""What the current rules say in each labelled window of the 2-card recordings (the tests' method: raw
verdicts fed tick by tick, judged from 35 % to 90 % of each window, a periodic checkpoint's from its first save:
gpu_triage.data.judged_ticks; and the offline segments there).

usage: PYTHONPATH=app python3 lab/x2_verdicts.py tests/data/h200x2-h2d-1s.parquet ...
Prints one line per window: share of middle ticks whose raw verdict matches the label, the verdicts seen there,
and the offline segments' verdicts. A report only: nothing here asserts.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.data import judged_ticks, labels_for
from gpu_triage.offline.judge import load_trace, verdicts
from gpu_triage.offline.timeline import segments


def main() -> None:
    cfg = Config()
    for path in sys.argv[1:]:
        tr = load_trace(path)
        raws = verdicts(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
        segs = segments(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
        per_tick = [s for s in segs for _ in range(s.ticks)]
        print(f"== {path}")
        for lab in json.loads(labels_for(Path(path)).read_text()):
            idx = judged_ticks(lab, [t.ts for t in tr.ticks], tr.interval_s)
            want = f"{'|'.join(lab['pattern'])} / {'|'.join(lab['bottleneck'])}"
            if not idx:
                print(f"  {lab['scenario']:42} want {want:40} no tick in the window's middle")
                continue
            raw = Counter(f"{raws[i][1].pattern}/{raws[i][1].bottleneck}" for i in idx)
            seg = Counter(f"{per_tick[i].pattern}/{per_tick[i].bottleneck}" for i in idx)
            ok = sum(raws[i][1].pattern in lab["pattern"] and raws[i][1].bottleneck in lab["bottleneck"] for i in idx)
            print(f"  {lab['scenario']:42} want {want:40} raw {ok}/{len(idx)} right: {dict(raw)}; "
                  f"segments: {dict(seg)}")


if __name__ == "__main__":
    main()
