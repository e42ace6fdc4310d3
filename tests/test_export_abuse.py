"""The exporter under abuse, on loopback with real sockets: slow clients, oversized requests, a burst of
scrapers, a stop with clients attached. Every client here is a real socket to a server the test started;
every loop is bounded by time or count."""

from __future__ import annotations

import gzip
import http.client
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gpu_triage.export import server as server_module
from gpu_triage.export.collector import TriageCollector
from gpu_triage.export.protocol import MAX_HEAD_BYTES, MAX_HEADERS
from gpu_triage.export.server import MetricsServer
from test_export import fed, registry_of
from tests.waits import wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    monitor, _, _ = fed("healthy", 2)
    srv = MetricsServer("127.0.0.1:0", registry_of(monitor), generation=lambda: monitor.snapshot.ticks)
    srv.start()
    yield srv
    srv.close()


def _threads(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _status(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    assert m, field
    return int(m.group(1)) * 1024


def _request(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    """Send ``raw`` and read the whole answer (the server closes after one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the rest was sent: the answer is still there
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def _status_code(answer: bytes) -> int:
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", answer)
    assert m, answer[:200]
    return int(m.group(1))


def _slow_clients(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that each sent the start of a request and then nothing."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        socks.append(sock)
    return socks


def _timed_get(port: int) -> tuple[int, float, bytes]:
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, time.monotonic() - t0, body
    finally:
        conn.close()


def test_slow_clients_take_no_thread_and_a_scrape_still_answers(server: MetricsServer) -> None:
    assert _timed_get(server.port)[0] == 200
    before = _threads()
    slow = _slow_clients(server.port, 300)
    try:
        # a scrape queued behind the 300 is answered only once they are accepted: whatever the server would
        # start for them has started by then
        status, took, body = _timed_get(server.port)
        assert _threads() <= before  # one loop thread, already counted in `before`
        assert status == 200 and b"gpu_triage_ticks_total" in body
        assert took < 2.0
    finally:
        for sock in slow:
            sock.close()


def test_a_flood_past_the_connection_cap_does_not_lock_a_scrape_out(
    monkeypatch: pytest.MonkeyPatch, server: MetricsServer
) -> None:
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 20)
    slow = _slow_clients(server.port, 60)
    try:
        status, took, _ = _timed_get(server.port)
        assert status == 200 and took < 2.0
        # the oldest were closed to make room
        wait_until(lambda: sum(1 for s in slow if _is_open(s)) <= 20, "the oldest connections closed")
    finally:
        for sock in slow:
            sock.close()


def _is_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


@pytest.mark.slow
def test_the_deadline_is_per_request_not_per_read(monkeypatch: pytest.MonkeyPatch, server: MetricsServer) -> None:
    """A client that sends a header line every 0.1 s is cut at the request's deadline, not kept forever."""
    monkeypatch.setattr(server_module, "REQUEST_DEADLINE_S", 0.5)
    t0 = time.monotonic()  # before the connection: the server's deadline cannot start earlier
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    closed_after = None
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        for i in range(80):  # up to 8 s of drip, far past the 0.5 s deadline
            try:
                sock.sendall(f"X-Drip-{i}: {i}\r\n".encode())
            except OSError:
                closed_after = time.monotonic() - t0
                break
            if not _is_open(sock):
                closed_after = time.monotonic() - t0
                break
            time.sleep(0.1)  # the client under test trickles its head: a header line every 0.1 s
    finally:
        sock.close()
    assert closed_after is not None, "the drip-feeding client was never cut"
    assert 0.4 <= closed_after < 3.0


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n", 431),
        (b"GET /metrics?" + b"a" * (MAX_HEAD_BYTES + 10) + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 99 * 65536 + b"\r\n\r\n", 431),  # 6.5 MB of one header
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nAccept: text/plain; version=1.0.0\rX-Injected: 1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n", 405),
        (b"GET /metrics HTTP/1.1\n\n", 200),  # bare newlines, as some tools send
        (b"GET http://127.0.0.1/metrics?x=1 HTTP/1.1\r\n\r\n", 200),  # absolute form
    ],
    ids=["big-header", "many-headers", "long-line", "6.5MB-header", "garbage", "http2", "no-colon",
         "bare-cr", "not-metrics", "delete", "bare-newlines", "absolute-form"],
)
def test_bad_requests_get_one_clear_status(server: MetricsServer, raw: bytes, status: int) -> None:
    assert _status_code(_request(server.port, raw)) == status


def test_head_answers_the_headers_of_get_without_a_body(server: MetricsServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("HEAD", "/metrics")
    head = conn.getresponse()
    assert head.status == 200 and head.read() == b""
    conn.close()
    status, _, body = _timed_get(server.port)
    assert status == 200
    assert int(head.getheader("Content-Length") or -1) == len(body)
    assert head.getheader("Content-Type", "").startswith("text/plain")
    raw = _request(server.port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert raw.endswith(b"\r\n\r\n")  # nothing after the headers


def _get(port: int, headers: dict[str, str]) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/metrics", headers=headers)
    resp = conn.getresponse()
    resp.body = resp.read()  # type: ignore[attr-defined]
    conn.close()
    return resp


def test_the_page_is_rendered_once_per_tick_and_format() -> None:
    """Twenty scrapes of one tick cost one render per format; the next tick renders again."""
    calls: list[int] = []
    monitor, source, _ = fed("healthy", 2)

    class Counting:
        def collect(self):  # an outside collector in the registry, counting how often it is walked
            calls.append(1)
            yield from TriageCollector(lambda: monitor.snapshot).collect()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Counting())
    srv = MetricsServer("127.0.0.1:0", registry, generation=lambda: monitor.snapshot.ticks)
    srv.start()
    try:
        text = [_get(srv.port, {}) for _ in range(20)]
        assert len(calls) == 1
        assert len({r.body for r in text}) == 1  # type: ignore[attr-defined]
        zipped = _get(srv.port, {"Accept-Encoding": "gzip"})
        assert zipped.getheader("Content-Encoding") == "gzip"
        assert gzip.decompress(zipped.body) == text[0].body  # type: ignore[attr-defined]
        om = [_get(srv.port, {"Accept": "application/openmetrics-text; version=1.0.0"}) for _ in range(5)]
        assert om[0].getheader("Content-Type", "").startswith("application/openmetrics-text")
        assert om[0].body.rstrip().endswith(b"# EOF")  # type: ignore[attr-defined]
        assert len(calls) == 3  # text, gzip, OpenMetrics: once each
        monitor.ingest(source.sample(), source.status())
        after = _get(srv.port, {})
        assert len(calls) == 4 and after.body != text[0].body  # type: ignore[attr-defined]
        fams = {f.name: f for f in text_string_to_metric_families(after.body.decode())}  # type: ignore[attr-defined]
        assert fams["gpu_triage_ticks"].samples[0].value == 3
    finally:
        srv.close()


def test_fifty_concurrent_scrapers_all_succeed(server: MetricsServer) -> None:
    barrier = threading.Barrier(50)
    results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def scrape() -> None:
        barrier.wait(10)
        status, took, _ = _timed_get(server.port)
        with lock:
            results.append((status, took))

    threads = [threading.Thread(target=scrape) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [s for s, _ in results] == [200] * 50


def test_every_interface_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry(auto_describe=False)
    with caplog.at_level(logging.WARNING, logger="gpu_triage.export.server"):
        local = MetricsServer("127.0.0.1:0", registry)
        local.close()
        assert not caplog.records
        for listen in ("0:0", "0.0.0.0:0"):
            wide = MetricsServer(listen, registry)
            wide.close()
            assert wide.every_interface
        if socket.has_ipv6:
            try:
                MetricsServer("[::]:0", registry).close()
            except Exception:  # noqa: BLE001 - a kernel without IPv6: the IPv4 cases above stand
                pass
    said = [r.getMessage() for r in caplog.records]
    assert said and all("every interface" in m and "127.0.0.1" in m for m in said)
    assert len(said) in (2, 3)  # once per server


# -- the daemon, as a subprocess ----------------------------------------------------------------------


@pytest.mark.slow
def test_export_on_every_interface_says_so_once_on_stderr() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "export", "--listen", "0:0", "--source", "sim:healthy", "--gpus", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert re.search(r"on http://0\.0\.0\.0:\d+/metrics", line), line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert err.count("every interface") == 1 and "--listen 127.0.0.1:" in err


def _start_export(*extra: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "export", "--listen", "127.0.0.1:0", "--interval", "0.1", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"on http://127\.0\.0\.1:(\d+)/metrics", line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    raise AssertionError(f"export never said where it serves: {proc.communicate()}")


def _ticks(port: int) -> float:
    status, _, body = _timed_get(port)
    assert status == 200
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name == "gpu_triage_ticks":
            return fam.samples[0].value
    return 0.0


def _wait_ticks(port: int, n: int) -> None:
    deadline = time.monotonic() + 60
    while _ticks(port) < n:
        assert time.monotonic() < deadline, "no ticks"
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.slow
def test_sigterm_with_slow_clients_stops_promptly_and_the_recording_is_parquet(tmp_path: Path) -> None:
    proc, port = _start_export("--source", "sim:healthy", "--gpus", "1", "--record", str(tmp_path / "ds"))
    dripping, dripped = threading.Event(), threading.Event()
    slow: list[socket.socket] = []
    try:
        _wait_ticks(port, 3)
        slow = _slow_clients(port, 20)

        def drip() -> None:  # a header line every 0.5 s per client, the first at once, for at most 30 s
            for i in range(60):
                for sock in slow:
                    try:
                        sock.sendall(f"X-{i}: {i}\r\n".encode())
                    except OSError:
                        pass
                dripped.set()
                if dripping.wait(0.5):
                    return

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        assert dripped.wait(30), "the slow clients never sent a header line"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        dripping.set()
        for sock in slow:
            sock.close()
        _stop(proc)
    assert proc.returncode == 0, err
    # the server's part is at most its 2 s grace (nothing is owed to a client still sending its request);
    # the rest is the sampler's stop and the Parquet conversion (a child process: ~1 s, more on a loaded box)
    assert took < 10.0, f"SIGTERM took {took:.1f} s with slow clients attached"
    assert "stopped (SIGTERM)" in out and "Traceback" not in err
    assert list((tmp_path / "ds").rglob("*.parquet"))
    assert not list((tmp_path / "ds").rglob("*.partial.arrows"))


@pytest.fixture(scope="module")
def daemon() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """One real daemon for the tests that abuse it and then check it still answers, and stays small."""
    proc, port = _start_export("--source", "sim:healthy", "--gpus", "1")
    try:
        yield proc, port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        finally:
            _stop(proc)


@pytest.mark.slow
def test_a_burst_waits_in_the_backlog_and_is_answered(daemon: tuple[subprocess.Popen[str], int]) -> None:
    """50 clients connect while the daemon cannot accept (SIGSTOP): the kernel's queue must hold them all."""
    proc, port = daemon
    socks: list[socket.socket] = []
    try:
        _wait_ticks(port, 1)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            failed = 0
            for _ in range(50):
                try:
                    # the kernel completes the handshake for a connection the backlog holds: at once, even
                    # on a loaded box; one past it waits for a SYN retry (1 s, then 3 s) and times out
                    sock = socket.create_connection(("127.0.0.1", port), timeout=2.0)
                except OSError:
                    failed += 1
                    continue
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                socks.append(sock)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert failed == 0, f"{failed} of 50 connections overflowed the listen backlog"
        answers = []
        for sock in socks:
            sock.settimeout(10)
            chunks = []
            while data := sock.recv(65536):
                chunks.append(data)
            answers.append(_status_code(b"".join(chunks)))
        assert answers == [200] * 50
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.slow
def test_huge_headers_from_many_clients_keep_memory_flat(daemon: tuple[subprocess.Popen[str], int]) -> None:
    """40 clients each sending 99 headers of 65,000 bytes (6.4 MB a request, each line under http.server's
    64 KiB limit): the daemon's peak RSS stays flat."""
    proc, port = daemon
    _wait_ticks(port, 2)
    # the daemon is shared with the module's other tests: its peak is reset to its size now (clear_refs 5), so
    # that an earlier test's peak cannot hide this one's growth
    Path(f"/proc/{proc.pid}/clear_refs").write_text("5")
    before = _status(proc.pid, "VmHWM")
    line = b"X-Big: " + b"a" * 65000 + b"\r\n"

    def abuse() -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"GET /metrics HTTP/1.1\r\n")
                for _ in range(99):
                    sock.sendall(line)
                sock.sendall(b"\r\n")
                sock.recv(100)
        except OSError:
            pass  # cut by the server: what it should do

    clients = [threading.Thread(target=abuse) for _ in range(40)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(60)
    assert _timed_get(port)[0] == 200
    grown = _status(proc.pid, "VmHWM") - before
    threads = _threads(proc.pid)
    assert grown < 32 << 20, f"peak RSS grew {grown >> 20} MB"
    assert threads < 10


# -- export --record on a disk that fills up ----------------------------------------------------------


def _gauge(port: int, name: str) -> float | None:
    status, _, body = _timed_get(port)
    assert status == 200
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name == name:
            return fam.samples[0].value
    return None


def _wait_gauge(port: int, name: str, value: float, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while _gauge(port, name) != value:
        assert time.monotonic() < deadline, f"{name} never became {value}"
        time.sleep(0.05)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MB filesystem (tmpfs), so that ENOSPC comes from the kernel."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path: Path) -> None:
    chunk = b"\0" * (64 << 10)
    with open(path, "wb", buffering=0) as f:
        for _ in range(1000):  # 64 MB at most: far past the 8 MB filesystem
            try:
                f.write(chunk)
            except OSError:
                break
        for _ in range(64):  # the last few kilobytes too
            try:
                f.write(b"\0" * 1024)
            except OSError:
                break


@pytest.mark.slow
def test_a_full_disk_stops_the_recording_until_space_returns(small_disk: Path) -> None:
    dataset = small_disk / "ds"
    proc, port = _start_export("--source", "sim:healthy", "--gpus", "1", "--record", str(dataset))
    try:
        _wait_ticks(port, 3)
        assert _gauge(port, "gpu_triage_recording_up") == 1
        _fill(small_disk / "filler")
        _wait_gauge(port, "gpu_triage_recording_up", 0)
        ticks = _ticks(port)
        _wait_ticks(port, ticks + 3)  # a few retries fail while the disk stays full; the metrics go on
        assert _gauge(port, "gpu_triage_recording_up") == 0
        (small_disk / "filler").unlink()
        _wait_gauge(port, "gpu_triage_recording_up", 1)
        resumed_at = _ticks(port)
        _wait_ticks(port, resumed_at + 3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode == 0, err
    assert err.count("recording stopped") == 1 and err.count("recording resumed") == 1, err
    assert "the disk is full" in err, err
    from gpu_triage.trace.reader import open_trace

    finished = list(dataset.rglob("*.parquet"))
    assert finished, err  # the file opened after the disk came back, finished at the stop
    assert sum(open_trace(p).n for p in finished) >= 3
    # the file the disk filled up in: its ticks kept, Parquet if it could still be written, else its stream
    # (said on stderr with the `recover` command); the failed retries left nothing
    streams = list(dataset.rglob("*.partial.arrows"))
    assert len(streams) <= 1
    for stream in streams:
        assert f"gpu-triage recover {stream}" in err


def test_recording_up_is_absent_without_a_recording() -> None:
    from gpu_triage.config import Config
    from gpu_triage.export.run import Exporter
    from gpu_triage.sources.sim import SimulatedSource

    for recording in (None, True, False):
        exporter = Exporter("127.0.0.1:0", Config())
        source = SimulatedSource("healthy", gpus=1, seed=0)
        exporter.attach(source).ingest(source.sample(), source.status())
        if recording is not None:
            exporter.report_recording(lambda up=recording: up)
        exporter.start()
        try:
            got = _gauge(exporter.server.port, "gpu_triage_recording_up")
        finally:
            exporter.close()
        assert got == (None if recording is None else float(recording))


def _backlog(port: int) -> int | None:
    """Connections waiting in the accept queue of the socket listening on ``port`` (/proc/net/tcp's
    rx_queue of a LISTEN socket); None when no socket listens there."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":
            return int(fields[4].split(":")[1], 16)
    return None


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
def test_out_of_descriptors_the_server_neither_spins_nor_stops_answering() -> None:
    """With RLIMIT_NOFILE at 64, 150 idle clients exhaust the daemon's descriptors: accept() fails with
    EMFILE while clients wait in the backlog, which keeps the socket readable. The loop must not spin on it,
    and a scrape must still get through (the oldest connection is closed to make room)."""
    import resource

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "export", "--listen", "127.0.0.1:0", "--interval", "0.5",
         "--source", "sim:healthy", "--gpus", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=low_limit,
    )
    idle: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        m = re.search(r"on http://127\.0\.0\.1:(\d+)/metrics", proc.stdout.readline())
        assert m
        port = int(m.group(1))
        errors: list[str] = []

        def read_errors() -> None:  # the daemon's stderr, a line at a time, as it comes
            assert proc.stderr is not None
            for line in proc.stderr:
                errors.append(line)

        reader = threading.Thread(target=read_errors, daemon=True)
        reader.start()
        _wait_ticks(port, 1)
        for _ in range(150):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
            idle.append(sock)
        # the burst is over once the daemon has run out of descriptors and its backlog is empty
        wait_until(lambda: "could not accept a scrape" in "".join(errors), "the daemon out of descriptors")
        wait_until(lambda: _backlog(port) == 0, "every waiting client accepted or closed")
        cpu0 = _cpu_s(proc.pid)
        time.sleep(1.0)  # the idle time under test: what the daemon spends in it
        spent = _cpu_s(proc.pid) - cpu0
        status, took, _ = _timed_get(port)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(10)
        err = "".join(errors)
    finally:
        for sock in idle:
            sock.close()
        _stop(proc)
    # a quarter of a core: a spinning daemon takes what the box gives it, a whole core on a quiet one, half or more
    # with two test workers on two cores; asleep, it spends under 10 ms on its two ticks
    assert spent < 0.25, f"the daemon used {spent:.2f} CPU s in 1 s with its descriptors exhausted"
    assert status == 200 and took < 3.0
    assert err.count("could not accept a scrape") == 1, err  # said once, not once per failure


def test_a_client_that_half_closes_after_its_request_gets_the_whole_answer(server: MetricsServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)  # what `nc -N` and some probes do
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    answer = b"".join(chunks)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert _status_code(answer) == 200
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    assert len(body) == length and b"gpu_triage_ticks_total" in body
