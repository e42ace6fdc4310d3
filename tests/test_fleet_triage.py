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
from gpu_triage.fleet_live import SORT_ORDER_HELP
from gpu_triage.fleet_live.client import PrometheusTarget
from gpu_triage.fleet_live.model import DOWN, OK, STALE, HostRow, order_rows

POLL_S = 0.05  # a server thread looks for its stop this often: shutting it down waits that long


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
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_turning_a_large_answer_into_rows_runs_no_cyclic_collection(big_prometheus: str) -> None:
    """Its millions of small objects would set the collector off again and again, each pass over the whole heap
    holding the GIL, the screen's thread waiting behind them (py-spy: gc_collect_main): no collection runs."""
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


# -- the screen's keys ----------------------------------------------------------------------------------------


def _screen_fleet() -> object:
    import time

    from gpu_triage.fleet_live.client import Fleet, FleetSnapshot

    rows = order_rows([*(host(f"gpu{i:02d}", util=(i * 37 % 100) / 100) for i in range(30)),
                       host("gpu99", state=DOWN, util=None),
                       HostRow(key="train", host="train", address="train", job="j", state=OK,
                               bottleneck="data_pipeline", pattern="sawtooth", confidence=0.9, total=8, util=0.3,
                               owners=("slurm 4242",), owner="slurm 4242")])
    fleet = Fleet([], source="t", interval_s=5)
    fleet.snapshot = FleetSnapshot(source="t", rows=rows, updated=time.time())
    return fleet


async def test_home_and_end_go_to_the_first_and_the_last_host() -> None:
    from gpu_triage.ui.fleet_app import FleetApp

    app = FleetApp(_screen_fleet(), autostart=False)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        assert app.selected_key == "gpu99"  # down: first
        await pilot.press("end")
        assert app.selected_key == app.rows[-1].key and app.rows[-1].util == max(r.util or 0 for r in app.rows)
        await pilot.press("home")
        assert app.selected_key == "gpu99"


async def test_slash_filters_the_rows_esc_clears_it_and_s_cycles_the_order() -> None:
    from textual.widgets import DataTable

    from gpu_triage.ui.fleet_app import KEY_LINE, FleetApp

    app = FleetApp(_screen_fleet(), autostart=False)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"slurm")  # an owner; q, r and s typed there are letters, not keys
        await pilot.pause()
        assert [r.key for r in app.rows] == ["train"] and app.query_one(DataTable).row_count == 1
        assert "filter 'slurm': 1 shown" in str(app.query_one("#summary").render())
        await pilot.press("enter")  # the filter stays, the keys go back to the table
        assert isinstance(app.focused, DataTable) and len(app.rows) == 1
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert len(app.rows) == 32 and isinstance(app.focused, DataTable)
        await pilot.press("slash", *"down", "enter")  # a state
        await pilot.pause()
        assert [r.key for r in app.rows] == ["gpu99"]
        await pilot.press("slash", "escape", "s")  # by host name
        await pilot.pause()
        assert [r.key for r in app.rows][:3] == ["gpu00", "gpu01", "gpu02"] and app.sort_name == "host"
        await pilot.press("s")  # lowest GPU-Util first, n/a last
        await pilot.pause()
        utils = [r.util for r in app.rows]
        assert utils[-1] is None and utils[:-1] == sorted(u for u in utils if u is not None)
        assert "order: lowest GPU-Util" in str(app.query_one("#summary").render())
        await pilot.press("s")  # most GPU-hours lost first, n/a (an exporter without the counter) last
        await pilot.pause()
        lost = [r.gpu_hours_lost for r in app.rows]
        known = [v for v in lost if v is not None]
        assert lost[: len(known)] == sorted(known, reverse=True) and app.sort_name == "most GPU-hours lost"
        await pilot.press("s")  # back to the view's own order
        await pilot.pause()
        assert app.rows[0].key == "gpu99" and app.rows[1].key == "train"
        await pilot.press("enter", "s", "slash")  # a host's detail: nothing to sort or filter there
        await pilot.pause()
        assert app.sort_name == "severity" and not app.query_one("#filter").has_class("-open")
        assert "Home End" in KEY_LINE and "/ filter" in KEY_LINE and "s sort" in KEY_LINE and len(KEY_LINE) <= 80


async def test_a_poll_tick_while_the_app_shuts_down_draws_nothing() -> None:
    """Textual closes the screens before it stops the timers: the screen's poll may tick in between, with its
    widgets gone (seen on a loaded box as NoMatches '#summary' at the end of a test). It draws nothing then."""
    from gpu_triage.ui.fleet_app import FleetApp

    app = FleetApp(_screen_fleet(), autostart=False)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 20)) as pilot:
        await pilot.pause()
    assert not app.is_running
    app._poll()  # noqa: SLF001 - the timer's callback, as its last tick calls it
