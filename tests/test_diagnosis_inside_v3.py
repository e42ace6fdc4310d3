"""Real H200 recordings of trace v3 (tests/data/h200-inside-{c,d,e}-{2s,0.5s}): the same mechanisms as
h200-inside-{a,b} at new settings. c and d were recorded before any rule saw them, read wrong in four ways,
and the rules were then fixed on them (a tuning set since); e was recorded after that and is the held-out one,
kept as it read (c, d: AdamW on the CPU at 8 and 2 threads, fetch latency 2x50 ms and 6x10 ms, Python between
steps 120 and 30 ms, recompiles every 3rd and 16th step, a service answering in 200 and 50 ms, an EmbeddingBag
on the CPU at 8 and 2 threads; e: 6 threads, 3x30 ms, 80 ms, every 5th, 120 ms, 4 threads),
made by our own recorder: at 2 s with its py-spy sampler (the ``stacks`` column) and each tick's verdict, at
0.5 s with --no-stacks.

For every labelled window (judged 35-90 %, gpu_triage.data.judged_ticks), every raw verdict fed tick by tick
and every offline segment reads, with the stacks, one of the label's ``bottleneck`` and none of its
``wrong``; without them (the 2 s recording stripped of its stacks, and the 0.5 s one), one of
``without_stacks`` and none of ``wrong``. A start-up reads "start_up", as the labels write it. What is left
is a strict expected failure with its reason.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests import real_readings as rr

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
STACKS = ("h200-inside-c-2s", "h200-inside-d-2s", "h200-inside-e-2s")  # recorded with the sampler on
# (name, stripped): the stacks recordings read without their stacks, and the --no-stacks ones
OUTSIDE = (("h200-inside-c-2s", True), ("h200-inside-d-2s", True), ("h200-inside-e-2s", True),
           ("h200-inside-c-0.5s", False), ("h200-inside-d-0.5s", False), ("h200-inside-e-0.5s", False))

KNOWN_MISSES: dict[tuple[str, str, str], str] = {}
STACKS_MISSES: dict[tuple[str, str, str], str] = {}


def _readings(name: str, stripped: bool, lab: dict, kind: str) -> list[tuple[str, str]]:
    """(reading, where) on every judged tick: the raw verdict, or the offline segment holding the tick."""
    raws = rr.raw(name, stripped)
    out = []
    for i in rr.judged(name, lab):
        raw = raws[i][1]
        if kind == "raw":
            where = f"raw at {raws[i][0].ts:%H:%M:%S.%f} {raw.evidence[:3]}"
            out.append((rr.reading(raw.bottleneck, raw.mechanism), where))
        else:
            seg = rr.per_tick_segments(name, stripped)[i]
            mech = raw.mechanism if raw.bottleneck == seg.bottleneck else ""
            out.append((rr.reading(seg.bottleneck, mech), f"segment {seg.start:%H:%M:%S}-{seg.end:%H:%M:%S}"))
    return out


def _check(lab: dict, accepted: list[str], got: str, where: str) -> None:
    assert got in accepted, f"{lab['scenario']} {where}: {got}, right would be {accepted}"
    assert got not in lab["wrong"], f"{lab['scenario']} {where}: {got} is wrong: {lab['wrong'][got]}"


def _cases(names: tuple, kind: str) -> list:
    out = []
    for entry in names:
        name, stripped = entry if isinstance(entry, tuple) else (entry, False)
        for lab in rr.labels(name):
            outside = stripped or name.endswith("0.5s")
            miss = (KNOWN_MISSES if outside else STACKS_MISSES).get((name, lab["scenario"], kind))
            marks = [pytest.mark.xfail(reason=miss, strict=True)] if miss else []
            tag = f"{name}{'-stripped' if stripped else ''}-{lab['scenario']}"
            out.append(pytest.param(name, stripped, lab["scenario"], kind, id=f"{tag}-{kind}", marks=marks))
    return out


@pytest.mark.parametrize(("name", "stripped", "scenario", "kind"), _cases(STACKS, "raw") + _cases(STACKS, "segment"))
def test_with_stacks_every_judged_reading_is_right(name: str, stripped: bool, scenario: str, kind: str) -> None:
    """Right, or honest where the label says why (``with_stacks_honest``: a first tick with one readable sample),
    and right by the window's last judged tick."""
    lab = rr.label(name, scenario)
    got = _readings(name, stripped, lab, kind)
    assert len(got) >= 5
    for reading, where in got:
        _check(lab, [*lab["bottleneck"], *lab.get("with_stacks_honest", [])], reading, where)
    assert got[-1][0] in lab["bottleneck"], got[-1]


@pytest.mark.parametrize(("name", "stripped", "scenario", "kind"), _cases(OUTSIDE, "raw") + _cases(OUTSIDE, "segment"))
def test_without_stacks_every_judged_reading_is_honest(name: str, stripped: bool, scenario: str, kind: str) -> None:
    lab = rr.label(name, scenario)
    got = _readings(name, stripped, lab, kind)
    assert len(got) >= 5
    for reading, where in got:
        _check(lab, lab["without_stacks"], reading, where)


def test_a_child_whose_own_stack_compiles_is_no_dataloader_worker() -> None:
    """Recompiling every 5th step: inductor's compile worker, a child of the training process, pegged at 100 %.
    From outside it counts as a DataLoader worker (its parent, at 88 % of a core, is not waiting for it, so it is
    not read as a starved one); its stack, read a tick earlier, compiles, so with the stacks it is not counted
    and no judged tick reads the loader."""
    name, lab = "h200-inside-e-2s", rr.label("h200-inside-e-2s", "compile_recompile_every5")
    first = rr.judged(name, lab)[0]
    outside, inside = rr.raw(name, True)[first][1], rr.raw(name)[first][1]
    assert "3 DataLoader workers" in outside.evidence[0] and "2 DataLoader workers" in inside.evidence[0]
    for i in rr.judged(name, lab):
        raw = rr.raw(name)[i][1]
        assert raw.bottleneck not in lab["wrong"], (i, raw.evidence)
        assert raw.mechanism != "idle_data" and not any("too few workers" in e for e in raw.evidence), raw.evidence


def test_an_optimizer_on_two_cpu_threads_is_host_compute_while_its_card_is_stalled() -> None:
    """AdamW over host master weights with torch.set_num_threads(2): 2 threads busy (under host_compute_threads),
    the card at GPU-Util 4-6 %: the optimizer computes on the CPU, it launches nothing."""
    lab = rr.label("h200-inside-c-2s", "cpu_offload_adamw_t2")
    for i in rr.judged("h200-inside-c-2s", lab):
        raw = rr.raw("h200-inside-c-2s", False)[i][1]
        assert (raw.bottleneck, raw.mechanism) == ("host_step", "host_compute"), raw.evidence
        assert any("optimizer" in e and "2 threads busy" in e for e in raw.evidence), raw.evidence
        assert raw.advice[0].startswith("the optimizer steps on the CPU")


def test_without_stacks_bytes_both_ways_from_a_two_thread_process_are_not_input() -> None:
    """The same job from outside: 0.6-0.9 GB/s down and as much back, its process at 188 %: not a loader."""
    for name, stripped in (("h200-inside-c-2s", True), ("h200-inside-c-0.5s", False)):
        lab = rr.label(name, "cpu_offload_adamw_t2")
        for i in rr.judged(name, lab):
            raw = rr.raw(name, stripped)[i][1]
            assert raw.bottleneck == "unexplained", raw.evidence
            assert not any("num_workers" in a or "pin_memory" in a for a in raw.advice)


def test_a_start_up_ends_once_faint_kernels_recur() -> None:
    """An EmbeddingBag on 2 CPU threads feeding a tiny MLP: GPU-Util 0 %, SM 0.01-0.02 % on every 2 s tick
    (every other 0.5 s tick), 4,300 samples/s all along: the job runs; with stacks it is host compute (2 threads
    busy, under host_compute_threads, the card stalled), without them unexplained."""
    for name in ("h200-inside-d-2s", "h200-inside-d-0.5s"):
        lab = rr.label(name, "cpu_model_part_t2")
        for stripped in ((False, True) if name.endswith("-2s") else (False,)):
            for i in rr.judged(name, lab):
                raw = rr.raw(name, stripped)[i][1]
                assert raw.mechanism != "start_up", raw.evidence
                want = "host_compute" if name.endswith("2s") and not stripped else "unexplained"
                assert raw.mechanism == want, raw.evidence


def test_an_idle_card_whose_job_keeps_running_faint_kernels_is_not_nothing_to_fix() -> None:
    """2 DataLoader workers sleeping 50 ms a sample: GPU-Util 0 %, SM 0.06-0.23 % each step; not "none"."""
    for name in ("h200-inside-c-2s", "h200-inside-c-0.5s"):
        lab = rr.label(name, "latency_input_w2l50")
        for i in rr.judged(name, lab):
            raw = rr.raw(name, name.endswith("-2s"))[i][1]
            assert raw.bottleneck == "unexplained", raw.evidence
            assert "it runs a kernel now and then" in raw.evidence[0]


@pytest.mark.parametrize("name", ["h200-inside-c-2s", "h200-inside-d-2s", "h200-inside-a-2s-stacks",
                                  "h200-inside-b-2s-stacks", "h200-inside-a-0.5s-stacks", "h200-inside-b-0.5s-stacks"])
def test_host_compute_on_a_stalled_card_needs_its_thread_on_a_cpu(name: str) -> None:
    """Over every labelled window, start-up and first ticks included, with stacks: host compute is named only
    where the CPU computes. A main thread in backward with no thread busy waits for the GPU's backward (the
    50 ms service job's first running tick, 1 of 2 samples there)."""
    for lab in rr.labels(name):
        if "host_step" in lab["bottleneck"]:
            continue
        start, end = datetime.fromisoformat(lab["start"]), datetime.fromisoformat(lab["end"])
        for tick, raw, _ in rr.raw(name, False):
            if start <= tick.ts <= end:
                assert raw.mechanism != "host_compute", (lab["scenario"], f"{tick.ts:%H:%M:%S}", raw.evidence)
