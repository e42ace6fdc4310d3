"""`gpu-triage fleet`: real `gpu-triage export --source sim:SCENARIO` processes, read directly (the exporter
list) and through a real Prometheus (Debian's `prometheus`, as tests/test_export_prometheus.py runs it), and
hostile exporters on loopback (escape codes, bad numbers, endless or huge bodies, servers that never answer).

The scenarios are chosen so the order is checked: a dead exporter is down (first: a host nobody can see),
single_card_busy (every rank on one card of eight: placement) and storage_io have a bottleneck (next, in the
order of severity, placement first), healthy (all busy) has none and comes last. CI must run the Prometheus
test: without the binary it FAILS when $CI is set (promtools.require).
"""

from __future__ import annotations

import http.server
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_triage import safetext
from gpu_triage.cli import main
from gpu_triage.fleet_live.client import ExporterTarget, FetchError, Fleet, PrometheusTarget, http_get
from gpu_triage.fleet_live.model import DOWN, OK, STALE, HostRow
from gpu_triage.fleet_live.render import cells, detail_lines
from promtools import free_port, require, stop
from tests.waits import wait_for

WAIT_S = 60.0  # bound on every wait: a hung exporter or Prometheus fails the test, never hangs CI
POLL_S = 0.05  # a server thread looks for its stop this often: shutting it down waits that long
INTERVAL_S = 0.5
# scenario -> (bottleneck, pattern) its exporter settles on
POOL = {
    "storage_io": ("storage_io", "steady_low"),
    "single_card_busy": ("placement", "single_card_busy"),
    "healthy": ("none", "steady_high"),
}


# the tests read settled verdicts, not the warm-up or the hold: the same verdicts, sooner (the file says why)
QUICK_VERDICT = Path(__file__).parent / "data" / "quick-verdict.toml"


def _spawn_exporter(scenario: str, *extra: str, listen: str = "127.0.0.1:0") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "export", "--source", f"sim:{scenario}",
         "--interval", str(INTERVAL_S), "--listen", listen, "--config", str(QUICK_VERDICT), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _serves_at(proc: subprocess.Popen[str]) -> str | None:
    """The address an exporter started by :func:`_spawn_exporter` serves on, once it says so; None when it
    ended first."""
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"on http://(127\.0\.0\.1:\d+)/metrics", line)
        if m:
            return m.group(1)
    return None


def _address(proc: subprocess.Popen[str], scenario: str) -> str:
    address = _serves_at(proc)
    if address is None:
        raise AssertionError(f"export {scenario} did not start: {stop(proc)}")
    return address


def _wait(what: str, get: Callable[[], object], ok: Callable[[object], bool]) -> object:
    deadline = time.monotonic() + WAIT_S
    last: object = None
    while time.monotonic() < deadline:
        last = get()
        if ok(last):
            return last
        time.sleep(0.1)  # a fifth of a scrape or tick interval: a new answer is seen soon after it exists
    raise AssertionError(f"{what} within {WAIT_S:g} s; last: {last}")


def _settled(row: HostRow, scenario: str) -> bool:
    return row.state == OK and (row.bottleneck, row.pattern) == POOL[scenario]


BATCH = 64  # the healthy host's job: 64 samples a step, a step every STEP_S (its log says so)
STEP_S = 0.25


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The three exporters, each already showing its scenario's verdict. The healthy one follows a
    training log (the ImageNet example's format) written here, a step every 0.25 s: its samples/s."""
    log = tmp_path_factory.mktemp("job") / "train.log"
    log.write_text("")
    done = threading.Event()

    def train() -> None:
        step = 0
        with log.open("a") as f:
            while not done.wait(STEP_S):
                step += 1
                f.write(f"Epoch: [0][{step:>4}/5005]\tTime  {STEP_S:.3f} ( {STEP_S:.3f})\t"
                        "Data  0.001 ( 0.001)\tLoss 6.9 (6.9)\n")
                f.flush()

    writer = threading.Thread(target=train, daemon=True)
    writer.start()
    procs: list[subprocess.Popen[str]] = []
    try:
        spawned = {}
        for scenario in POOL:  # all three start at once, then each is asked where it listens
            job = ("--job-log", str(log), "--batch-size", str(BATCH)) if scenario == "healthy" else ()
            spawned[scenario] = _spawn_exporter(scenario, *job)
            procs.append(spawned[scenario])
        addresses = {scenario: _address(proc, scenario) for scenario, proc in spawned.items()}
        for scenario, address in addresses.items():
            target = ExporterTarget(address, timeout_s=5)
            _wait(f"{scenario}'s exporter showing {POOL[scenario]}", lambda t=target: t.fetch()[0],
                  lambda row, s=scenario: _settled(row, s)  # type: ignore[misc]
                  and (s != "healthy" or row.samples_per_s is not None))  # its job's rate, once measured
        yield addresses
    finally:
        done.set()
        for proc in procs:
            proc.terminate()  # all at once: each takes up to half a second to see its stop
        for proc in procs:
            stop(proc)


def _closed_port() -> str:
    return f"127.0.0.1:{free_port()}"  # bound and released: nothing listens there


# -- the exporter list ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_exporter_list_puts_the_dead_host_first_then_bottlenecks_by_severity_then_lowest_utilisation(pool) -> None:
    dead = _closed_port()
    targets = [ExporterTarget(a, timeout_s=5) for a in (pool["healthy"], dead, pool["storage_io"],
                                                        pool["single_card_busy"])]
    snap = Fleet(targets, source="pool", interval_s=5).once()
    order = [r.key for r in snap.rows]
    assert order == [dead, pool["single_card_busy"], pool["storage_io"], pool["healthy"]]
    down, low, first, high = snap.rows
    assert (first.bottleneck, first.pattern) == POOL["storage_io"] and 0 < first.confidence <= 1
    assert first.total == 8 and first.hostname == "sim-h200x8"
    # whose job it is, from a real exporter's owner series: the simulated ranks run in a Slurm job
    assert re.fullmatch(r"slurm \d+", high.owner or ""), high.owner
    assert cells(high)["OWNER"] == high.owner and high.owners == (high.owner,)
    # one card of eight runs the job; healthy keeps all eight busy
    assert low.busy == 1 and low.total == 8 and high.busy == 8 and low.util < high.util
    # the job's own clock, from its log through the exporter: 64 samples every 0.25 s (steps counted per
    # 0.5 s tick, so one tick may see one step more or less)
    assert BATCH / STEP_S / 2.5 <= high.samples_per_s <= BATCH / STEP_S * 2.5 and low.samples_per_s is None
    assert cells(low)["SAMPLES/S"] == "n/a" and float(cells(high)["SAMPLES/S"]) > 0
    assert all(c.mem_total and c.mem_total > 100 * 2**30 for c in first.cards)  # an H200's memory, per card
    # the dead exporter is down, with why, and no figure of it reads as 0
    assert down.state == DOWN and "connection refused" in down.error
    assert (down.busy, down.total, down.util, down.confidence, down.cards) == (None, None, None, None, ())
    assert {cells(down)[c] for c in ("BUSY", "UTIL", "CONF", "SAMPLES/S")} == {"—"}
    assert snap.error is None  # a dead exporter is a row, not a failure of the view
    # two hosts both called sim-h200x8 are told apart by their addresses
    assert {r.host for r in (first, low, high)} == {first.key, low.key, high.key}


@pytest.mark.slow
def test_detail_lines_give_each_card_from_the_metrics(pool) -> None:
    row = ExporterTarget(pool["single_card_busy"], timeout_s=5).fetch()[0]
    lines = detail_lines(row)
    assert lines[0].startswith("sim-h200x8   " + pool["single_card_busy"])
    assert any(line.startswith("verdict: single_card_busy / bottleneck placement") for line in lines)
    card_lines = [line for line in lines if re.match(r"^\s+\d+\s+\d+%", line)]
    assert len(card_lines) == 8
    assert all(re.search(r" \d+[KMG]/140G .* \d+ W ", line) for line in card_lines), card_lines  # memory, power


@pytest.mark.slow
def test_cli_once_and_json_over_the_exporters(pool, tmp_path: Path, capsys) -> None:
    dead = _closed_port()
    listing = tmp_path / "pool.txt"
    listing.write_text(f"# the pool\n{pool['healthy']}\n{pool['storage_io']}, {dead}\n")
    assert main(["fleet", "--exporters-file", str(listing), "--exporters", pool["single_card_busy"],
                 "--json", "--timeout", "5"]) == 3  # a host down: printed, and exit 3
    doc = json.loads(capsys.readouterr().out)
    assert [h["key"] for h in doc["hosts"]] == [dead, pool["single_card_busy"], pool["storage_io"], pool["healthy"]]
    assert doc["hosts"][0]["state"] == "down" and doc["hosts"][0]["util"] is None
    # GPU-hours lost, from each exporter's counter: every rank on one card loses the seven idle ones' time
    placement, healthy = doc["hosts"][1], doc["hosts"][3]
    assert placement["gpu_hours_lost"] > 0 and placement["lost_bottleneck"] == "placement"
    assert placement["lost_range"] == "since the exporter started"
    assert healthy["gpu_hours_lost"] < placement["gpu_hours_lost"]
    assert main(["fleet", "--exporters", f"{dead},{pool['storage_io']}", "--once"]) == 3
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("2 exporters: 2 hosts, 2 need a look, 1 down or stale")
    assert lines[1].split() == ["HOST", "STATE", "BOTTLENECK", "PATTERN", "CONF", "BUSY", "UTIL", "GPU-H", "LOST",
                                "SAMPLES/S", "OWNER"]
    assert lines[2].split()[:2] == [dead, "down"] and "connection refused" in lines[3]
    assert lines[4].split()[:3] == ["sim-h200x8", "ok", "storage_io"]  # one host of that name: its name
    # every host answers (a bottleneck is a verdict, not a failure): exit 0
    assert main(["fleet", "--exporters", f"{pool['healthy']},{pool['storage_io']}", "--once"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["fleet"], "give --prometheus URL"),
        (["fleet", "--prometheus", "http://a:9090", "--exporters", "b:1"], "not both"),
        (["fleet", "--exporters", "host-without-port"], "no port"),
        (["fleet", "--exporters", "a:99999"], "not a number from 1 to 65535"),
        (["fleet", "--exporters", "a:1", "--match", 'job="x"'], "goes with --prometheus"),
        (["fleet", "--exporters-file", "/nonexistent/pool.txt"], "No such file"),
        (["fleet", "--prometheus", "ftp://a"], "give the Prometheus server as http://HOST:9090"),
        (["fleet", "--prometheus", "http://a:9090", "--match", "{a}}"], "give label matchers"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], expected: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# -- hostile and hanging exporters on loopback ---------------------------------------------------------------

HOSTILE = (
    "# TYPE gpu_triage_build_info gauge\n"
    'gpu_triage_build_info{hostname="\\u001b evil\x1b[2J\x1b]0;pwned\x07\u202eokay\\n[bold]x[/bold]",'
    'version="1",source="live"} 1\n'
    'gpu_triage_verdict{pattern="idle\x1b[31m",bottleneck="memory_idle",cards="0"} 1\n'
    "gpu_triage_verdict_confidence_ratio NaN\n"
    "gpu_triage_tick_timestamp_seconds {now}\n"
    "gpu_triage_tick_interval_seconds 2\n"
    'gpu_triage_gpu_utilization_ratio{{gpu="0"}} 1e308\n'
    'gpu_triage_gpu_utilization_ratio{{gpu="1"}} 0.5\n'
    'gpu_triage_gpu_utilization_ratio{{gpu="99999999999"}} 0.5\n'
    'gpu_triage_gpu_memory_total_bytes{{gpu="1"}} -5\n'
    'gpu_triage_gpu_power_watts{{gpu="1"}} +Inf\n'
    'gpu_triage_gpu_ecc_uncorrected_errors_total{{gpu="1"}} 3\n'
    'gpu_triage_process_gpu_memory_bytes{{pid="1",gpu="1",name="python",owner="pod ml/train-\x1b[1mx"}} 1e9\n'
    "this line is not the text format at all {{{{\n"
).replace("{{", "{").replace("}}", "}")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Hostile(http.server.BaseHTTPRequestHandler):
    release = threading.Event()
    lock = threading.Lock()
    hanging = 0
    most_hanging = 0

    def log_message(self, *args: object) -> None:  # the test's output stays clean
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        cls = type(self)
        self.path = self.path.split("?", 1)[0]
        if self.path == "/metrics":
            body = HOSTILE.replace("{now}", repr(time.time())).encode("utf-8", "surrogateescape")
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            chunk = b"# padding " + b"x" * 65536 + b"\n"
            try:
                for _ in range(200):  # 13 MB, past the cap
                    self.wfile.write(chunk)
            except OSError:
                pass
            return
        elif self.path == "/hang":
            with cls.lock:
                cls.hanging += 1
                cls.most_hanging = max(cls.most_hanging, cls.hanging)
            cls.release.wait(15)
            with cls.lock:
                cls.hanging -= 1
            return
        elif self.path == "/drip":
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(120):  # a line every 0.25 s for 30 s: far past any deadline, yet bounded
                    if cls.release.wait(0.25):
                        break
                    self.wfile.write(b"# drip\n")
                    self.wfile.flush()
            except OSError:
                pass
            return
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
            self.end_headers()
            return
        else:
            body = b"not found"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _drain_hanging() -> None:
    """Let every /hang handler still running (an earlier test's, its server closed) count itself out: reset
    under it, the counter went to -1 when it left, and the next test saw 2 of its 3 hanging requests."""
    _Hostile.release.set()
    deadline = time.monotonic() + 20
    while _Hostile.hanging > 0 and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def hostile() -> Iterator[str]:
    _drain_hanging()
    _Hostile.release.clear()
    _Hostile.hanging = _Hostile.most_hanging = 0
    gen = _serve(_Hostile)
    address = next(gen)
    yield address
    _drain_hanging()
    next(gen, None)


def _drawable(s: str) -> bool:
    return all(ch.isprintable() for ch in s)


def test_a_hostile_scrape_is_cleaned_bounded_and_read_under_both_names(hostile: str) -> None:
    row = ExporterTarget(f"http://{hostile}/metrics", timeout_s=5).fetch()[0]
    assert row.state == OK
    every = [row.host, row.hostname or "", row.pattern or "", row.owner or "", *row.notes, *detail_lines(row),
             *cells(row).values()]
    assert all(_drawable(s) for s in every), [s for s in every if not _drawable(s)]
    assert "\x1b" not in "".join(every) and "\u202e" not in "".join(every)
    assert "[bold]x[/bold]" in row.hostname  # markup is text: the screen draws it as these characters
    assert row.bottleneck == "memory_idle" and row.confidence is None  # NaN: n/a, not 0 and not NaN %
    card0, card1 = row.cards  # the 11-digit gpu label is dropped, not a card
    assert card0.util is None and card1.util == 0.5  # 1e308 is no utilisation
    assert card1.mem_total is None and card1.power_w is None  # -5 bytes, +Inf watts: n/a
    assert card1.ecc_uncorrected == 3  # the _total counter name is read as the gauge's was
    assert row.owner == "pod ml/train-␛[1mx" and row.busy == 1 and row.total == 2
    assert any("unparsable line" in n for n in row.notes)


@pytest.mark.slow
def test_a_huge_a_dripping_and_a_redirecting_exporter_are_down_with_why(hostile: str) -> None:
    started = time.monotonic()
    # the drip's line every 0.25 s keeps each receive under its 1 s timeout: only the deadline of the whole
    # answer cuts it; the others get more time, for a loaded box (their answer comes at once: nothing waits)
    huge, drip, redirect = (ExporterTarget(f"http://{hostile}/{path}", timeout_s=t).fetch()[0]
                            for path, t in (("huge", 5), ("drip", 1), ("redirect", 5)))
    assert huge.state == DOWN and "larger than 8 MiB" in huge.error
    assert drip.state == DOWN and "longer than 1 s" in drip.error
    assert redirect.state == DOWN and "redirected to http://169.254.169.254" in redirect.error
    assert time.monotonic() - started < 10  # the drip is cut at its deadline, not read to its end


@pytest.mark.slow
def test_hanging_exporters_never_stall_the_others(hostile: str, pool) -> None:
    hangs = [ExporterTarget(f"http://{hostile}/hang?{i}", timeout_s=30) for i in range(2)]
    good = ExporterTarget(pool["healthy"], timeout_s=5)
    fleet = Fleet([*hangs, good], source="pool", interval_s=0.5, concurrency=3)
    fleet.start()
    try:
        # three workers: two hang, the third keeps answering for the good host round after round
        snap = _wait("the good host's row while the others hang",
                     lambda: fleet.snapshot, lambda s: any(r.key == good.key and r.state == OK for r in s.rows))
        first = snap.updated
        snap = _wait("a second answer from the good host", lambda: fleet.snapshot,
                     lambda s: s.updated is not None and s.updated > first)
        assert snap.waiting == 2 and [r.key for r in snap.rows] == [good.key]  # the hanging ones: no answer yet
        assert _Hostile.hanging == 2  # each asked once: a host in flight is not asked again
    finally:
        _Hostile.release.set()
        fleet.stop()


@pytest.mark.slow
def test_concurrency_is_bounded(hostile: str) -> None:
    hangs = [ExporterTarget(f"http://{hostile}/hang?{i}", timeout_s=30) for i in range(6)]
    fleet = Fleet(hangs, source="pool", interval_s=0.5, concurrency=3)
    fleet.start()
    try:
        _wait("three requests hanging at the server", lambda: _Hostile.hanging, lambda n: n == 3)
        queued = fleet._pool._queue  # noqa: SLF001 - the workers' queue, read: the three not yet asked wait there
        _wait("the other three queued behind them", queued.qsize, lambda n: n == 3)
        for _ in range(2):  # rounds go on meanwhile (the second asked for starts after the first has ended)
            fleet.refresh_now()
            _wait("a round", fleet._refresh.is_set, lambda s: not s)  # noqa: SLF001 - cleared as a round starts
        assert _Hostile.most_hanging == 3 and _Hostile.hanging == 3 and queued.qsize() == 3  # none adds a fourth
        _Hostile.release.set()  # the three get an empty answer: the other three are asked, three at a time
        _wait("every host answered (down: an empty answer)", lambda: fleet.snapshot,
              lambda s: len(s.rows) == 6 and all(r.state == DOWN for r in s.rows))
        assert _Hostile.most_hanging == 3
    finally:
        _Hostile.release.set()
        fleet.stop()


@pytest.mark.slow
def test_one_timeout_is_down_not_a_stall_of_the_round(hostile: str, pool) -> None:
    started = time.monotonic()
    snap = Fleet([ExporterTarget(f"http://{hostile}/hang", timeout_s=0.5),
                  ExporterTarget(pool["healthy"], timeout_s=5)], source="pool", interval_s=5).once()
    assert time.monotonic() - started < 8  # the hang lasts 15 s
    states = {r.key.endswith("/hang"): r for r in snap.rows}
    assert states[True].state == DOWN and "no answer within 0.5 s" in states[True].error
    assert states[False].state == OK


# -- a real Prometheus ----------------------------------------------------------------------------------------


def _scrape_config(targets: list[str]) -> str:
    listed = ", ".join(f"'{t}'" for t in targets)
    return f"  - job_name: gpu-triage\n    static_configs:\n      - targets: [{listed}]\n"


def _federate_config(prometheus: str) -> str:
    """A second Prometheus federating the first without honor_labels: the hosts' job and instance arrive
    as exported_job / exported_instance."""
    return (
        "  - job_name: federate\n    honor_labels: false\n    metrics_path: /federate\n"
        "    params:\n      'match[]': ['{__name__=~\"gpu_triage_.*|up\"}']\n"
        f"    static_configs:\n      - targets: ['{prometheus.removeprefix('http://')}']\n"
    )


def _start_prometheus(tmp_path: Path, jobs: str) -> tuple[subprocess.Popen[str], str]:
    binary = require("prometheus")
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n  evaluation_interval: 1s\n"
        "scrape_configs:\n" + jobs
    )
    for _attempt in range(3):  # the free port may be taken between our probe and Prometheus' bind
        port = free_port()
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
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
            except OSError:
                time.sleep(0.05)
        err = stop(proc)
        if "address already in use" not in err:
            raise AssertionError(f"prometheus did not start: {err[-2000:]}")
    raise AssertionError("prometheus found no free port in three attempts")


def _exporter_and_prometheus(
    scenario: str, tmp_path: Path, targets: list[str]
) -> tuple[subprocess.Popen[str], str, list[subprocess.Popen[str]], str, str]:
    """An exporter of ``scenario``, a Prometheus scraping it and ``targets``, and a second one federating the
    first: (the exporter, its address, the two Prometheus, their URLs). Prometheus scrapes some 5 s after it
    starts (the pace of its discovery), so all start together: the exporter's port is chosen here, not after
    it has started."""
    for attempt in range(3):  # the port may be taken between our probe and the exporter's bind
        address = f"127.0.0.1:{free_port()}"
        exporter = _spawn_exporter(scenario, listen=address)
        proms: list[subprocess.Popen[str]] = []
        try:
            prom, base = _start_prometheus(tmp_path / f"p1-{attempt}", _scrape_config([*targets, address]))
            proms.append(prom)
            prom, federated = _start_prometheus(tmp_path / f"p2-{attempt}", _federate_config(base))
            proms.append(prom)
            served = _serves_at(exporter)
        except BaseException:
            for proc in (exporter, *proms):
                stop(proc)
            raise
        if served is not None:
            return exporter, address, proms, base, federated
        for prom in proms:
            stop(prom)
        err = stop(exporter)
        if "port is in use" not in err:
            raise AssertionError(f"export {scenario} did not start: {err[-2000:]}")
    raise AssertionError(f"export {scenario} found no free port in three attempts")


@pytest.mark.slow
def test_prometheus_mode_orders_the_fleet_and_a_killed_exporter_is_down(pool, tmp_path: Path, capsys) -> None:
    never = _closed_port()  # a target that never answered: listed, down, with the rest of its scrape job
    victim, victim_address, proms, base, federated = _exporter_and_prometheus(
        "data_pipeline", tmp_path, [*pool.values(), never])
    try:
        direct = Fleet([PrometheusTarget(base, timeout_s=10)], source="prometheus", interval_s=5)
        via = Fleet([PrometheusTarget(federated, timeout_s=10)], source="federated", interval_s=5)

        def settled(snap: object) -> bool:
            rows = {r.address: r for r in snap.rows}  # type: ignore[attr-defined]
            return all(a in rows and _settled(rows[a], s) for s, a in pool.items()) and (
                victim_address in rows and rows[victim_address].bottleneck == "data_pipeline"
                and never in rows)

        for fleet in (direct, via):
            snap = _wait(f"{fleet.snapshot.source}: every host's verdict", fleet.once, settled)
            # the target that never answered first (down), then the bottlenecks by severity: placement,
            # data_pipeline, storage_io; the healthy host last
            assert [r.address for r in snap.rows] == [never, pool["single_card_busy"], victim_address,
                                                      pool["storage_io"], pool["healthy"]]
            assert snap.rows[0].state == DOWN and "up == 0" in snap.rows[0].error
            # federated too, each host is its own (job, instance), not the federating server
            assert all(r.job == "gpu-triage" and r.key == f"gpu-triage/{r.address}" for r in snap.rows)

        # the GPU-hours lost column from Prometheus: the counter's increase over the last 24 h
        lost = _wait("the placement host's GPU-hours lost", direct.once,
                     lambda s: any(r.address == pool["single_card_busy"] and r.gpu_hours_lost  # type: ignore[attr-defined]
                                   for r in s.rows))  # type: ignore[attr-defined]
        row = next(r for r in lost.rows if r.address == pool["single_card_busy"])
        assert row.lost_bottleneck == "placement" and row.lost_range == "over the last 24h"

        stop(victim)  # the next scrape fails: up == 0, and its series go stale
        rest = [pool["single_card_busy"], pool["storage_io"], pool["healthy"]]
        for fleet in (direct, via):
            snap = _wait(f"{fleet.snapshot.source}: the killed exporter shown down", fleet.once,
                         lambda s: {r.address for r in s.rows[:2]} == {never, victim_address}  # type: ignore[attr-defined]
                         and [r.address for r in s.rows[2:]] == rest)  # type: ignore[attr-defined]
            dead = next(r for r in snap.rows if r.address == victim_address)
            assert dead.state == DOWN and "up == 0" in dead.error and dead.util is None and dead.busy is None
            assert snap.rows[2].cards and snap.rows[2].cards[0].mem_total is not None

        # --match names the scrape job: the target that never answered is there too, down
        snap = Fleet([PrometheusTarget(base, match='job="gpu-triage"', timeout_s=10)], source="p",
                     interval_s=5).once()
        by = {r.address: r for r in snap.rows}
        assert by[never].state == DOWN and by[victim_address].state == DOWN and by[pool["healthy"]].state == OK

        # the CLI over the same Prometheus (hosts down: exit 3), and Prometheus' own error as one line
        assert main(["fleet", "--prometheus", base, "--json"]) == 3
        doc = json.loads(capsys.readouterr().out)
        assert doc["hosts"][2]["address"] == pool["single_card_busy"] and doc["error"] is None
        assert main(["fleet", "--prometheus", base, "--match", 'job=~"(unclosed', "--once"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("gpu-triage: error: ") and "bad_data" in err and len(err.splitlines()) == 1
    finally:
        stop(victim)
        for prom in proms:
            stop(prom)


@pytest.mark.slow
def test_prometheus_mode_says_na_for_a_host_whose_cards_read_no_gpu_util(tmp_path: Path) -> None:
    """A real exporter page (the monitor and its collector) whose cards stop answering GPU-Util while the verdict
    still names data_pipeline, scraped by a real Prometheus: over the last 24 h its counter does not grow and its
    seconds of no figure do, so the GPU-H LOST column says n/a, not 0.00; read directly, the loss it measured
    before is shown (a floor)."""
    import dataclasses
    from datetime import UTC, datetime, timedelta

    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_triage.config import Config
    from gpu_triage.export.collector import TriageCollector
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.sources.sim import SimulatedSource

    config = Config()
    source = SimulatedSource.from_schedule([("data_pipeline", 900)], gpus=2, seed=1,
                                           start=datetime.now(UTC) - timedelta(seconds=300))
    monitor = Monitor(source.host_info(), config, source.name)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot))
    one_at_a_time = threading.Lock()  # Prometheus and the direct read may scrape at once; the source is one sampler

    class Exporter(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with one_at_a_time:
                tick = source.sample()  # each scrape a tick whose GPU-Util answers NOT_SUPPORTED, as NVML reads it
                monitor.ingest(dataclasses.replace(tick, gpus=[dataclasses.replace(g, util_pct=None)
                                                               for g in tick.gpus]), source.status())
                body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    prom = None
    try:
        # Prometheus scrapes its targets some 5 s after it starts: the ticks are made meanwhile, and a scrape
        # that comes before them waits for them
        with one_at_a_time:
            prom, base = _start_prometheus(tmp_path, _scrape_config([address]))
            for _ in range(150):  # 5 minutes with GPU-Util: the window's verdict is data_pipeline
                monitor.ingest(source.sample(), source.status())
        fleet = Fleet([PrometheusTarget(base, timeout_s=10)], source="prometheus", interval_s=5)

        def judged(snap: object) -> bool:
            rows = [r for r in snap.rows if r.address == address]  # type: ignore[attr-defined]
            return bool(rows) and rows[0].lost_range == "over the last 24h" and rows[0].bottleneck == "data_pipeline"

        row = next(r for r in _wait("the blind host's row", fleet.once, judged).rows  # type: ignore[attr-defined]
                   if r.address == address)
        assert row.gpu_hours_lost is None and cells(row)["GPU-H LOST"] == "n/a"
        assert any("GPU-hours lost over the last 24h: n/a" in line for line in detail_lines(row))
        direct = ExporterTarget(address, timeout_s=5).fetch()[0]
        assert direct.gpu_hours_lost is not None and direct.gpu_hours_lost > 0  # measured before: its floor
    finally:
        if prom is not None:
            stop(prom)
        server.shutdown()
        server.server_close()


def test_a_prometheus_that_is_not_there_or_not_prometheus_is_one_line(capsys, hostile: str) -> None:
    assert main(["fleet", "--prometheus", f"http://{_closed_port()}", "--once"]) == 1
    captured = capsys.readouterr()
    assert "connection refused" in captured.err and len(captured.err.strip().splitlines()) == 1
    # an HTTP server that is not Prometheus (it answers the API's path with text)
    assert main(["fleet", "--prometheus", f"http://{hostile}", "--json"]) == 1
    captured = capsys.readouterr()
    assert "not JSON" in captured.err and json.loads(captured.out)["error"].endswith("is this the Prometheus "
                                                                                     "server (its HTTP API)?")


def test_a_stale_exporter_is_not_shown_as_current() -> None:
    """A served tick 10 minutes old (the exporter's sampler stopped): stale, with its age, not "ok"."""
    old = HOSTILE.replace("{now}", repr(time.time() - 600))

    class Old(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = old.encode("utf-8", "surrogateescape")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    gen = _serve(Old)
    address = next(gen)
    try:
        row = ExporterTarget(address, timeout_s=5).fetch()[0]
    finally:
        next(gen, None)
    assert row.state == STALE and "600 s old" in row.error and not row.has_bottleneck


def test_http_get_caps_before_reading_everything(hostile: str) -> None:
    with pytest.raises(FetchError, match="larger than 1 MiB"):
        http_get(f"http://{hostile}/huge", timeout_s=5, cap_bytes=1024 * 1024, accept="*/*")


def test_clean_leaves_no_control_characters() -> None:
    nasty = "a\x1b[2Jb\x9bc\u202ed\u200be\nf\tg" + "h" * 500
    out = safetext.clip(nasty)
    assert _drawable(out) and len(out) == safetext.CLIP and out.endswith("…")
    assert out.startswith("a␛[2Jb\ufffdc\ufffdd\ufffde␊f␉g")


# -- the screen (Pilot) -----------------------------------------------------------------------------------------


def _plain(widget: object) -> str:
    content = widget.content  # type: ignore[attr-defined]
    return content.plain if hasattr(content, "plain") else str(content)


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_screen_lists_hosts_in_order_and_enter_opens_one(pool, size: tuple[int, int]) -> None:
    from textual.widgets import DataTable

    from gpu_triage.ui.fleet_app import FleetApp, HostScreen

    dead = _closed_port()
    fleet = Fleet([ExporterTarget(a, timeout_s=5) for a in (*pool.values(), dead)], source="pool", interval_s=5)
    fleet.once()
    app = FleetApp(fleet, autostart=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.query_one(DataTable)
        assert _shown_order(table) == [dead, pool["single_card_busy"], pool["storage_io"], pool["healthy"]]
        titles = [c.label.plain for c in table.columns.values()]
        assert ("PATTERN" in titles) == (size[0] >= 110) and titles[:3] == ["HOST", "STATE", "BOTTLENECK"]
        first = [cell.plain for cell in table.get_row_at(2)]
        down = [cell.plain for cell in table.get_row_at(0)]
        assert first[1:3] == ["ok", "storage_io"] and re.fullmatch(r"\d/8", first[titles.index("BUSY")])
        assert down[:2] == [dead, "down"] and set(down[2:-1]) == {"—"}  # down, never 0 %
        assert _plain(app.query_one("#summary")).startswith("pool: 4 hosts, 3 need a look, 1 down or stale")
        assert "connection refused" in _plain(app.query_one("#selected"))  # the cursor starts on the first row
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, HostScreen) and app.screen.key == pool["single_card_busy"]
        detail = _plain(app.screen.query_one("#detail")).splitlines()
        assert any(line.startswith("verdict: single_card_busy / bottleneck placement") for line in detail)
        assert len([line for line in detail if re.match(r"^\s+\d+\s+\d+%", line)]) == 8
        assert all(len(line) <= size[0] for line in detail)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HostScreen)


async def test_the_screen_draws_hostile_labels_as_text_and_never_waits_for_the_network(hostile: str) -> None:
    """A host that hangs (30 s) while the refresher runs: the screen answers keys at once, and the hostile
    host's labels are drawn as the characters they are (markup shown, escape codes replaced)."""
    from textual.widgets import DataTable

    from gpu_triage.ui.fleet_app import FleetApp, HostScreen

    fleet = Fleet([ExporterTarget(f"http://{hostile}/hang", timeout_s=30),
                   ExporterTarget(f"http://{hostile}/metrics", timeout_s=5)], source="pool", interval_s=0.5)
    app = FleetApp(fleet)  # its own refresher thread
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(DataTable).row_count, "the answering host's row")
        table = app.query_one(DataTable)
        assert table.row_count == 1 and _Hostile.hanging == 1  # the hanging host is still being asked
        host = table.get_row_at(0)[0].plain
        assert "\x1b" not in host and host.startswith("\\u001b evil␛[2J␛]")  # cut to its column
        started = time.monotonic()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, HostScreen) and time.monotonic() - started < 2
        detail = _plain(app.screen.query_one("#detail"))
        assert "[bold]x[/bold]" in detail and "\x1b" not in detail and "owner: pod ml/train-␛[1mx" in detail
        _Hostile.release.set()


@pytest.mark.slow
def test_q_quits_at_once_while_a_host_hangs(hostile: str) -> None:
    """The real command on a terminal (a pty): a host hanging for 30 s holds neither the screen nor the exit."""
    import os
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, drawing on the pty
        os.environ.update(TERM="xterm-256color", COLUMNS="100", LINES="30")
        os.execv(sys.executable, [sys.executable, "-m", "gpu_triage", "fleet", "--exporters",
                                  f"{hostile}/hang", "--timeout", "30", "--refresh", "1"])
    out = b""

    def read_for(seconds: float) -> None:
        nonlocal out
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                out += chunk

    try:
        deadline = time.monotonic() + WAIT_S
        # the request hangs and the screen says so
        while (_Hostile.hanging < 1 or b"1 not answered yet" not in out) and time.monotonic() < deadline:
            read_for(0.05)
        assert _Hostile.hanging == 1, out[-2000:]
        asked = time.monotonic()
        os.write(fd, b"q")
        waited = 0.0
        status = None
        while waited < 10:
            read_for(0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            waited = time.monotonic() - asked
        assert status is not None and os.waitstatus_to_exitcode(status) == 0, out[-2000:]
        assert time.monotonic() - asked < 5 and _Hostile.hanging == 1  # quit while the request still hangs
        assert b"Traceback" not in out and b"1 not answered yet" in out
    finally:
        _Hostile.release.set()
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def _shown_order(table: object) -> list[str]:
    from textual.coordinate import Coordinate

    return [table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value  # type: ignore[attr-defined]
            for i in range(table.row_count)]  # type: ignore[attr-defined]


@pytest.mark.slow
async def test_a_new_round_reorders_updates_adds_and_removes_rows_and_the_cursor_follows_its_host() -> None:
    from textual.widgets import DataTable

    from gpu_triage.fleet_live.client import FleetSnapshot
    from gpu_triage.fleet_live.model import order_rows
    from gpu_triage.ui.fleet_app import FleetApp

    def host(name: str, util: float | None, bottleneck: str = "none", state: str = OK) -> HostRow:
        return HostRow(key=name, host=name, address=name, job="j", state=state, bottleneck=bottleneck,
                       pattern="steady_low", confidence=0.8, busy=8, total=8, util=util,
                       error="connection refused" if state == DOWN else None)

    first = order_rows([host("a", 0.9), host("b", 0.5), host("c", 0.2), host("d", 0.7)])
    fleet = Fleet([], source="t", interval_s=5)
    fleet.snapshot = FleetSnapshot(source="t", rows=first, updated=time.time())
    app = FleetApp(fleet, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(DataTable)
        assert _shown_order(table) == ["c", "b", "d", "a"]
        await pilot.press("down", "down")  # on d
        assert app.selected_key == "d"
        # next round: a got a bottleneck, b went down, c left the answer, e is new, d's util changed
        fleet.snapshot = FleetSnapshot(source="t", updated=time.time(), rows=order_rows(
            [host("a", 0.9, "data_pipeline"), host("b", None, state=DOWN), host("d", 0.1), host("e", 0.4)]))
        await wait_for(pilot, lambda: _shown_order(table) == ["b", "a", "d", "e"], "the screen's own poll")
        assert app.selected_key == "d" and table.cursor_row == 2  # the cursor stayed on its host
        assert [c.plain for c in table.get_row_at(2)][:2] == ["d", "ok"] and table.get_row_at(2)[6].plain == "10%"
        assert [c.plain for c in table.get_row_at(0)][1:3] == ["down", "—"]
        assert table.get_row_at(1)[2].plain == "data_pipeline"


async def test_a_prometheus_error_is_one_line_above_the_table_and_r_asks_again(hostile: str) -> None:
    """The answer of a server that is not Prometheus: one red line over the (empty) table; r starts a new
    round at once instead of after --refresh (60 s here)."""
    from gpu_triage.ui.fleet_app import FleetApp

    target = PrometheusTarget(f"http://{hostile}", timeout_s=5)
    fleet = Fleet([target], source="prometheus", interval_s=60)
    app = FleetApp(fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.shown.error, "the round's error")
        error = app.query_one("#error")
        assert error.display and _plain(error).endswith("the answer is not JSON: is this the Prometheus server "
                                                        "(its HTTP API)?")
        assert "\n" not in _plain(error) and app.shown.rows == ()
        first = fleet.snapshot
        await pilot.press("r")
        await wait_for(pilot, lambda: fleet.snapshot is not first, "a second round, long before the 60 s")


@pytest.mark.slow
async def test_the_detail_of_a_16_card_host_scrolls_on_a_short_terminal() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_triage.config import Config
    from gpu_triage.export.collector import TriageCollector
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.fleet_live.client import FleetSnapshot
    from gpu_triage.fleet_live.model import build_rows
    from gpu_triage.fleet_live.samples import HostData, parse_exposition
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.ui.fleet_app import FleetApp, HostScreen

    source = SimulatedSource("healthy", gpus=16, seed=0, interval_s=2.0)
    monitor = Monitor(source.host_info(), Config(), source.name)
    for _ in range(5):
        tick = source.sample()
        monitor.ingest(tick, source.status())
    registry = CollectorRegistry()
    registry.register(TriageCollector(lambda: monitor.snapshot))
    samples, _ = parse_exposition(generate_latest(registry).decode())
    fleet = Fleet([], source="t", interval_s=5)
    fleet.snapshot = FleetSnapshot(source="t", rows=build_rows(
        [HostData("big:9839", "big:9839", tick.ts.timestamp() + 1, samples=tuple(samples))]))
    app = FleetApp(fleet, autostart=False)
    async with app.run_test(size=(80, 16)) as pilot:  # 22 lines of detail (they fit 80x24 exactly)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, HostScreen)
        lines = _plain(app.screen.query_one("#detail")).splitlines()
        assert len([line for line in lines if re.match(r"^\s+\d+\s+\d+%", line)]) == 16
        scroll = app.screen.query_one("VerticalScroll")
        await wait_for(pilot, lambda: scroll.max_scroll_y > 0, "the detail's layout")
        await pilot.press("end")
        await pilot.pause()
        assert scroll.scroll_y == scroll.max_scroll_y  # the last card can be reached


def test_a_body_of_millions_of_tiny_series_is_cut_at_the_sample_cap() -> None:
    from gpu_triage.fleet_live.samples import MAX_SERIES_PER_HOST, parse_exposition

    body = "".join(f"a{i} 1\n" for i in range(500_000))  # 4.5 MB, under the size cap
    started = time.monotonic()
    samples, notes = parse_exposition(body)
    assert len(samples) == MAX_SERIES_PER_HOST
    assert notes == [f"more than {MAX_SERIES_PER_HOST} samples: the rest not read"]
    assert time.monotonic() - started < 10  # stopped early, not 500,000 parsed and then cut
    samples, notes = parse_exposition("not { the format\n" + body)  # the line-by-line path stops there too
    assert len(samples) == MAX_SERIES_PER_HOST and "more than" in notes[-1] and "1 unparsable line" in notes[0]
    assert time.monotonic() - started < 20


def test_exporter_addresses_as_written() -> None:
    from gpu_triage.fleet_live.client import exporter_url

    assert exporter_url("gpu01:9839") == "http://gpu01:9839/metrics"
    assert exporter_url("[::1]:9839") == "http://[::1]:9839/metrics"
    assert exporter_url("https://gpu01.example.org:443/custom") == "https://gpu01.example.org:443/custom"
    assert exporter_url(" 10.0.0.5:9839 ") == "http://10.0.0.5:9839/metrics"
    for bad, why in (("gpu01", "no port"), ("gpu01:0", "port 0"), ("ftp://gpu01:21", "http://"),
                     ("gpu01:98x", "not a number"), ("gpu\x1b01:9839", "control characters")):
        with pytest.raises(ValueError, match=why):
            exporter_url(bad)


def test_the_owner_label_wins_then_its_parts_in_a_fixed_order() -> None:
    from gpu_triage.fleet_live.model import owner_of

    assert owner_of({"gpu": "0", "user": "ana", "owner": "pod ml/train-1"}) == "pod ml/train-1"
    assert owner_of({"user": "ana", "slurm_job": "4711"}) == "4711"  # the job before its user
    assert owner_of({"owner_name": "ml/train-1", "owner_kind": "pod", "gpu": "0"}) == "pod ml/train-1"
    assert owner_of({"gpu": "0", "pid": "12", "name": "python", "job": "gpu-triage"}) is None  # job: the scrape job
    # the exporter's own pair, on its process series and gpu_triage_owner_info alike
    assert owner_of({"gpu": "0", "owner_kind": "slurm", "owner": "4711"}) == "slurm 4711"
    info = {"owner_kind": "pod", "owner": "ml/train-0", "user": "ana", "pod_name": "train-0", "pod_uid": "0e88"}
    assert owner_of(info) == "pod ml/train-0"
    assert owner_of({"gpu": "0", "owner_kind": "unknown", "owner": ""}) is None


def test_only_the_interactive_fleet_is_a_screen_command() -> None:
    """Its screen owns the terminal (no warnings on stderr over it); --once and --json print like any command."""
    from gpu_triage.cli import build_parser, on_screen

    parser = build_parser()
    assert on_screen(parser.parse_args(["fleet", "--exporters", "a:1"]))
    assert not on_screen(parser.parse_args(["fleet", "--exporters", "a:1", "--once"]))
    assert not on_screen(parser.parse_args(["fleet", "--exporters", "a:1", "--json"]))
    assert on_screen(parser.parse_args(["demo"])) and not on_screen(parser.parse_args(["export"]))


async def test_with_no_color_the_cursor_row_is_reversed(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR takes the cursor's background away: the selected host must still be told from the others."""
    from textual.widgets import DataTable

    from gpu_triage.fleet_live.client import FleetSnapshot
    from gpu_triage.ui.fleet_app import FleetApp

    monkeypatch.setenv("NO_COLOR", "1")
    rows = tuple(HostRow(key=k, host=k, address=k, job="", state=OK, bottleneck="none", util=u)
                 for k, u in (("a", 0.1), ("b", 0.5)))
    fleet = Fleet([], source="t", interval_s=5)
    fleet.snapshot = FleetSnapshot(source="t", rows=rows, updated=time.time())
    app = FleetApp(fleet, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one(DataTable)

        def reversed_line(y: int) -> bool:
            return any(seg.style is not None and seg.style.reverse for seg in table.render_line(y))

        assert reversed_line(1) and not reversed_line(2)  # line 0 is the header
        await pilot.press("down")
        await pilot.pause()
        assert reversed_line(2) and not reversed_line(1)


def test_confidence_is_a_word_in_the_table_and_the_detail_and_json_keeps_the_number() -> None:
    from gpu_triage.fleet_live.client import FleetSnapshot
    from gpu_triage.fleet_live.render import to_json

    rows = [HostRow(key=k, host=k, address=k, job="j", state=OK, bottleneck="data_pipeline", pattern="steady_low",
                    confidence=c, busy=8, total=8, util=0.3) for k, c in (("a", 0.85), ("b", 0.5), ("c", 0.3))]
    assert [cells(r)["CONF"] for r in rows] == ["likely", "possible", "unsure"]
    assert any("confidence likely" in line for line in detail_lines(rows[0]))
    doc = to_json(FleetSnapshot(source="t", rows=tuple(rows), updated=time.time()))
    assert [(h["confidence"], h["confidence_word"]) for h in doc["hosts"]] == [
        (0.85, "likely"), (0.5, "possible"), (0.3, "unsure")]
