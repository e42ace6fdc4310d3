"""The diagnosis on the real H200 recordings: each labelled window's middle must get an acceptable verdict.

Judged as the dashboard would: ticks fed one by one into a 300 s rolling window (the window before each
scenario holds the previous scenario). The raw verdict is judged from 35 % to 90 % of each window (the
edges are start-up and wind-down); the shown verdict, which waits hold_s before changing, from 65 % on.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from gpu_triage.data import H200_TRACE_05S, H200_TRACE_2S, labels_for
from tests import real_readings as rr

TRACES = {"2s": H200_TRACE_2S, "0.5s": H200_TRACE_05S}


def _run(name: str):  # type: ignore[no-untyped-def]
    return rr.replay(TRACES[name])[1]


def _labels(name: str) -> list[dict]:
    return json.loads(labels_for(TRACES[name]).read_text())


def _between(name: str, lab: dict, a: float, b: float) -> list[int]:
    start, end = datetime.fromisoformat(lab["start"]), datetime.fromisoformat(lab["end"])
    lo, hi = start + (end - start) * a, start + (end - start) * b
    return [i for i, (tick, _, _) in enumerate(_run(name)) if lo <= tick.ts <= hi]


CASES = [(name, lab["scenario"]) for name in TRACES for lab in _labels(name)]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), CASES)
def test_middle_of_each_window_gets_an_acceptable_verdict(name: str, scenario: str) -> None:
    lab = next(x for x in _labels(name) if x["scenario"] == scenario)
    res = _run(name)
    raw_idx = _between(name, lab, 0.35, 0.9)
    assert raw_idx, "the window holds ticks"
    for i in raw_idx:
        raw = res[i][1]
        assert raw.pattern in lab["pattern"] and raw.bottleneck in lab["bottleneck"], (
            f"{scenario} at {res[i][0].ts:%H:%M:%S}: got {raw.pattern}/{raw.bottleneck}; evidence {raw.evidence}")
        assert raw.evidence, "every verdict carries evidence"
        if raw.bottleneck != "none":
            assert raw.advice, "a bottleneck comes with advice"
    for i in _between(name, lab, 0.65, 0.95):
        shown = res[i][2]
        assert shown.pattern in lab["pattern"] and shown.bottleneck in lab["bottleneck"], (
            f"shown {scenario} at {res[i][0].ts:%H:%M:%S}: {shown.pattern}/{shown.bottleneck}")


def test_evidence_speaks_in_numbers_on_the_real_cases() -> None:
    res = _run("2s")
    by = {lab["scenario"]: _between("2s", lab, 0.5, 0.9)[-1] for lab in _labels("2s")}
    starved = res[by["dataloader_starved"]][1]
    assert any("DataLoader workers" in e and "2" in e for e in starved.evidence)
    # one number, higher than now, with its reason: 2 pegged workers feeding the GPU a fraction of the time
    rec = [a for a in starved.advice if a.startswith("DataLoader(num_workers=")]
    assert len(rec) == 1 and "(now 2): the workers are pegged" in rec[0] and "cores idle" in rec[0], starved.advice
    assert int(rec[0].split("=")[1].split(")")[0]) > 2
    restart = res[by["dataloader_epoch_restart"]][1]
    assert any("re-spawned" in e for e in restart.evidence)
    assert any("persistent_workers=True" in a for a in restart.advice)
    assert restart.period_s is not None and 5.0 <= restart.period_s <= 7.0  # one epoch every 3 ticks in the recording
    stall = res[by["sawtooth_stall"]][1]
    assert stall.period_s is not None and 7.0 <= stall.period_s <= 9.0 and stall.duty is not None
    saturated = res[by["dataloader_cpu_saturated"]][1]
    assert any("CPU" in e and "busy" in e for e in saturated.evidence)
    io = res[by["io_bound"]][1]
    assert any("iowait" in e for e in io.evidence) and any("WebDataset" in a for a in io.advice)
    hog = res[by["mem_hog_idle"]][1]
    assert hog.gpus == [0] and any("memory" in e for e in hog.evidence)
    launch = res[by["launch_bound"]][1]
    assert launch.facts["sm_active_mean_pct"] < 5 and any("CUDA graphs" in a for a in launch.advice)
