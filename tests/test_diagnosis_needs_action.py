"""Every state that needs someone to act has a bottleneck of its own ("none" means nothing to fix): every rank
on one card is ``placement``, cards doing unequal work or one card holding the others is ``imbalance``, ranks
spinning in a collective that moves nothing is ``hung_collective`` with the hang as the first evidence line.
A straggler's advice points at the card and what its own samples say (clock, throttle reasons, ECC/XID),
not at the topology."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from gpu_triage.diagnosis.engine import diagnose
from gpu_triage.diagnosis.rules import BOTTLENECKS
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.model import Tick
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.window import RollingWindow

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TH = Thresholds()


def _verdict(scenario: str, gpus: int = 8, seconds: float = 90.0, change=None):  # type: ignore[no-untyped-def]
    src = SimulatedSource(scenario, gpus=gpus, cores=32, seed=3, interval_s=2.0, start=T0)
    w = RollingWindow(150)
    for _ in range(round(seconds / 2.0)):
        t = src.sample()
        w.append(change(t) if change else t)
    return diagnose(w.view(), TH, 32)


def test_the_new_bottlenecks_are_in_the_vocabulary_metrics_list() -> None:
    assert {"placement", "imbalance", "hung_collective"} <= set(BOTTLENECKS)


def test_every_rank_on_one_card_is_placement_with_the_set_device_advice() -> None:
    v = _verdict("single_card_busy")
    assert (v.pattern, v.bottleneck, v.mechanism) == ("single_card_busy", "placement", "placement")
    assert "set_device" in v.advice[0]
    assert not any("kept busy" in e for e in v.evidence)  # the old "none" line beside 7 idle cards


def test_imbalanced_cards_are_imbalance_with_advice() -> None:
    v = _verdict("imbalanced")
    assert (v.pattern, v.bottleneck) == ("imbalanced", "imbalance")
    assert v.advice and any("balance the work" in a for a in v.advice)


def test_a_hung_collective_is_its_own_bottleneck_and_leads_the_evidence() -> None:
    v = _verdict("hung_collective")
    assert v.bottleneck == "hung_collective" and v.mechanism == "hung_collective"
    assert "hung collective" in v.evidence[0] or "no traffic" in v.evidence[0]
    assert not any("topology" in a for a in v.advice)


def _straggler(t: Tick) -> Tick:
    """Card 4 computes (SM high) at a lower, thermally throttled clock while the others wait for it."""
    gpus = []
    for g in t.gpus:
        if g.index == 4:
            g = dataclasses.replace(g, util_pct=55.0, util_min_pct=50.0, util_max_pct=60.0, sm_active_pct=52.0,
                                    sm_clock_mhz=1575.0, clock_event_reasons=0x20, power_w=586.0)
        else:
            g = dataclasses.replace(g, sm_clock_mhz=1870.0, clock_event_reasons=0)
        gpus.append(g)
    return dataclasses.replace(t, gpus=gpus)


def test_a_straggler_is_imbalance_pointing_at_the_card_and_its_cause_not_the_topology() -> None:
    v = _verdict("communication", change=_straggler)
    assert v.pattern == "imbalanced", v.evidence
    assert (v.bottleneck, v.mechanism) == ("imbalance", "straggler"), v.evidence
    assert 4 in v.gpus  # (the scenario's own straggler, card 0, is named too)
    line = next(e for e in v.evidence if e.startswith("card 4 computes"))
    assert "card 4" in line and "1575 MHz against 1870 MHz" in line and "thermal" in line
    assert any(a.startswith("card 4 is thermally throttled") for a in v.advice)
    assert not any("topology" in a or "NCCL_P2P_LEVEL" in a for a in v.advice)
