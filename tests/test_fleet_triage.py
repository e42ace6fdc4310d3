"""The fleet view as an on-call engineer uses it (issue 33): its order is what needs a human first, worst first
(a GPU fault, then hosts nobody can see, then bottlenecks by the one order of severity, ``vocab.SEVERITY``, never
by confidence alone); Home/End, a filter and a sort key move through a large fleet; quitting waits for neither
the network nor the parse of a large answer."""

from __future__ import annotations

import gc
import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from gpu_triage.diagnosis.vocab import GPU_FAULT, SEVERITY, Bottleneck, severity
from gpu_triage.fleetview import SORT_ORDER_HELP
from gpu_triage.fleetview.client import PrometheusTarget
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


# -- the parse of a large answer never holds the screen behind the garbage collector ---------------------------


@pytest.fixture
def big_prometheus() -> Iterator[str]:
    """A server answering every instant query with 400 hosts of 40 series each (the API's JSON shape)."""
    result = [{"metric": {"__name__": "gpu_triage_gpu_utilization_ratio", "job": "gpu-triage",
                          "instance": f"gpu{h:04d}:9839", "gpu": str(g)}, "value": [1.7e9, "0.5"]}
              for h in range(400) for g in range(40)]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_turning_a_large_answer_into_rows_runs_no_cyclic_collection(big_prometheus: str) -> None:
    """Its millions of small objects used to set the collector off again and again, each pass over the whole heap
    holding the GIL: the screen's thread waited behind them, and quitting took seconds (py-spy: gc_collect_main)."""
    me = threading.current_thread()
    seen: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.current_thread() is me:
            seen.append(info["generation"])

    target = PrometheusTarget(big_prometheus, timeout_s=30)
    gc.collect()
    gc.callbacks.append(watch)
    try:
        rows = target.fetch()
    finally:
        gc.callbacks.remove(watch)
    assert len(rows) == 400 and all(len(r.cards) == 40 for r in rows)
    assert len(seen) <= 3, f"{len(seen)} collections while 16,000 series became rows"  # the GETs' own few
    assert gc.isenabled()  # resumed after
    gc.disable()
    try:
        target.fetch()
        assert not gc.isenabled()  # a collector the program had paused stays paused
    finally:
        gc.enable()
