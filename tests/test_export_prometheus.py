"""A real Prometheus (Debian's `prometheus` package) scrapes `gpu-triage export --source sim:data_pipeline`
on localhost: the verdict reaches Prometheus as gpu_triage_verdict{bottleneck="data_pipeline"} 1, and a
card's GPU-Util as Prometheus stored it is the simulator's own value for that tick.

CI must run this test, not skip it: without the `prometheus` binary it FAILS when $CI is set (.ci/run
installs the package); elsewhere it is skipped with the command that installs it. Loopback only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_triage.sources.sim import H200_MEM_TOTAL_BYTES, SimulatedSource
from promtools import free_port, require, stop

pytestmark = pytest.mark.slow  # real subprocesses, each seconds long: outside the inner loop

WAIT_S = 60.0  # bound on every wait: a hung Prometheus or exporter fails the test, it never hangs CI
INTERVAL_S = 0.5
SCENARIO = "data_pipeline"
# the verdict as Prometheus stores it, not its warm-up or hold: the same verdict, sooner (the file says why)
QUICK_VERDICT = Path(__file__).parent / "data" / "quick-verdict.toml"


def _spawn_exporter(port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "export", "--source", f"sim:{SCENARIO}", "--interval", str(INTERVAL_S),
         "--listen", f"127.0.0.1:{port}", "--config", str(QUICK_VERDICT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _serves(proc: subprocess.Popen[str]) -> bool:
    """Whether the exporter says it serves; False when it ended first (its port taken meanwhile, say)."""
    assert proc.stdout is not None
    return any(re.search(r"on http://127\.0\.0\.1:\d+/metrics", line) for line in proc.stdout)


def _start_prometheus(binary: str, tmp_path: Path, target: str) -> tuple[subprocess.Popen[str], str]:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: gpu-triage\n    static_configs:\n      - targets: ['{target}']\n"
    )
    for _attempt in range(3):  # the free port may be taken between our probe and Prometheus' bind
        port = free_port()
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + WAIT_S
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return proc, base
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        err = stop(proc)
        if "address already in use" not in err:
            raise AssertionError(f"prometheus did not start: {err[-2000:]}")
    raise AssertionError("prometheus found no free port in three attempts")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One exporter and one Prometheus scraping it, for the module's tests, which only query Prometheus. It
    scrapes its targets some 5 s after it starts (the pace of its discovery), so both start together: the
    exporter's port is chosen here, not after the exporter has started."""
    binary = require("prometheus")
    for _attempt in range(3):  # the free port may be taken between our probe and the exporter's bind
        port = free_port()
        exporter = _spawn_exporter(port)
        try:
            prom, base = _start_prometheus(binary, tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{port}")
        except BaseException:
            stop(exporter)
            raise
        if _serves(exporter):
            try:
                yield base
            finally:
                stop(prom)
                stop(exporter)
            return
        stop(prom)
        err = stop(exporter)
        if "port is in use" not in err:
            raise AssertionError(f"export did not start: {err[-2000:]}")
    raise AssertionError("export found no free port in three attempts")


def _query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _wait_for(base: str, promql: str, ok: Callable[[list[dict]], bool]) -> list[dict]:
    deadline = time.monotonic() + WAIT_S
    result: list[dict] = []
    while time.monotonic() < deadline:
        result = _query(base, promql)
        if ok(result):
            return result
        time.sleep(0.1)
    raise AssertionError(f"{promql} never satisfied the test within {WAIT_S:g} s; last answer: {result}")


def test_prometheus_scrapes_the_verdict_and_the_simulators_numbers(prometheus: str) -> None:
    base = prometheus
    verdict = f'gpu_triage_verdict{{bottleneck="{SCENARIO}"}}'
    found = _wait_for(base, verdict, lambda r: any(s["value"][1] == "1" for s in r))
    _wait_for(base, "count_over_time(gpu_triage_ticks_total[5m])", lambda r: bool(r) and float(r[0]["value"][1]) >= 5)
    labels = found[0]["metric"]
    assert labels["job"] == "gpu-triage" and labels["pattern"] and labels["cards"]
    assert _query(base, 'up{job="gpu-triage"}')[0]["value"][1] == "1"

    # GPU-Util of card 0 as Prometheus stored it, beside the tick counter of the same scrape (one snapshot
    # per scrape: equal timestamps mean the same tick), against the simulator replayed from its seed
    util = _query(base, 'gpu_triage_gpu_utilization_ratio{gpu="0"}[5m]')[0]["values"]
    ticks = dict(_query(base, "gpu_triage_ticks_total[5m]")[0]["values"])
    pairs = [(int(ticks[t]), float(v)) for t, v in util if t in ticks]
    assert len(pairs) >= 5, (util, ticks)
    sim = SimulatedSource(SCENARIO, gpus=8, seed=0, interval_s=INTERVAL_S)
    by_tick: dict[int, float] = {}
    for k in range(1, max(k for k, _ in pairs) + 1):
        by_tick[k] = sim.sample().gpus[0].util_pct / 100
    for k, value in pairs:
        assert value == pytest.approx(by_tick[k], abs=1e-9), f"tick {k}"
    assert len({v for _, v in pairs}) > 1  # a sawtooth: the stored values move with the ticks

    total = _query(base, "gpu_triage_gpu_memory_total_bytes")
    assert {s["metric"]["gpu"] for s in total} == {str(i) for i in range(8)}
    assert all(float(s["value"][1]) == H200_MEM_TOTAL_BYTES for s in total)

    # the processes per owner (the simulator's ranks are one Slurm job), no pid label by default
    held = _query(base, "gpu_triage_process_gpu_memory_bytes")
    assert held and all(s["metric"].get("owner_kind") == "slurm" and "pid" not in s["metric"] for s in held)
    owners = _query(base, "gpu_triage_owner_info")
    assert {(s["metric"]["owner"], s["metric"]["user"]) for s in owners} == {(held[0]["metric"]["owner"], "sim")}


def test_every_grafana_query_is_valid_promql_with_data(prometheus: str) -> None:
    """The dashboard's queries, with its variables filled in, against the real Prometheus: a typo in a
    metric name or in PromQL shows here (an empty answer or an error), not on someone's wall screen."""
    base = prometheus
    _wait_for(base, "gpu_triage_gpu_utilization_ratio", lambda r: len(r) == 8)
    _wait_for(base, "gpu_triage_verdict_age_seconds", lambda r: len(r) == 1)
    _wait_for(base, "rate(gpu_triage_gpu_pcie_rx_bytes_total[1m])", lambda r: len(r) == 8)  # two scrapes
    instance = _query(base, "gpu_triage_build_info")[0]["metric"]["instance"]
    dashboard = json.loads((Path(__file__).parent.parent / "contrib/grafana/gpu-triage.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) > 20
    # the simulated export has no job source (no pulse, no --job-log): the job figures are absent, so their
    # queries are checked as PromQL the real Prometheus accepts (_query asserts "success"), not for data
    no_job = [e for e in exprs if "gpu_triage_job_" in e]
    assert 0 < len(no_job) < len(exprs) / 4
    for expr in exprs:
        promql = (
            expr.replace("$instance", instance)
            .replace("$gpu", "3")
            .replace("$job", "gpu-triage")
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
        )
        answer = _query(base, promql)
        assert answer or expr in no_job, f"no data for {expr}"


def test_link_counters_give_prometheus_the_simulators_bytes(prometheus: str) -> None:
    """The PCIe counter as Prometheus stored it grows by exactly the simulator's rate x interval summed over
    the ticks between two scrapes, so rate() sees every tick however slow the scrape."""
    base = prometheus
    _wait_for(base, "count_over_time(gpu_triage_ticks_total[5m])", lambda r: bool(r) and float(r[0]["value"][1]) >= 4)
    pcie = dict(_query(base, 'gpu_triage_gpu_pcie_rx_bytes_total{gpu="0"}[5m]')[0]["values"])
    ticks = dict(_query(base, "gpu_triage_ticks_total[5m]")[0]["values"])
    pairs = sorted((int(ticks[t]), float(v)) for t, v in pcie.items() if t in ticks)
    assert len(pairs) >= 3, (pcie, ticks)
    sim = SimulatedSource(SCENARIO, gpus=8, seed=0, interval_s=INTERVAL_S)
    total, by_tick = 0.0, {}
    for k in range(1, pairs[-1][0] + 1):
        tick = sim.sample()
        total += (tick.gpus[0].pcie_rx_bytes_per_s or 0.0) * tick.interval_s
        by_tick[k] = total
    for k, value in pairs:
        assert value == pytest.approx(by_tick[k], rel=1e-9), f"tick {k}"
    assert _query(base, 'rate(gpu_triage_gpu_pcie_rx_bytes_total{gpu="0"}[1m])')
