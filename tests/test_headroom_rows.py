"""Each row of the headroom table (docs/diagnosis.md, "Headroom") on a real recording: the formula the row
states gives the bound the verdicts carry, with the row's unit and assumption. The clock row, placement, the
hang and `none` are tested in tests/test_headroom.py on the starved/fixed pairs, h200x2-cuda0 and h200x2-stuck."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism
from tests import real_readings as rr

DATA = Path(__file__).parent / "data"
SAMPLES = re.compile(r"in (\d+) of (\d+) stack samples")


@cache
def _raws(name: str) -> list[Any]:
    res = rr.replay(DATA / name)[1]  # the verdicts only: no offline segments
    return [r[1] for r in res]


def _of(name: str, bottleneck: str, mechanism: str | None = None, kind: str | None = None) -> list[Any]:
    return [v for v in _raws(name) if v.bottleneck == bottleneck and (mechanism is None or v.mechanism == mechanism)
            and v.headroom is not None and (kind is None or v.headroom.kind == kind)]


@pytest.mark.parametrize(("name", "bottleneck"), [("h200x2-comm-1s.parquet", Bottleneck.COMMUNICATION),
                                                  ("h200x2-ddp-ckpt-1s.parquet", Bottleneck.STORAGE_IO)])
def test_a_wait_without_the_job_s_clock_is_bounded_by_the_busiest_card(name: str, bottleneck: str) -> None:
    got = _of(name, bottleneck, kind="bound")
    assert got
    for v in got:
        hr = v.headroom
        assert hr.factor == pytest.approx(1 / hr.busy) and hr.unit == "GPU-busy time"
        assert hr.assumes == "the GPU work stays the same and the wait goes entirely"
        assert f"the busiest card works {hr.busy * 100:.0f} %" in hr.basis


@pytest.mark.parametrize(("name", "bottleneck", "mechanism"), [
    ("h200-inside-a-2s-stacks.parquet", Bottleneck.HOST_STEP, Mechanism.HOST_COMPUTE),  # a CPU optimizer
    ("h200-inside-g-2s.parquet", Bottleneck.HOST_STEP, Mechanism.OTHER_THREAD),  # a thread holding the GIL
    ("h200-inside-g-2s.parquet", Bottleneck.HOST_STEP, Mechanism.PYTHON_STEP),  # the job's own Python loop
])
def test_a_host_phase_is_bounded_by_its_share_of_the_stack_samples(name: str, bottleneck: str,
                                                                   mechanism: str) -> None:
    got = _of(name, bottleneck, mechanism, kind="bound")
    assert got
    for v in got:
        hr = v.headroom
        k, n = map(int, SAMPLES.search(hr.basis).groups())
        from_stacks = n / (n - k) if k < n else float("inf")
        assert hr.unit == "samples/s" and hr.assumes == "that phase goes entirely and the GPU work stays the same"
        assert hr.share == pytest.approx(k / n)
        # min(1/(1-s), 1/b): the busiest card's share caps it where it is the smaller, and says so
        assert hr.factor == pytest.approx(min(from_stacks, 1 / hr.busy if hr.busy >= 0.01 else float("inf")))
        assert ("the busiest card works" in hr.basis) == (hr.factor < from_stacks * (1 - 1e-9))
    # the stacks carry a bound where the cards' busy share alone carried none (busy under 1 %)
    assert any(v.headroom.busy < 0.01 for v in got) or mechanism != Mechanism.HOST_COMPUTE


def test_a_host_phase_in_every_sample_bounds_nothing_and_says_what_is_lost() -> None:
    # the job's own Python loop in every sample, the card busy under 1 %: no finite bound from either
    got = [v for v in _of("h200-inside-c-2s.parquet", Bottleneck.HOST_STEP, Mechanism.PYTHON_STEP, kind="lost")]
    assert got
    for v in got:
        hr = v.headroom
        k, n = map(int, SAMPLES.search(hr.basis).groups())
        assert k == n and hr.factor is None and hr.line().startswith("lost: the cards waited")
        assert hr.basis.endswith("stack samples: no bound)")


def test_a_compile_says_what_is_lost_whatever_its_stacks_say() -> None:
    # work goes with the recompiles (real h200-pairs-recompile: 1/b 7.7x against 10.6x measured), so neither
    # the busy share nor the stacks' share bounds what fixing them gives
    got = _of("h200-inside-d-2s.parquet", Bottleneck.COMPILE, Mechanism.RECOMPILE)
    assert got
    for v in got:
        assert v.headroom.kind == "lost" and v.headroom.factor is None
        assert v.headroom.basis.startswith("the cards waited")


def test_a_straggler_is_bounded_by_sm_activity_over_the_cards() -> None:
    # the real starved two-card DDP run: card 0 spins at a collective (GPU-Util high, SM low), so GPU-Util
    # read 99 % against a 64 % mean (1.5x); SM activity says how unequal the work really is
    got = _of("h200x2-joblog-2card-starved-1s.parquet", Bottleneck.IMBALANCE, Mechanism.STRAGGLER, kind="bound")
    assert got
    for v in got:
        hr = v.headroom
        hi, mean = map(float, re.search(r"at (\d+) % SM activity, their mean (\d+) %", hr.basis).groups())
        assert "cards 0,1" in hr.basis and hr.factor == pytest.approx(hi / mean, abs=0.05)
        assert hr.factor < 1.3 and hr.assumes == "the work can be spread evenly over the ranks"


@pytest.mark.parametrize(("name", "bottleneck"), [("h200-inside-d-2s.parquet", Bottleneck.UNEXPLAINED),
                                                  ("h200x2-ddp-ckpt-1s.parquet", Bottleneck.STALL_UNEXPLAINED)])
def test_no_rule_named_a_cause_so_only_what_is_lost_is_said(name: str, bottleneck: str) -> None:
    got = _of(name, bottleneck)
    assert got and all(v.headroom.kind == "lost" and v.headroom.factor is None for v in got)
    assert all(re.match(r"lost: the cards waited \d+ % of the judged \d+ s", v.headroom.line()) for v in got)
