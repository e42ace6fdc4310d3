"""The fleet's order is what needs a human first, worst first (issue 33): a GPU fault, then hosts nobody can
see, then bottlenecks by the one order of severity (``vocab.SEVERITY``), never by confidence alone."""

from __future__ import annotations

from gpu_triage.diagnosis.vocab import GPU_FAULT, SEVERITY, Bottleneck, severity
from gpu_triage.fleetview import SORT_ORDER_HELP
from gpu_triage.fleetview.model import DOWN, OK, STALE, HostRow, order_rows


def host(name: str, bottleneck: str = "none", *, state: str = OK, cards: str = "", confidence: float = 0.5,
         util: float | None = 0.9, total: int = 8) -> HostRow:
    return HostRow(key=name, host=name, address=name, job="j", state=state, bottleneck=bottleneck,
                   pattern="steady_low", verdict_cards=cards, confidence=confidence, total=total, util=util)


def test_a_hung_collective_on_every_card_sorts_above_a_confident_placement_on_one() -> None:
    rows = order_rows([
        host("placement", "placement", cards="0", confidence=0.95),
        host("hung", "hung_collective", cards="0,1,2,3,4,5,6,7", confidence=0.6),
    ])
    assert [r.key for r in rows] == ["hung", "placement"]


def test_faults_then_down_then_stale_then_bottlenecks_then_the_rest_by_lowest_util() -> None:
    rows = order_rows([
        host("busy", util=0.95),
        host("idle", util=0.05),
        host("slow-disk", "storage_io", confidence=0.99),
        host("stale", state=STALE),
        host("down", state=DOWN),
        host("dead-driver", GPU_FAULT, confidence=1.0),
        host("half-pipeline", "data_pipeline", cards="0,1,2,3", confidence=0.5),
        host("all-pipeline", "data_pipeline", cards="0,1,2,3,4,5,6,7", confidence=0.4),
    ])
    assert [r.key for r in rows] == ["dead-driver", "down", "stale", "all-pipeline", "half-pipeline", "slow-disk",
                                     "idle", "busy"]


def test_one_severity_order_names_every_bottleneck_and_the_help_says_it() -> None:
    assert SEVERITY[0] == GPU_FAULT and SEVERITY[-1] == Bottleneck.NONE
    assert set(SEVERITY[1:]) == set(Bottleneck) and len(SEVERITY) == len(set(SEVERITY))
    assert ", ".join(SEVERITY[1:-1]) in SORT_ORDER_HELP.replace("\n", " ")
    assert severity("a_newer_exporters_word") < severity("none") and severity(None) == severity("none")
    assert severity("unexplained") < severity("a_newer_exporters_word")
