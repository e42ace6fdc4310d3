"""The outside rules on the real 1-card H200 recordings made for what only the inside of a job can tell
(tests/data/h200-inside-{a,b}-{2s,0.5s}: an optimizer stepping on the CPU, a loader waiting on latency, a
Python loop, .item() syncs, host-to-device copies, recompiles, waits on another service, slow starts, a
model part on the CPU). Without stacks a reading may be honest or wrong: for every labelled window (judged
35-90 %, gpu_triage.data.judged_ticks) every raw verdict fed tick by tick, and every offline segment, reads
one of the label's ``without_stacks`` and none of its ``wrong`` — at both intervals.

A start-up is the mechanism ``start_up`` under the bottleneck ``none``: read as "start_up" here, as the
labels write it. A Python loop on one core reads ``host_or_input`` (the label's honest reading without stacks:
num_workers=0 looks the same). What the outside still reads wrong on some ticks is an expected failure with its
reason (strict: it fails loudly once it reads right); none is left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import real_readings as rr

DATA = Path(__file__).parent / "data"
NAMES = ("h200-inside-a-2s", "h200-inside-a-0.5s", "h200-inside-b-2s", "h200-inside-b-0.5s")

KNOWN_MISSES: dict[tuple[str, str, str], str] = {}


def _cases(kind: str) -> list:
    out = []
    for name in NAMES:
        for lab in rr.labels(name):
            miss = KNOWN_MISSES.get((name, lab["scenario"], kind))
            marks = [pytest.mark.xfail(reason=miss, strict=True)] if miss else []
            out.append(pytest.param(name, lab["scenario"], id=f"{name}-{lab['scenario']}", marks=marks))
    return out


def _check(lab: dict, got: str, where: str) -> None:
    assert got in lab["without_stacks"], f"{lab['scenario']} {where}: {got}, honest would be {lab['without_stacks']}"
    assert got not in lab["wrong"], f"{lab['scenario']} {where}: {got} is wrong: {lab['wrong'][got]}"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), _cases("raw"))
def test_every_raw_verdict_is_honest_without_stacks(name: str, scenario: str) -> None:
    lab = next(x for x in rr.labels(name) if x["scenario"] == scenario)
    idx = rr.judged(name, lab)
    assert len(idx) >= 5
    res = rr.raw(name)
    for i in idx:
        raw = res[i][1]
        _check(lab, rr.reading(raw.bottleneck, raw.mechanism), f"raw at {res[i][0].ts:%H:%M:%S.%f} {raw.evidence[:2]}")
        if raw.bottleneck == "unexplained":  # says so, shows what it sees, gives no mechanism's advice
            assert raw.evidence[0].startswith("unexplained: GPU "), raw.evidence
            assert not any("num_workers" in a or "pin_memory" in a or "topology" in a for a in raw.advice)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), _cases("segment"))
def test_every_offline_segment_is_honest_without_stacks(name: str, scenario: str) -> None:
    lab = next(x for x in rr.labels(name) if x["scenario"] == scenario)
    per_tick = rr.per_tick_segments(name)
    raws = rr.raw(name)
    for i in rr.judged(name, lab):
        seg = per_tick[i]
        # a segment keeps (pattern, bottleneck); a start-up is a raw tick's mechanism under "none"
        mech = raws[i][1].mechanism if raws[i][1].bottleneck == seg.bottleneck else ""
        _check(lab, rr.reading(seg.bottleneck, mech), f"segment {seg.start:%H:%M:%S}-{seg.end:%H:%M:%S}")


@pytest.mark.slow
def test_one_card_has_no_communication_and_its_pcie_is_a_copy() -> None:
    """Pinned copies on one card (GPU-Util 98 %, SM 3.5 %, PCIe RX 54 GB/s): the copy, named as such."""
    for name in ("h200-inside-a-2s", "h200-inside-a-0.5s"):
        lab = next(x for x in rr.labels(name) if x["scenario"] == "h2d_copy_1card_pinned")
        for i in rr.judged(name, lab):
            raw = rr.raw(name)[i][1]
            assert (raw.bottleneck, raw.mechanism) == ("data_pipeline", "h2d_copy"), raw.evidence
            assert not any("NCCL" in a or "topology" in a for a in raw.advice)
            assert not any(a.startswith("DataLoader(pin_memory=True)") for a in raw.advice)  # already pinned


def test_starting_up_ends_when_the_process_computes_on_the_host() -> None:
    """A model part on the CPU (10 and 3.4 cores for the whole window, steps all along) is not a start-up."""
    for name in ("h200-inside-b-2s", "h200-inside-b-0.5s"):
        for scenario in ("cpu_model_part_t16", "cpu_model_part_t4"):
            lab = next(x for x in rr.labels(name) if x["scenario"] == scenario)
            assert all(rr.raw(name)[i][1].mechanism != "start_up" for i in rr.judged(name, lab))
