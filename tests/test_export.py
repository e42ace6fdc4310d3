"""`gpu-triage export`: the metrics say what the tick and the dashboard's verdict say, a field the card does
not give is absent (never 0), and the daemon starts, refuses bad input in one line and stops cleanly."""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import platform
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.diagnosis.engine import diagnose
from gpu_triage.diagnosis.tracker import VerdictTracker
from gpu_triage.errors import UserError
from gpu_triage.export.collector import TriageCollector
from gpu_triage.export.monitor import Monitor
from gpu_triage.export.server import MetricsServer, parse_listen
from gpu_triage.model import GpuSample, HostInfo, JobRank, JobSample, Tick
from gpu_triage.sources.base import SourceStatus
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.window import RollingWindow
from tests.waits import wait_for, wait_until

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def registry_of(monitor: Monitor) -> CollectorRegistry:
    """The registry `export` serves: our collector reading the monitor's snapshot at scrape time."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot))
    return registry


def scrape(monitor: Monitor) -> Samples:
    return parse(generate_latest(registry_of(monitor)).decode())


def parse(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def named(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def fed(scenario: str, ticks: int, *, gpus: int = 4, interval_s: float = 2.0) -> tuple[Monitor, SimulatedSource, Tick]:
    source = SimulatedSource(scenario, gpus=gpus, seed=3, interval_s=interval_s, start=START)
    monitor = Monitor(source.host_info(), Config(interval_s=interval_s), source.name)
    tick = source.sample()
    monitor.ingest(tick, source.status())
    for _ in range(ticks - 1):
        tick = source.sample()
        monitor.ingest(tick, source.status())
    return monitor, source, tick


def test_card_metrics_are_the_tick_in_base_units() -> None:
    monitor, _, tick = fed("communication", 5)
    s = scrape(monitor)
    for g in tick.gpus:
        lab = (("gpu", str(g.index)),)
        assert s[("gpu_triage_gpu_utilization_ratio", lab)] == pytest.approx(g.util_pct / 100)
        assert s[("gpu_triage_gpu_utilization_min_ratio", lab)] == pytest.approx(g.util_min_pct / 100)
        assert s[("gpu_triage_gpu_utilization_max_ratio", lab)] == pytest.approx(g.util_max_pct / 100)
        assert s[("gpu_triage_gpu_sm_active_ratio", lab)] == pytest.approx(g.sm_active_pct / 100)
        assert s[("gpu_triage_gpu_memory_used_bytes", lab)] == g.mem_used_bytes
        assert s[("gpu_triage_gpu_nvlink_rx_bytes_total", lab)] >= g.nvlink_rx_bytes_per_s * tick.interval_s
        assert s[("gpu_triage_gpu_sm_clock_hertz", lab)] == pytest.approx(g.sm_clock_mhz * 1e6)
        assert s[("gpu_triage_gpu_lost", lab)] == 0
    assert s[("gpu_triage_ticks_total", ())] == 5
    assert s[("gpu_triage_host_cpu_cores", ())] == len(tick.cpu_pct)
    assert s[("gpu_triage_host_cpu_core_busy_max_ratio", ())] == pytest.approx(max(tick.cpu_pct) / 100)
    for d in tick.disks:
        assert s[("gpu_triage_host_disk_await_seconds", (("disk", d.name),))] == pytest.approx(d.await_ms / 1000)


def test_per_core_cardinality_does_not_grow_with_cores() -> None:
    small = scrape(fed("healthy", 2)[0])
    source = SimulatedSource("healthy", gpus=4, cores=192, seed=3)
    monitor = Monitor(source.host_info(), Config(), source.name)
    monitor.ingest(source.sample(), source.status())
    big = scrape(monitor)

    def host(s: Samples) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
        return sorted(k for k in s if k[0].startswith("gpu_triage_host_cpu"))

    assert host(small) == host(big)
    assert big[("gpu_triage_host_cpu_cores", ())] == 192


def test_unsupported_and_lost_cards_are_absent_not_zero() -> None:
    host = HostInfo(hostname="h", cpu_count=2)
    monitor = Monitor(host, Config(), "fake")
    old = GpuSample(0, util_pct=50.0, mem_used_bytes=1, mem_total_bytes=2)  # an Ampere: no GPM fields
    lost = GpuSample(1)  # what the NVML reader gives for a card that fell off the bus
    tick = Tick(ts=datetime.now(UTC), interval_s=2.0, gpus=[old, lost], cpu_pct=[10.0, 20.0])
    monitor.ingest(tick, SourceStatus(lost_gpus={1}))
    s = scrape(monitor)
    assert s[("gpu_triage_gpu_utilization_ratio", (("gpu", "0"),))] == 0.5
    assert ("gpu_triage_gpu_sm_active_ratio", (("gpu", "0"),)) not in s
    assert ("gpu_triage_gpu_power_watts", (("gpu", "0"),)) not in s
    assert s[("gpu_triage_gpu_lost", (("gpu", "1"),))] == 1
    assert [k for k in s if ("gpu", "1") in k[1]] == [("gpu_triage_gpu_lost", (("gpu", "1"),))]
    assert ("gpu_triage_host_iowait_ratio", ()) not in s  # None in the tick


def test_verdict_is_the_dashboards_shown_verdict() -> None:
    """The same engine and tracker, fed the same ticks, as ui/app.py runs them."""
    monitor, source, _ = fed("data_pipeline", 60)
    # the dashboard's way, by hand: window → diagnose → tracker
    replay = SimulatedSource("data_pipeline", gpus=4, seed=3, interval_s=2.0, start=START)
    window, tracker, shown = RollingWindow(Config().window_ticks), VerdictTracker(Config().thresholds), None
    began = 0.0
    for _ in range(60):
        tick = replay.sample()
        window.append(tick)
        before = shown
        view = window.view()
        shown = tracker.update(
            tick.ts.timestamp(), diagnose(view, Config().thresholds, source.host_info().cpu_count), view
        )
        if before is None or before.key != shown.key:
            began = tick.ts.timestamp()
    s = scrape(monitor)
    verdicts = named(s, "gpu_triage_verdict")
    assert verdicts == {
        (
            ("bottleneck", shown.bottleneck),
            ("cards", ",".join(map(str, sorted(shown.gpus)))),
            ("pattern", shown.pattern),
        ): 1.0
    }
    assert shown.bottleneck == "data_pipeline"
    assert s[("gpu_triage_verdict_confidence_ratio", ())] == pytest.approx(shown.confidence)
    assert s[("gpu_triage_verdict_age_seconds", ())] == pytest.approx(monitor.snapshot.tick_time - began)
    # what fixing it is worth: one series per host, the bottleneck its only label
    assert shown.headroom is not None and shown.headroom.factor is not None
    assert named(s, "gpu_triage_verdict_headroom_ratio") == {
        (("bottleneck", "data_pipeline"),): pytest.approx(shown.headroom.factor)}
    assert named(s, "gpu_triage_verdict_lost_ratio") == {
        (("bottleneck", "data_pipeline"),): pytest.approx(shown.headroom.share)}


def test_verdict_age_counts_from_its_change() -> None:
    source = SimulatedSource.from_schedule([("healthy", 120), ("data_pipeline", 300)], gpus=4, seed=1)
    monitor = Monitor(source.host_info(), Config(), source.name)
    ages, keys = [], []
    for _ in range(200):
        snap = monitor.ingest(source.sample(), source.status())
        ages.append(snap.tick_time - snap.verdict_since)
        keys.append(snap.verdict.key)
    changes = [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]]
    assert changes, "the schedule changes the verdict"
    for i in range(1, len(keys)):
        assert ages[i] == (0 if i in changes else pytest.approx(ages[i - 1] + 2.0))
    assert ages[-1] > 0


def test_the_jobs_own_clock_is_exported_when_the_tick_has_one() -> None:
    monitor = Monitor(HostInfo(hostname="h"), Config(), "fake")
    job = JobSample("log:tqdm", samples_per_s=512.0, step_time_s=0.25, data_wait_pct=40.0, since_progress_s=3.0,
                    steps=1200, ranks=[JobRank(0, data_wait_pct=40.0), JobRank(1, data_wait_pct=10.0)])
    monitor.ingest(Tick(ts=datetime.now(UTC), interval_s=2.0, gpus=[GpuSample(0, util_pct=50.0)], job=job))
    s = scrape(monitor)
    assert s[("gpu_triage_job_samples_per_second", ())] == 512
    assert s[("gpu_triage_job_data_wait_ratio", ())] == pytest.approx(0.4)
    assert s[("gpu_triage_job_seconds_since_progress", ())] == 3
    assert s[("gpu_triage_job_steps_total", ())] == 1200
    assert s[("gpu_triage_job_info", (("source", "log:tqdm"),))] == 1
    assert named(s, "gpu_triage_job_rank_data_wait_ratio") == {(("rank", "0"),): 0.4, (("rank", "1"),): 0.1}
    assert ("gpu_triage_job_loss", ()) not in s  # the log printed none: absent, not 0
    monitor.ingest(Tick(ts=datetime.now(UTC), interval_s=2.0, gpus=[GpuSample(0, util_pct=50.0)]))
    assert not [k for k in scrape(monitor) if k[0].startswith("gpu_triage_job")]  # no job in this tick


def test_no_tick_yet_exports_no_verdict_and_no_card_values() -> None:
    monitor = Monitor(HostInfo(hostname="h"), Config(), "fake")
    s = scrape(monitor)
    assert not named(s, "gpu_triage_verdict")
    assert s[("gpu_triage_ticks_total", ())] == 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:9839", ("127.0.0.1", 9839)),
        (":9000", ("127.0.0.1", 9000)),
        ("9000", ("127.0.0.1", 9000)),
        ("[::1]:9839", ("::1", 9839)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1:", "host:port", "127.0.0.1:70000", "::1:9839", "[::1]9839", "-1"])
def test_parse_listen_refuses(text: str) -> None:
    with pytest.raises(UserError, match="--listen"):
        parse_listen(text)


@pytest.fixture
def busy_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def test_port_in_use_is_one_line_and_exit_2(busy_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["export", "--listen", f"127.0.0.1:{busy_port}", "--source", "sim:healthy"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "in use" in err and str(busy_port) in err


@pytest.mark.parametrize("listen", ["256.1.1.1:9839", "no-such-host.invalid:9839", "192.0.2.1:9839"])
def test_bad_address_is_one_line_and_exit_2(listen: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--listen", listen, "--source", "sim:healthy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu-triage: error: cannot listen on")


def test_live_metrics_on_a_port_in_use_fails_before_the_screen(
    busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "healthy", "--metrics", f"127.0.0.1:{busy_port}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "in use" in err


def test_metrics_on_a_recording_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--metrics", "127.0.0.1:0"]) == 2
    assert "--metrics needs a live or simulated source" in capsys.readouterr().err


def _get(url: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_serves_metrics_only() -> None:
    monitor, _, _ = fed("healthy", 2)
    server = MetricsServer("127.0.0.1:0", registry_of(monitor))
    server.start()
    try:
        status, body = _get(server.url)
        assert status == 200 and "gpu_triage_gpu_utilization_ratio" in body
        base = server.url.removesuffix("/metrics")
        assert _get(base + "/")[0] == 404
        assert _get(base + "/api/v1/anything")[0] == 404
        assert _get(server.url, "POST")[0] == 405
    finally:
        server.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def _stack(thread: threading.Thread) -> list[str]:
    """The names of the functions ``thread`` is in now, innermost first."""
    frame = sys._current_frames().get(thread.ident or 0)  # noqa: SLF001 - where that thread is, read, not changed
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names


def test_a_scrape_in_flight_during_shutdown_gets_a_whole_answer() -> None:
    entered, release = threading.Event(), threading.Event()

    class Slow:
        def collect(self):
            entered.set()
            release.wait(10)
            monitor, _, _ = fed("healthy", 1)
            yield from TriageCollector(lambda: monitor.snapshot).collect()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Slow())
    server = MetricsServer("127.0.0.1:0", registry)
    server.start()
    answer: list[tuple[int, str]] = []
    scraper = threading.Thread(target=lambda: answer.append(_get(server.url)))
    scraper.start()
    assert entered.wait(10)
    closer = threading.Thread(target=server.close)
    closer.start()
    # close() has begun and waits on the loop's thread, which is still inside collect()
    wait_until(lambda: "join" in _stack(closer), "close() waiting on the loop's thread")
    assert closer.is_alive(), "close() must wait for the scrape in flight"
    release.set()
    closer.join(10)
    scraper.join(10)
    status, body = answer[0]
    assert status == 200 and body.rstrip().endswith(tuple("0123456789")) and "gpu_triage_verdict" in body


def _start_export(*extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "export", "--listen", "127.0.0.1:0", "--interval", "0.1", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"on (http://\S+/metrics)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError(f"export never said where it serves: {proc.communicate()}")


def _mapped_libraries(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as maps:
        return maps.read()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc/PID/maps")
@pytest.mark.parametrize(("sig", "record"), [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM", "SIGINT-record"])
def test_daemon_serves_never_maps_arrow_then_stops_cleanly_on_a_signal(sig: signal.Signals, record: bool,
                                                                       tmp_path: Path) -> None:
    """A real daemon serves, then stops on the signal with its port closed. And pyarrow, ~35 MB of a daemon's
    RSS (docs/performance.md), is never loaded, --record included (the recorder writes its stream itself; the
    Parquet is made by a child, checked here after the stop)."""
    extra = ("--record", str(tmp_path / "fleet")) if record else ()
    proc, url = _start_export("--source", "sim:storage_io", "--gpus", "2", *extra)
    try:
        deadline = time.monotonic() + 60
        while True:
            status, body = _get(url)
            s = parse(body)
            if s.get(("gpu_triage_ticks_total", ()), 0) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert status == 200 and s[("gpu_triage_ticks_total", ())] >= 2
        assert (
            s[
                (
                    "gpu_triage_build_info",
                    (("hostname", "sim-h200x2"), ("source", "sim:storage_io"), ("version", "0.1.0")),
                )
            ]
            == 1
        )
        maps = _mapped_libraries(proc.pid)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "pyarrow" not in maps
    assert "polars" not in maps
    assert proc.returncode == 0, err
    assert f"stopped ({sig.name})" in out and "Traceback" not in err
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", int(url.split(":")[2].split("/")[0]), timeout=2).request(
            "GET", "/metrics"
        )
    if record:
        from gpu_triage.trace.reader import open_trace

        (written,) = (tmp_path / "fleet").rglob("*.parquet")
        assert open_trace(written).n >= 2


def test_help_lists_export_and_metrics() -> None:
    from gpu_triage.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    assert "export" in text
    ns = parser.parse_args(["live", "--metrics", "127.0.0.1:9839"])
    assert ns.metrics == "127.0.0.1:9839"
    ns = parser.parse_args(["export"])
    assert ns.listen == "127.0.0.1:9839" and ns.source == "live"
    assert isinstance(ns, argparse.Namespace)


def test_readme_names_every_subcommand_and_the_export_options() -> None:
    from pathlib import Path

    from gpu_triage.cli import build_parser

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        assert f"`gpu-triage {name}" in readme, name
    for option in sub.choices["export"]._option_string_actions:
        if option.startswith("--") and option not in ("--help", "--gpus", "--seed", "--window"):
            assert option in readme, option
    assert "--metrics" in readme and "## Prometheus and Grafana" in readme


async def test_live_metrics_serve_the_dashboards_own_ticks() -> None:
    """`demo SCENARIO --metrics`: the app samples and judges, the exporter serves the very ticks on screen and
    the very verdict shown (what ui/run.py's run_dashboard wires: the exporter bound first), each tick judged
    once: the monitor's own judge never runs."""
    from gpu_triage.ui.run import _metrics_exporter, build_app, serve_metrics

    config = Config(interval_s=0.1)
    args = argparse.Namespace(scenario="healthy", gpus=2, cores=4, seed=0, metrics="127.0.0.1:0")
    exporter = _metrics_exporter("demo", args, config)
    app = build_app("demo", args, config)
    serve_metrics(app, exporter)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.ticks_ingested >= 3)
            app.shutdown()  # the sampler stops; the metrics are published as each tick is ingested
            status, body = _get(exporter.server.url)
            snap = exporter.monitor.snapshot
            assert status == 200 and snap.ticks == app.ticks_ingested >= 3
            assert snap.tick is app.window.last  # the same tick object on screen and in /metrics
            assert snap.verdict is app.verdict_now()  # the same verdict object: judged once
            assert exporter.monitor.judge.latest is None  # the monitor's own judge never ran
            s = parse(body)
            util = s[("gpu_triage_gpu_utilization_ratio", (("gpu", "0"),))]
            assert util == pytest.approx(snap.tick.gpus[0].util_pct / 100)
            assert (
                s[
                    (
                        "gpu_triage_build_info",
                        (("hostname", "sim-h200x2"), ("source", "sim:healthy"), ("version", "0.1.0")),
                    )
                ]
                == 1
            )
    finally:
        exporter.close()


def test_card_health_swap_and_network_are_exported_and_unknown_is_absent() -> None:
    from gpu_triage.model import NetSample

    monitor = Monitor(HostInfo(hostname="h", cpu_count=1), Config(), "fake")
    hot = GpuSample(0, util_pct=90.0, clock_event_reasons=0x4 | 0x1, ecc_corrected=5, ecc_uncorrected=1,
                    xid_count=2, xid_last=79)
    unknown = GpuSample(1, util_pct=90.0)  # a card that reports none of them
    nets = [NetSample("ib0", rx_bytes_per_s=1e9, tx_bytes_per_s=2e9), NetSample("eth0", None, 5.0)]
    tick = Tick(ts=datetime.now(UTC), interval_s=2.0, gpus=[hot, unknown], cpu_pct=[10.0],
                host_swap_used_bytes=1 << 20, host_swap_total_bytes=1 << 30, nets=nets)
    monitor.ingest(tick, SourceStatus())
    s = scrape(monitor)
    g0 = ("gpu", "0")
    assert s[("gpu_triage_gpu_clock_event_reason", (g0, ("reason", "power")))] == 1
    assert s[("gpu_triage_gpu_clock_event_reason", (g0, ("reason", "idle")))] == 1
    assert s[("gpu_triage_gpu_clock_event_reason", (g0, ("reason", "thermal")))] == 0
    assert s[("gpu_triage_gpu_ecc_corrected_errors_total", (g0,))] == 5
    assert s[("gpu_triage_gpu_ecc_uncorrected_errors_total", (g0,))] == 1
    assert s[("gpu_triage_gpu_xid_events_total", (g0,))] == 2 and s[("gpu_triage_gpu_xid_last_code", (g0,))] == 79
    assert not [k for k in s if ("gpu", "1") in k[1] and ("reason" in dict(k[1]) or "ecc" in k[0] or "xid" in k[0])]
    assert s[("gpu_triage_host_swap_used_bytes", ())] == 1 << 20
    assert s[("gpu_triage_host_swap_total_bytes", ())] == 1 << 30
    # one 2 s tick: the counters hold its rate x 2 s; an interface that gave no rate has no counter yet
    assert s[("gpu_triage_host_network_receive_bytes_total", (("interface", "ib0"),))] == 2e9
    assert s[("gpu_triage_host_network_transmit_bytes_total", (("interface", "eth0"),))] == 10.0
    assert ("gpu_triage_host_network_receive_bytes_total", (("interface", "eth0"),)) not in s


def _idle_in_select(thread: threading.Thread) -> bool:
    """The accept loop sits in select() and holds no connection (the scrape's socket is closed and dropped)."""
    frame = sys._current_frames().get(thread.ident or 0)  # noqa: SLF001 - where that thread is, read, not changed
    if frame is None or frame.f_code.co_name != "select":
        return False
    while frame is not None and frame.f_code.co_name != "_loop":
        frame = frame.f_back
    return frame is not None and not frame.f_locals["conns"]


def _epoll_timeout(native_id: int) -> int | None:
    """The timeout argument (its 32 bits) of the epoll_wait an x86-64 thread is blocked in; None elsewhere."""
    with open(f"/proc/self/task/{native_id}/syscall") as f:
        fields = f.read().split()
    if len(fields) < 5 or fields[0] not in ("232", "281"):  # x86-64's epoll_wait, epoll_pwait
        return None
    return int(fields[4], 16) & 0xFFFFFFFF


def _wakeups(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/status") as status:
        text = status.read()
    return sum(int(m) for m in re.findall(r"^(?:non)?voluntary_ctxt_switches:\s+(\d+)", text, re.M))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc/self/task")
def test_an_idle_server_sleeps_until_a_scrape_or_close() -> None:
    """No polling: the accept loop wakes for a connection or for close(), never on a timer."""
    monitor, _, _ = fed("healthy", 1)
    server = MetricsServer("127.0.0.1:0", registry_of(monitor))
    server.start()
    try:
        assert _get(server.url)[0] == 200  # the loop has run
        thread = server._thread  # noqa: SLF001 - the accept loop's thread, to read its kernel counters
        assert thread is not None and thread.native_id is not None
        native_id = thread.native_id
        wait_until(lambda: _idle_in_select(thread), "the loop asleep in select() with no connection open")
        if platform.machine() == "x86_64":  # the kernel's own view: in epoll_wait with no timeout (-1)
            wait_until(lambda: _epoll_timeout(native_id) is not None, "the loop blocked in epoll_wait")
            assert _epoll_timeout(native_id) == 0xFFFFFFFF, "the accept loop sleeps on a timer"
        before = _wakeups(native_id)
        time.sleep(0.6)  # the idle time under test: a 0.2 s poll would have woken 3 times in it, a 0.3 s one twice
        assert _wakeups(native_id) - before <= 1
        assert _get(server.url)[0] == 200  # and it still answers
    finally:
        server.close()
    assert not thread.is_alive()


def test_link_network_and_energy_counters_add_every_tick_a_slow_scrape_would_miss() -> None:
    """Seven 2 s ticks between two 14 s scrapes: the counters grow by every tick's bytes, which a gauge of
    the newest tick's rate would show one in seven of. A lost card stops counting; an interface gone from
    the tick (a container's veth) is dropped, not kept forever."""
    from gpu_triage.model import NetSample

    monitor = Monitor(HostInfo(hostname="h", cpu_count=1), Config(), "fake")
    rates = [1e9, 0.0, 3e9, 0.0, 0.0, 5e9, 2e9]
    for k, rate in enumerate(rates):
        g = GpuSample(0, pcie_rx_bytes_per_s=rate, nvlink_tx_bytes_per_s=rate / 2, power_w=100.0 + k)
        tick = Tick(
            ts=START + timedelta(seconds=2 * k), interval_s=2.0, gpus=[g, GpuSample(1, power_w=50.0)],
            nets=[NetSample("eth0", rx_bytes_per_s=rate, tx_bytes_per_s=None)],
        )
        monitor.ingest(tick, SourceStatus())
    s = scrape(monitor)
    g0, g1 = (("gpu", "0"),), (("gpu", "1"),)
    assert s[("gpu_triage_gpu_pcie_rx_bytes_total", g0)] == pytest.approx(2.0 * sum(rates))
    assert s[("gpu_triage_gpu_nvlink_tx_bytes_total", g0)] == pytest.approx(sum(rates))
    assert s[("gpu_triage_gpu_energy_joules_total", g0)] == pytest.approx(2.0 * sum(100.0 + k for k in range(7)))
    assert ("gpu_triage_gpu_pcie_rx_bytes_total", g1) not in s  # the card never gave a rate: no counter
    assert s[("gpu_triage_host_network_receive_bytes_total", (("interface", "eth0"),))] == pytest.approx(
        2.0 * sum(rates)
    )
    assert ("gpu_triage_host_network_transmit_bytes_total", (("interface", "eth0"),)) not in s
    before = s[("gpu_triage_gpu_energy_joules_total", g1)]
    later = Tick(
        ts=START + timedelta(seconds=20), interval_s=2.0, gpus=[GpuSample(0), GpuSample(1, power_w=50.0)],
        nets=[NetSample("veth9", rx_bytes_per_s=1.0)],
    )
    monitor.ingest(later, SourceStatus(lost_gpus={1}))
    s = scrape(monitor)
    assert ("gpu_triage_gpu_energy_joules_total", g1) not in s  # lost: nothing about it but gpu_lost
    assert s[("gpu_triage_gpu_pcie_rx_bytes_total", g0)] == pytest.approx(2.0 * sum(rates))  # None adds nothing
    nets = {dict(k[1])["interface"] for k in s if k[0] == "gpu_triage_host_network_receive_bytes_total"}
    assert nets == {"veth9"}
    monitor.ingest(dataclasses.replace(later, ts=later.ts + timedelta(seconds=2)), SourceStatus())
    assert scrape(monitor)[("gpu_triage_gpu_energy_joules_total", g1)] == pytest.approx(before + 100.0)


def test_process_metrics_are_per_owner_and_pid_labels_only_when_asked() -> None:
    from gpu_triage.model import ProcSample

    monitor = Monitor(HostInfo(hostname="h", cpu_count=4), Config(), "fake")
    procs = [
        ProcSample(pid=11, gpu_index=0, name="python", gpu_mem_bytes=4 << 30, cpu_pct=100.0, workers=2,
                   workers_cpu_pct=[50.0, 50.0], slurm_job="4242", user="alice"),
        ProcSample(pid=12, gpu_index=0, name="python", gpu_mem_bytes=2 << 30, cpu_pct=50.0, workers=1,
                   workers_cpu_pct=[100.0], slurm_job="4242", user="alice"),
        ProcSample(pid=13, gpu_index=1, name="jupyter", gpu_mem_bytes=1 << 30, cpu_pct=1.0, workers=0,
                   pod_uid="0e886e9a-3879-45f9-b44d-86ef9df03224", pod_name="nb-0", pod_namespace="lab",
                   container="containerd://" + "c" * 64, user="1001"),
        ProcSample(pid=14, gpu_index=1, name="mystery", gpu_mem_bytes=1 << 20),
    ]
    tick = Tick(ts=START, interval_s=2.0, gpus=[GpuSample(0), GpuSample(1)], procs=procs)
    monitor.ingest(tick, SourceStatus())
    s = scrape(monitor)
    job = (("gpu", "0"), ("owner", "4242"), ("owner_kind", "slurm"))
    pod = (("gpu", "1"), ("owner", "lab/nb-0"), ("owner_kind", "pod"))
    assert s[("gpu_triage_process_gpu_memory_bytes", job)] == 6 << 30  # the job's two ranks on card 0
    assert s[("gpu_triage_process_cpu_cores", job)] == pytest.approx(1.5)
    assert s[("gpu_triage_process_dataloader_workers", job)] == 3
    assert s[("gpu_triage_process_dataloader_workers_cpu_cores", job)] == pytest.approx(2.0)
    assert s[("gpu_triage_process_gpu_memory_bytes", pod)] == 1 << 30
    unknown = (("gpu", "1"), ("owner", ""), ("owner_kind", "unknown"))
    assert s[("gpu_triage_process_gpu_memory_bytes", unknown)] == 1 << 20
    assert not [k for k in s if "pid" in dict(k[1]) and k[0].startswith("gpu_triage_")]
    info = named(s, "gpu_triage_owner_info")
    assert dict(next(k for k in info if ("owner_kind", "pod") in k)) == {
        "owner_kind": "pod", "owner": "lab/nb-0", "user": "1001", "slurm_job": "", "pod_namespace": "lab",
        "pod_name": "nb-0", "pod_uid": "0e886e9a-3879-45f9-b44d-86ef9df03224", "container": "containerd://" + "c" * 64,
    }
    assert len(info) == 2  # the unknown owner has no info series
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot, pid_labels=True))
    with_pids = parse(generate_latest(registry).decode())
    rank = tuple(sorted((*job, ("name", "python"), ("pid", "11"))))
    assert with_pids[("gpu_triage_process_gpu_memory_bytes", rank)] == 4 << 30


def test_energy_is_the_drivers_counter_where_the_card_keeps_one() -> None:
    """A card with NVML's energy counter exports it (mJ -> J), not the power integration: the counter counts
    since the driver loaded, so rate() over it is the card's own figure; a card without one is integrated."""
    monitor = Monitor(HostInfo(hostname="h", cpu_count=1), Config(), "fake")
    for k in range(3):
        gpus = [GpuSample(0, power_w=500.0, energy_mj=9_000_000 + k * 1_400_000), GpuSample(1, power_w=100.0)]
        monitor.ingest(Tick(ts=START + timedelta(seconds=2 * k), interval_s=2.0, gpus=gpus), SourceStatus())
    s = scrape(monitor)
    assert s[("gpu_triage_gpu_energy_joules_total", (("gpu", "0"),))] == pytest.approx(9_000 + 2 * 1_400)
    assert s[("gpu_triage_gpu_energy_joules_total", (("gpu", "1"),))] == pytest.approx(3 * 2.0 * 100.0)
