"""The verdict with the job's own stacks, on the real 1-card H200 recordings made for what only the inside can
tell (tests/data/h200-inside-{a,b}-{2s,0.5s}-stacks: the v2 recordings with the lab's real py-spy dumps in
their trace-v3 ``stacks`` column, scripts/inside_to_v3.py). For every labelled window (judged 35-90 %,
gpu_triage.data.judged_ticks) every raw verdict fed tick by tick, and every offline segment, reads one of the
label's ``bottleneck`` (what is right with stacks) and none of its ``wrong`` — at both intervals; without the
stacks the readings are the outside ones, unchanged.

No stack here is made up: the samples are the classifier's reading of the real dumps.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpu_triage.config import Config
from tests import real_readings as rr

DATA = Path(__file__).parent / "data"
NAMES = ("h200-inside-a-2s-stacks", "h200-inside-a-0.5s-stacks", "h200-inside-b-2s-stacks",
         "h200-inside-b-0.5s-stacks")
KNOWN_MISSES: dict[tuple[str, str, str], str] = {}


def _cases(kind: str) -> list:  # type: ignore[type-arg]
    out = []
    for name in NAMES:
        for lab in rr.labels(name):
            miss = KNOWN_MISSES.get((name, lab["scenario"], kind))
            marks = [pytest.mark.xfail(reason=miss, strict=True)] if miss else []
            out.append(pytest.param(name, lab["scenario"], id=f"{name}-{lab['scenario']}", marks=marks))
    return out


def _check(lab: dict, got: str, where: str) -> None:  # type: ignore[type-arg]
    """Right, or (where the label says why: a window whose first samples name no mechanism yet) honest."""
    ok = [*lab["bottleneck"], *lab.get("with_stacks_honest", [])]
    assert got in ok, f"{lab['scenario']} {where}: {got}, right would be {lab['bottleneck']}"
    assert got not in lab["wrong"], f"{lab['scenario']} {where}: {got} is wrong: {lab['wrong'][got]}"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), _cases("raw"))
def test_every_raw_verdict_reads_the_mechanism_with_stacks(name: str, scenario: str) -> None:
    lab = rr.label(name, scenario)
    idx = rr.judged(name, lab)
    assert len(idx) >= 5
    res = rr.raw(name)
    for i in idx:
        raw = res[i][1]
        _check(lab, rr.reading(raw.bottleneck, raw.mechanism), f"raw at {res[i][0].ts:%H:%M:%S.%f} {raw.evidence[:2]}")
    last = res[idx[-1]][1]  # an honest first reading gives way to the right one inside the window
    assert rr.reading(last.bottleneck, last.mechanism) in lab["bottleneck"], last.evidence


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), _cases("segment"))
def test_every_offline_segment_reads_the_mechanism_with_stacks(name: str, scenario: str) -> None:
    lab = rr.label(name, scenario)
    per_tick = rr.per_tick_segments(name)
    raws = rr.raw(name)
    for i in rr.judged(name, lab):
        seg = per_tick[i]
        mech = raws[i][1].mechanism if raws[i][1].bottleneck == seg.bottleneck else ""
        _check(lab, rr.reading(seg.bottleneck, mech), f"segment {seg.start:%H:%M:%S}-{seg.end:%H:%M:%S}")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_without_the_stacks_every_verdict_is_the_outside_reading(name: str) -> None:
    """The same ticks with their stacks taken away read exactly as the v2 recording does (the honest
    without-stacks readings of tests/test_diagnosis_inside_outside.py)."""
    v2 = name.removesuffix("-stacks")
    assert any(t.stacks for t in rr.ticks(name)) and not any(t.stacks for t in rr.ticks(v2))
    got, want = rr.raw(name, stripped=True), rr.raw(v2)
    assert len(got) == len(want)
    for (t, a, shown_a), (_, b, shown_b) in zip(got, want, strict=True):
        assert (a.pattern, a.bottleneck, a.mechanism, a.evidence_facts, a.advice) == \
               (b.pattern, b.bottleneck, b.mechanism, b.evidence_facts, b.advice), t.ts
        assert (shown_a.key, shown_a.evidence) == (shown_b.key, shown_b.evidence), t.ts


def _first(name: str, scenario: str):  # type: ignore[no-untyped-def]
    return rr.raw(name)[rr.judged(name, rr.label(name, scenario))[0]][1]


FACT = re.compile(r"^pid \d+ \(card 0\)'s main thread was in (?P<phase>[a-z_/]+)(?: at (?P<frame>.+?))? "
                  r"in (?P<k>\d+) of (?P<n>\d+) samples(?: \((?P<busy>\d+|no) threads? busy\))?$")


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "mechanism", "phase", "busy"), [
    ("cpu_offload_adamw_t16", "host_compute", "optimizer", 16),
    ("cpu_offload_adamw_t4", "host_compute", "optimizer", 4),
    ("python_host_loop_ms250", "python_step", "python", 1),
    ("latency_input_w8l20", "input_latency", "dataloader_wait", 0),
])
def test_the_evidence_names_the_process_its_phase_frame_count_and_busy_threads(
        scenario: str, mechanism: str, phase: str, busy: int) -> None:
    v = _first("h200-inside-a-2s-stacks", scenario)
    assert v.mechanism == mechanism
    facts = [f for f in v.evidence_facts if f["metric"] == "main_thread_phase_share"]
    assert len(facts) == 1, v.evidence
    m = FACT.match(facts[0]["text"])
    assert m is not None, facts[0]["text"]
    assert m["phase"].split("/")[0] == phase and m["frame"] and (0 if m["busy"] == "no" else int(m["busy"])) == busy
    k, n = int(m["k"]), int(m["n"])
    assert 2 <= n and k / n >= Config().thresholds.inside_phase_share
    assert facts[0]["value"] == pytest.approx(k / n, abs=1e-3) and facts[0]["cards"] == [0]
    assert v.evidence_facts[0]["metric"] != "main_thread_phase_share"  # the GPU-Util line leads, as in every rule


@pytest.mark.slow
def test_each_mechanism_gets_its_own_advice() -> None:
    adam = _first("h200-inside-a-2s-stacks", "cpu_offload_adamw_t16")
    assert "optimizer steps on the CPU" in adam.advice[0] and "_multi_tensor_adam" in adam.advice[0]
    part = _first("h200-inside-b-2s-stacks", "cpu_model_part_t16")
    assert part.mechanism == "host_compute" and "model runs on the CPU" in part.advice[0]
    loop = _first("h200-inside-a-2s-stacks", "python_host_loop_ms60")
    assert any(".item()" in a for a in loop.advice) and "python_bookkeeping" in loop.advice[0]
    late = _first("h200-inside-a-2s-stacks", "latency_input_w4l5")
    assert "more workers" in late.advice[0] and any("lighter preprocessing will not help" in a for a in late.advice)
    comp = _first("h200-inside-b-2s-stacks", "compile_recompile_each")
    assert comp.mechanism == "recompile" and any("TORCH_LOGS=recompiles" in a for a in comp.advice)
    assert any("mark_dynamic" in a for a in comp.advice)
    svc = _first("h200-inside-b-2s-stacks", "service_wait_ms400")
    assert svc.mechanism == "external_wait" and "service_wait" in svc.advice[0]
    for v in (adam, part, loop, comp, svc):
        assert not any("num_workers" in a or "pin_memory" in a for a in v.advice), v.advice


@pytest.mark.slow
def test_dumps_that_could_not_be_read_are_said_once_with_py_spys_reason() -> None:
    """A recompiling job that py-spy failed to read in 5 of 8 dumps ("Failed to call get_stack_trace"): the
    dumps that were read still name the compile, and the failures are one evidence line."""
    for name in ("h200-inside-b-2s-stacks", "h200-inside-b-0.5s-stacks"):
        lab = rr.label(name, "compile_recompile_every8")
        for i in rr.judged(name, lab):
            v = rr.raw(name)[i][1]
            failed = [f for f in v.evidence_facts if f["metric"] == "stack_dumps_failed"]
            assert len(failed) <= 1, v.evidence
        v = rr.raw(name)[rr.judged(name, lab)[-1]][1]
        (failed,) = [f for f in v.evidence_facts if f["metric"] == "stack_dumps_failed"]
        assert "py-spy exited 1" in failed["text"] and failed["value"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_under_an_outside_reading_failed_dumps_are_said_once_too(name: str) -> None:
    inside = {"recompile", "host_compute", "python_step", "input_latency", "external_wait"}
    outside_said = 0
    for _, raw, _ in rr.raw(name):
        lines = [f["text"] for f in raw.evidence_facts if f["metric"] == "stack_dumps_failed"]
        assert len(lines) <= 1, raw.evidence
        if lines and raw.mechanism not in inside:
            assert lines[0].endswith(": read from outside"), lines
            outside_said += 1
    assert outside_said > 0  # each recording has windows whose failed dumps fall under an outside reading


@pytest.mark.slow
def test_the_json_facts_carry_the_inside_evidence() -> None:
    """`diagnose --json` gives each segment's evidence_facts: the inside line is among them with its figure."""
    name = "h200-inside-a-0.5s-stacks"
    lab = rr.label(name, "cpu_offload_adamw_t4")
    seg = rr.per_tick_segments(name)[rr.judged(name, lab)[-1]]
    assert seg.bottleneck == "host_step"
    (fact,) = [f for f in seg.evidence_facts if f["metric"] == "main_thread_phase_share"]
    assert "optimizer" in fact["text"] and 0.5 <= fact["value"] <= 1.0
    assert fact["text"].startswith(f"pid {fact['pid']} ")  # the process, as a figure too
    json.dumps(seg.evidence_facts)


COUNT = re.compile(r" in (\d+) of \d+ samples")


@pytest.mark.slow
def test_a_reading_on_few_samples_is_possible_and_on_enough_likely() -> None:
    """Confidence from the sample counts: a stack-based reading whose phase rests on fewer than
    ``inside_likely_samples`` samples is `possible` (2 of 2 is a hint), on that many or more (over a stretch
    long enough not to be cut for shortness) `likely`, on every real stacks recording, tick by tick."""
    from gpu_triage.diagnosis.verdict import confidence_word

    th = Config().thresholds
    few = enough = 0
    for name in (*NAMES, "h200-inside-c-2s", "h200-inside-d-2s", "h200-inside-e-2s"):
        for _, raw, _ in rr.raw(name):
            facts = [f for f in raw.evidence_facts if f["metric"] == "main_thread_phase_share"]
            if not facts or raw.bottleneck == "unexplained":  # unexplained says what the stacks show, unsure
                continue
            k = min(int(m[1]) for f in facts if (m := COUNT.search(f["text"])) is not None)
            if k < th.inside_likely_samples:
                few += 1
                assert confidence_word(raw.confidence) != "likely", raw.evidence
            elif raw.facts["judged_s"] >= th.short_judged_s:
                enough += 1
                assert confidence_word(raw.confidence) == "likely", raw.evidence
    assert few >= 10 and enough >= 50, (few, enough)


_SAMPLES = re.compile(r" in \d+ of \d+ samples")


@pytest.mark.parametrize("name", NAMES[::2])
def test_a_segment_cites_the_newest_of_its_most_confident_verdicts(name: str) -> None:
    """A segment's evidence is the newest raw verdict that says what the segment says (what the screen shows at
    its end), whose window holds the most of the segment: never the first one, which cites the few samples its
    first ticks held ("4 of 4" where the newest read "7 of 9")."""
    raw, segs = rr.raw(name), rr.per_tick_segments(name)
    cited = 0
    for seg in {id(s): s for s in segs}.values():
        own = [v for t, v, _ in raw
               if seg.start < t.ts <= seg.end and (v.pattern, v.bottleneck) == (seg.pattern, seg.bottleneck)]
        if not own or not _SAMPLES.search(" ".join(own[-1].evidence)):
            continue
        cited += 1
        assert seg.evidence == own[-1].evidence, (seg.start, seg.bottleneck, seg.evidence, own[-1].evidence)
    assert cited >= 4
