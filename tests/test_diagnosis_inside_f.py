"""The held-out family of issue 34 on real 1-card H200s (tests/data/h200-inside-{f,g}-{2s,0.5s}, trace v4): ten
host-side mechanisms no rule was written for (lab/inside_family2.py: a thread holding the GIL, a pin-memory thread,
a synchronous checkpoint, tokenization in the loop, a sync after each tiny kernel, a logging hook, numpy
augmentation under gradient accumulation, an embedding table on the CPU, a Python collate_fn with num_workers=0, a
gradient hook), recorded by our own recorder beside a neutral one with --no-stacks; g is four of them again, for
60 s each (the steady cost). Recorded before any rule saw them: what reads wrong is a strict expected failure with
its reason, for the engine's work to turn into passes.

For every labelled window (judged 35-90 %, gpu_triage.data.judged_ticks), every raw verdict fed tick by tick and
every offline segment reads, with the stacks, one of the label's ``bottleneck`` and none of its ``wrong``;
without them (the 2 s recording stripped of its stacks, and the 0.5 s one), one of ``without_stacks`` and none of
``wrong``.
"""

from __future__ import annotations

import pytest

from tests import real_readings as rr
from tests.test_diagnosis_inside_v3 import _check, _readings

pytestmark = pytest.mark.slow

STACKS = rr.HELD_OUT_V4
OUTSIDE = tuple((n, True) for n in rr.HELD_OUT_V4) + tuple((n.replace("-2s", "-0.5s"), False) for n in rr.HELD_OUT_V4)

# (recording, stripped, scenario) -> why; both raw and segment unless the key names one
MISSES: dict[tuple[str, bool, str, str], str] = {}


def _miss(name: str, stripped: bool, scenario: str, why: str, kinds: tuple[str, ...] = ("raw", "segment")) -> None:
    for kind in kinds:
        MISSES[(name, stripped, scenario, kind)] = why


def _cases(names: tuple, kind: str) -> list:
    out = []
    for entry in names:
        name, stripped = entry if isinstance(entry, tuple) else (entry, False)
        for lab in rr.labels(name):
            miss = MISSES.get((name, stripped, lab["scenario"], kind))
            marks = [pytest.mark.xfail(reason=miss, strict=True)] if miss else []
            tag = f"{name}{'-stripped' if stripped else ''}-{lab['scenario']}"
            out.append(pytest.param(name, stripped, lab["scenario"], kind, id=f"{tag}-{kind}", marks=marks))
    return out


@pytest.mark.parametrize(("name", "stripped", "scenario", "kind"), _cases(STACKS, "raw") + _cases(STACKS, "segment"))
def test_with_stacks_every_judged_reading_is_right(name: str, stripped: bool, scenario: str, kind: str) -> None:
    lab = rr.label(name, scenario)
    got = _readings(name, stripped, lab, kind)
    assert len(got) >= 5
    for reading, where in got:
        _check(lab, lab["bottleneck"], reading, where)


@pytest.mark.parametrize(("name", "stripped", "scenario", "kind"), _cases(OUTSIDE, "raw") + _cases(OUTSIDE, "segment"))
def test_without_stacks_every_judged_reading_is_right_or_honest(name: str, stripped: bool, scenario: str,
                                                                 kind: str) -> None:
    lab = rr.label(name, scenario)
    got = _readings(name, stripped, lab, kind)
    assert len(got) >= 5
    for reading, where in got:
        _check(lab, lab["without_stacks"], reading, where)


def test_each_sample_of_the_family_keeps_its_threads_and_names_the_one_holding_the_gil() -> None:
    """Trace v4 on the real recording: the starved main thread idle, one of the three aggregator threads active
    and holding the GIL in most samples of the window; the pin-memory job's pin thread on a CPU in pin_memory."""
    lab = rr.label("h200-inside-f-2s", "gil_thread_t3")
    samples = [s for i in rr.judged("h200-inside-f-2s", lab) for s in rr.ticks("h200-inside-f-2s")[i].stacks
               if s.role == "main" and s.error is None]
    assert len(samples) >= 4
    held = 0
    for s in samples:
        main, *others = s.thread_list
        assert main.tid == s.pid and main.name == "MainThread" and main.state == "idle"
        assert {t.name for t in others} >= {"metrics-0", "metrics-1", "metrics-2"}
        held += any(t.holds_gil == 1 and t.state == "active" and t.name.startswith("metrics") for t in others)
    assert held >= len(samples) // 2
    lab = rr.label("h200-inside-g-2s", "pin_memory_thread_b32")
    pins = [t for i in rr.judged("h200-inside-g-2s", lab) for s in rr.ticks("h200-inside-g-2s")[i].stacks
            for t in s.thread_list if s.role == "main" and "_pin_memory_loop" in (t.name or "")]
    assert pins and sum(t.state == "active" for t in pins) >= len(pins) // 2


def test_a_gradient_hook_on_autograd_s_thread_is_named_as_what_holds_the_step() -> None:
    """The main thread waits in backward while autograd's device thread (no Python thread name) runs the hook's
    Python, or the backward's native code between hooks: the verdict names that thread and its Python frame."""
    for name in rr.HELD_OUT_V4:
        lab = rr.label(name, "autograd_hook_p16")
        raws = rr.raw(name)
        for i in rr.judged(name, lab):
            v = raws[i][1]
            assert (v.bottleneck, v.mechanism) == ("host_step", "other_thread"), v.evidence
            assert any("'autograd's thread' in python at " in e for e in v.evidence), v.evidence
