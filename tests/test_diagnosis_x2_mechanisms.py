"""The mechanisms of issue 11 on real 2-card H200 recordings (the lab's, docs/h200.md): each labelled window
(not the 1-2 tick checkpoint `event` windows) is read right live and offline, and the advice fits the
mechanism. Thresholds were chosen on each mechanism's first setting; the second was held out, and some of
its ticks are still misread (the first seconds of a 3.2 GB torch.save before its fsync reaches the disk;
the first ticks after rank 0 hangs, while the judged stretch still holds the all-reduce before it), so a
window must be right in most of its middle ticks, and the tuning settings in all of them.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from pathlib import Path

import pytest

from gpu_triage.config import Config
from gpu_triage.data import labels_for
from gpu_triage.diagnosis.offline import load_trace, segments, verdicts

DATA = Path(__file__).parent / "data"
MECHANISMS = ["h2d", "loader0", "loader0rn50", "loader0rn50omp1", "ddp-ckpt", "stuck"]
FILES = [DATA / f"h200x2-{m}-{iv}.parquet" for m in MECHANISMS for iv in ("1s", "2s")]
# the first setting of each mechanism: the thresholds were chosen on these windows
TUNED = {"h2d_copy_bound_batch256", "loader_in_process_batch64", "ddp_periodic_checkpoint_1.61GB_every8s",
         "stuck_collective_rank1_hung"}


@cache
def _run(path: Path):  # type: ignore[no-untyped-def]
    cfg = Config()
    tr = load_trace(path)
    res = verdicts(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    segs = segments(tr.ticks, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    return res, [s for s in segs for _ in range(s.ticks)]


CASES = [(p, lab["scenario"]) for p in FILES for lab in json.loads(labels_for(p).read_text()) if not lab.get("event")]


@pytest.mark.parametrize(("path", "scenario"), CASES, ids=[f"{p.stem}-{s}" for p, s in CASES])
def test_each_mechanism_window_is_read_right(path: Path, scenario: str) -> None:
    lab = next(x for x in json.loads(labels_for(path).read_text()) if x["scenario"] == scenario)
    res, seg_of = _run(path)
    a, b = datetime.fromisoformat(lab["start"]), datetime.fromisoformat(lab["end"])
    idx = [i for i, (t, _r, _s) in enumerate(res) if a + (b - a) * 0.35 <= t.ts <= a + (b - a) * 0.9]
    assert idx

    def ok(v) -> bool:  # type: ignore[no-untyped-def]
        return v.pattern in lab["pattern"] and v.bottleneck in lab["bottleneck"]

    raw = [ok(res[i][1]) for i in idx]
    seg = [ok(seg_of[i]) for i in idx]
    need = 1.0 if scenario in TUNED else 0.5
    got = [res[i][1].key for i in idx]
    assert sum(raw) >= need * len(idx), f"raw {sum(raw)}/{len(idx)}: {got}"
    assert sum(seg) >= need * len(idx), f"offline {sum(seg)}/{len(idx)}"
    for i in idx:
        shown = res[i][2]
        if scenario.startswith("stuck"):
            assert not any("set_device" in x or "topology" in x for x in shown.advice), shown.advice
        if ok(res[i][1]) and scenario.startswith("h2d"):
            assert any("pin_memory=True" in x for x in res[i][1].advice)
            if scenario in TUNED:  # named as the copy itself (held out at 2 s: NVML's RX reads 0.46 GB/s there)
                assert any("non_blocking=True" in x for x in res[i][1].advice)
        if ok(res[i][1]) and scenario.startswith("ddp"):
            assert res[i][1].gpus == [0], "named on the rank that writes"
        if ok(res[i][1]) and scenario.startswith("loader"):
            assert any("num_workers=0" in e or "every core" in e or "CPU" in e for e in res[i][1].evidence)
