"""A third setting of each issue-11 mechanism, recorded on the 2-card H200 machine after the rules and their
thresholds were set (lab/x2_mechanisms.py via a one-off script (in git history, PHASES=validate); marks in
lab/runs/x2-val-2026-11-30-marks.json): host-to-device copies of batch 512, num_workers=0 at batch 128, a
2.72 GB checkpoint every 10 s, rank 1 hung on a 64 Mi-element all-reduce. No threshold saw these files. Every
judged tick must be read right, live (raw) and offline; the shown verdict may lag by its hold.

The same recordings are the first made with the PCIe rate from GPM (docs/performance.md): the copy-bound job's
own count is checked against what the recorder read.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpu_triage.data import judged_ticks, labels_for
from x2_runs import lab_run

DATA = Path(__file__).parent / "data"
FILES = [DATA / f"h200x2-val-{m}-{iv}.parquet" for m in ("h2d", "loader0", "ddp-ckpt", "stuck") for iv in ("1s", "2s")]


CASES = [(p, lab["scenario"]) for p in FILES for lab in json.loads(labels_for(p).read_text())]


@pytest.mark.parametrize(("path", "scenario"), CASES, ids=[f"{p.stem}-{s}" for p, s in CASES])
def test_unseen_setting_is_read_right_live_and_offline(path: Path, scenario: str) -> None:
    lab = next(x for x in json.loads(labels_for(path).read_text()) if x["scenario"] == scenario)
    assert lab["validation"] is True
    tr, res, seg_of = lab_run(path)
    idx = judged_ticks(lab, [t.ts for t, _r, _s in res], tr.interval_s)
    assert idx

    def ok(v) -> bool:  # type: ignore[no-untyped-def]
        return v.pattern in lab["pattern"] and v.bottleneck in lab["bottleneck"]

    got = [res[i][1].key for i in idx]
    assert all(ok(res[i][1]) for i in idx), f"raw: {got}"
    assert all(ok(seg_of[i]) for i in idx), f"offline: {[seg_of[i].key for i in idx]}"


@pytest.mark.parametrize("interval", ["1s", "2s"])
def test_gpm_reads_the_copy_bound_jobs_pcie_rate(interval: str) -> None:
    """A check of the recording (the fixture), not of code run here: the live source recorded these rates on
    the H200s after the GPM change, so they stand as the evidence that GPM reads heavy PCIe traffic right
    (the source's own link-rate arithmetic is tested against the fake NVML in test_nvml_source.py)."""
    # the job copied 7.27-7.35 GB/s of payload per card; the counters read such copies at 0.5-2.4 GB/s (they
    # wrap at 4 GiB); GPM counts the link's traffic, protocol included, so somewhat above the payload
    path = DATA / f"h200x2-val-h2d-{interval}.parquet"
    lab = json.loads(labels_for(path).read_text())[0]
    tr, res, _ = lab_run(path)
    idx = judged_ticks(lab, [t.ts for t, _r, _s in res], tr.interval_s)
    for card, true_gb_per_s in lab["true_host_to_device_gb_per_s"].items():
        read = statistics.median(tr.ticks[i].gpus[int(card)].pcie_rx_bytes_per_s or 0.0 for i in idx) / 1e9
        assert true_gb_per_s <= read <= 1.25 * true_gb_per_s, (card, read, true_gb_per_s)
