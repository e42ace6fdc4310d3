"""`export --web-config FILE`: real TLS handshakes on loopback (certificates made with openssl in the test),
basic auth against bcrypt hashes, client certificates, and every bad file one line before anything binds."""

from __future__ import annotations

import base64
import http.client
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.export import server as server_module
from gpu_triage.export.run import Exporter
from gpu_triage.sources.sim import SimulatedSource

bcrypt = pytest.importorskip("bcrypt", reason="pip install 'gpu-triage[web]'")
pytest.importorskip("yaml", reason="pip install 'gpu-triage[web]'")

from gpu_triage.export.webconfig import load_web_config  # noqa: E402
from tests.waits import wait_until  # noqa: E402


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by the CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test CA", cwd=d)  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return d


def _serve(web_yaml: str, tmp_path: Path) -> Iterator[Exporter]:
    path = tmp_path / "web.yml"
    path.write_text(web_yaml)
    web = load_web_config(str(path))
    source = SimulatedSource("healthy", gpus=1, seed=0)
    exporter = Exporter("127.0.0.1:0", Config(), web=web)
    monitor = exporter.attach(source)
    monitor.ingest(source.sample(), source.status())
    exporter.start()
    try:
        yield exporter
    finally:
        exporter.close()


def _client_ctx(pki: Path, *, cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    return ctx


def _get(url: str, ctx: ssl.SSLContext | None = None, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def test_tls_handshake_serves_the_metrics_and_plain_http_gets_nothing(pki: Path, tmp_path: Path) -> None:
    web = f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
    for exporter in _serve(web, tmp_path):
        url = exporter.server.url
        assert url.startswith("https://127.0.0.1:")
        status, body = _get(url, _client_ctx(pki))
        assert status == 200 and b"gpu_triage_gpu_utilization_ratio" in body
        with socket.create_connection(("127.0.0.1", exporter.server.port), timeout=5) as raw:
            raw.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            answer = raw.recv(65536)
        assert b"gpu_triage" not in answer  # no metrics in clear text over the TLS port
        # a client that does not trust the certificate: the handshake fails, the server keeps serving
        with pytest.raises(urllib.error.URLError):
            _get(url, ssl.create_default_context())
        assert _get(url, _client_ctx(pki))[0] == 200


def test_a_client_that_stalls_in_the_handshake_does_not_block_other_scrapes(pki: Path, tmp_path: Path) -> None:
    web = f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
    for exporter in _serve(web, tmp_path):
        with socket.create_connection(("127.0.0.1", exporter.server.port), timeout=5):  # connects, says nothing
            assert _get(exporter.server.url, _client_ctx(pki))[0] == 200


def test_basic_auth_asks_for_the_password_and_checks_the_bcrypt_hash(pki: Path, tmp_path: Path) -> None:
    web = (
        f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
        f"basic_auth_users:\n  prometheus: '{_hash('s3cret')}'\n"
    )
    for exporter in _serve(web, tmp_path):
        url, ctx = exporter.server.url, _client_ctx(pki)
        status, _ = _get(url, ctx)
        assert status == 401
        assert _get(url, ctx, ("prometheus", "wrong"))[0] == 401
        assert _get(url, ctx, ("someone", "s3cret"))[0] == 401
        for _ in range(2):  # the second time from the cache of pairs that passed
            status, body = _get(url, ctx, ("prometheus", "s3cret"))
            assert status == 200 and b"gpu_triage_ticks_total" in body
        assert _get(url, ctx, ("prometheus", "s3cret-not"))[0] == 401  # the cache holds no prefix match


def test_client_certificates_required_and_verified(pki: Path, tmp_path: Path) -> None:
    web = (
        f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki / 'ca.crt'}\n"
        "  min_version: TLS13\n"
    )
    for exporter in _serve(web, tmp_path):
        status, body = _get(exporter.server.url, _client_ctx(pki, cert=True))
        assert status == 200 and b"gpu_triage" in body
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            _get(exporter.server.url, _client_ctx(pki))  # TLS 1.3: refused after the handshake, on the read
        old = _client_ctx(pki, cert=True)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(urllib.error.URLError):
            _get(exporter.server.url, old)  # below min_version


def _tls_web(pki: Path) -> str:
    return f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"


def _closed_within(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the server closed ``sock`` (EOF or reset), None if still open after ``limit``."""
    t0 = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - t0 < limit:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


@pytest.mark.slow
def test_a_stalled_handshake_is_cut_at_the_request_deadline_and_holds_no_thread(
    monkeypatch: pytest.MonkeyPatch, pki: Path, tmp_path: Path
) -> None:
    """Clients that stop halfway through a ClientHello are closed at the request's deadline (the handshake
    counts in it), and meanwhile a scrape over TLS is answered at once, by the server's one thread."""
    monkeypatch.setattr(server_module, "REQUEST_DEADLINE_S", 1.0)
    for exporter in _serve(_tls_web(pki), tmp_path):
        threads = threading.active_count()
        stalled = [socket.create_connection(("127.0.0.1", exporter.server.port), timeout=5) for _ in range(20)]
        try:
            for sock in stalled:
                sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a record header, a bit of hello
            t0 = time.monotonic()
            assert _get(exporter.server.url, _client_ctx(pki))[0] == 200
            assert time.monotonic() - t0 < 0.9  # answered before the stalled ones' deadline
            assert threading.active_count() == threads
            closed = [_closed_within(sock, 5.0) for sock in stalled]
        finally:
            for sock in stalled:
                sock.close()
        assert all(c is not None and c < 3.0 for c in closed), closed


def test_a_request_larger_than_one_read_arrives_whole_over_tls(pki: Path, tmp_path: Path) -> None:
    """Headers of 7 KiB in one TLS record: OpenSSL decrypts the record whole, and what one read leaves in
    its buffer is invisible to select(), so the server must read it before waiting again."""
    for exporter in _serve(_tls_web(pki), tmp_path):
        conn = http.client.HTTPSConnection("127.0.0.1", exporter.server.port, timeout=5, context=_client_ctx(pki))
        try:
            conn.request("GET", "/metrics", headers={"X-Pad": "a" * 7000})
            resp = conn.getresponse()
            assert resp.status == 200 and b"gpu_triage" in resp.read()
        finally:
            conn.close()


def test_basic_auth_comes_before_the_path_and_the_method_and_bcrypt_runs_once(
    monkeypatch: pytest.MonkeyPatch, pki: Path, tmp_path: Path
) -> None:
    """Without the password every request is 401 with WWW-Authenticate (HEAD, another path, another method
    alike: nothing is learned); with it the server routes as ever. The pair that passed is not checked with
    bcrypt again: the server's one thread would stall every other scrape for each check."""
    checks: list[bytes] = []
    real = bcrypt.checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        checks.append(password)
        return bool(real(password, hashed))

    monkeypatch.setattr(bcrypt, "checkpw", counted)
    web = _tls_web(pki) + f"basic_auth_users:\n  prometheus: '{_hash('s3cret')}'\n"
    good = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()
    for exporter in _serve(web, tmp_path):
        checks.clear()  # the file's check of each hash when it was read
        port = exporter.server.port

        def ask(method: str, path: str, auth: str | None, port: int = port) -> http.client.HTTPResponse:
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=_client_ctx(pki))
            conn.request(method, path, headers={"Authorization": auth} if auth else {})
            resp = conn.getresponse()
            resp.read()
            conn.close()
            return resp

        for method, path in (("HEAD", "/metrics"), ("GET", "/"), ("POST", "/metrics")):
            resp = ask(method, path, None)
            assert resp.status == 401, (method, path)
            assert resp.getheader("WWW-Authenticate") == 'Basic realm="gpu-triage"'
        assert ask("GET", "/", good).status == 404
        assert ask("POST", "/metrics", good).status == 405
        assert ask("HEAD", "/metrics", good).status == 200
        for _ in range(3):
            assert ask("GET", "/metrics", good).status == 200
        assert checks == [b"s3cret"]


def _guess(url: str, stop: threading.Event, statuses: list[int]) -> None:
    """Wrong passwords, one request after another, until ``stop``."""
    while not stop.is_set():
        try:
            statuses.append(_get(url, auth=("prometheus", "guess"))[0])
        except OSError:
            statuses.append(0)


@pytest.mark.slow
def test_a_flood_of_wrong_passwords_does_not_stall_a_scraper_already_let_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """bcrypt at a real cost (0.25 s a check, as cost 12 takes) and twelve clients sending wrong passwords
    as fast as they are answered: the scraper whose pair passed is answered within the budget's burst and
    one check every time, and the flood is told 503 once the budget is spent."""
    from gpu_triage.export import webconfig

    real = bcrypt.checkpw

    def slow(password: bytes, hashed: bytes) -> bool:
        time.sleep(0.25)
        return bool(real(password, hashed))

    monkeypatch.setattr(webconfig, "BCRYPT_BURST_S", 0.5)
    web = f"basic_auth_users:\n  prometheus: '{_hash('s3cret')}'\n"
    for exporter in _serve(web, tmp_path):
        monkeypatch.setattr(bcrypt, "checkpw", slow)
        url = exporter.server.url
        assert _get(url, auth=("prometheus", "s3cret"))[0] == 200  # let in: its pair is known from now on
        stop = threading.Event()
        flood_status: list[int] = []
        threads = [threading.Thread(target=_guess, args=(url, stop, flood_status), daemon=True) for _ in range(12)]
        for t in threads:
            t.start()
        try:
            # the flood's first answers: the budget is spent
            wait_until(lambda seen=flood_status: len(seen) >= 12, "the flood's first answers")
            waits = []
            for _ in range(10):
                t0 = time.monotonic()
                assert _get(url, auth=("prometheus", "s3cret"))[0] == 200
                waits.append(time.monotonic() - t0)
                time.sleep(0.2)  # scrapes spread through the flood, as a scraper's are: the pacing under test
        finally:
            stop.set()
            for t in threads:
                t.join(15)
        assert max(waits) < 1.5, waits  # without the budget: twelve checks in a row, 3 s
        assert 503 in flood_status and 401 in flood_status and 200 not in flood_status


@pytest.mark.parametrize(
    "text,says",
    [
        ("tls_server_config: {cert_file: x}\n", "needs cert_file and key_file"),
        ("tls_server_config:\n  cert_file: /nope.crt\n  key_file: /nope.key\n", "is not a file"),
        ("tls_server_config: {cert_file: CERT, key_file: CERT}\n", "cannot load"),
        ("tls_server_config: {cert_file: CERT, key_file: KEY, cipher_suites: [x]}\n", "cipher_suites not supported"),
        ("tls_server_config: {cert_file: CERT, key_file: KEY, client_auth_type: RequireAnyClientCert}\n",
         "client_auth_type 'RequireAnyClientCert'"),
        ("tls_server_config: {cert_file: CERT, key_file: KEY, client_auth_type: RequireAndVerifyClientCert}\n",
         "needs client_ca_file"),
        ("tls_server_config: {cert_file: CERT, key_file: KEY, min_version: TLS9}\n", "min_version 'TLS9'"),
        ("basic_auth_users: {prometheus: plaintext}\n", "not a bcrypt hash"),
        ("basic_auth_users: {prometheus: '$2b$04$" + "x" * 53 + "'}\n", "its salt does not decode"),
        ("basic_auth_users: {'a:b': '$2b$04$" + "x" * 53 + "'}\n", "is not a user name"),
        ("http_server_config: {http2: false}\n", "unknown key(s) http_server_config"),
        ("tls_server_config: [\n", "not valid YAML"),
        ("tls_server_config: {cert_file: CERT, key_file: KEY, x: " + "9" * 5000 + "}\n", "not valid YAML"),
        ("a: " + "[" * 20000 + "\n", "not valid YAML"),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_a_bad_web_config_is_one_line_naming_the_key(pki: Path, tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text.replace("CERT", str(pki / "server.crt")).replace("KEY", str(pki / "server.key")))
    with pytest.raises(UserError) as err:
        load_web_config(str(path))
    message = str(err.value)
    assert says in message and str(path) in message and "\n" not in message


_STRING_KEYS = {  # every key whose value is a string, with the rest of a file that is otherwise good
    "cert_file": "tls_server_config: {cert_file: @V@, key_file: KEY}\n",
    "key_file": "tls_server_config: {cert_file: CERT, key_file: @V@}\n",
    "client_auth_type": "tls_server_config: {cert_file: CERT, key_file: KEY, client_auth_type: @V@}\n",
    "client_ca_file": "tls_server_config: {cert_file: CERT, key_file: KEY, "
    "client_auth_type: RequireAndVerifyClientCert, client_ca_file: @V@}\n",
    "min_version": "tls_server_config: {cert_file: CERT, key_file: KEY, min_version: @V@}\n",
    "max_version": "tls_server_config: {cert_file: CERT, key_file: KEY, max_version: @V@}\n",
    "basic_auth_users.prometheus": "basic_auth_users: {prometheus: @V@}\n",
}


@pytest.mark.parametrize("key", sorted(_STRING_KEYS))
@pytest.mark.parametrize("value", ["[a, b]", "{a: b}", '"\\e]52;c;aGk=\\a\\u202e' + "x" * 200_000 + '"'],
                         ids=["list", "map", "huge-escapes"])
def test_a_list_a_map_or_a_huge_string_where_a_string_belongs_is_one_short_line(
    pki: Path, tmp_path: Path, key: str, value: str
) -> None:
    """The huge string is in YAML's double quotes, whose \\e, \\a and \\u202e are ESC, BEL and a bidi override."""
    path = tmp_path / "web.yml"
    text = _STRING_KEYS[key].replace("CERT", str(pki / "server.crt")).replace("KEY", str(pki / "server.key"))
    path.write_text(text.replace("@V@", value))
    with pytest.raises(UserError) as err:
        load_web_config(str(path))
    message = str(err.value)
    assert key.split(".")[-1] in message and "\n" not in message, message
    assert not any(c in message for c in "\x1b\x07\u202e") and len(message) < 400 + len(str(pki))


def test_min_version_above_max_version_is_refused_at_start(pki: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Accepted, it would serve on a port where every handshake fails: the CLI runs on a thread of its own here,
    and still running at 30 s is that failure."""
    path = tmp_path / "web.yml"
    path.write_text(f"tls_server_config: {{cert_file: {pki / 'server.crt'}, key_file: {pki / 'server.key'}, "
                    "min_version: TLS13, max_version: TLS12}\n")
    rc: list[int] = []
    argv = ["export", "--source", "sim:healthy", "--listen", "127.0.0.1:0", "--web-config", str(path)]
    runner = threading.Thread(target=lambda: rc.append(main(argv)), daemon=True)
    runner.start()
    runner.join(30)
    err = capsys.readouterr().err
    assert not runner.is_alive(), "export started serving with min_version above max_version"
    assert rc == [2], err
    assert "min_version TLS13 is above max_version TLS12" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1


def test_export_with_a_bad_web_config_exits_2_before_binding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The port is held by another socket: had export bound first, it would say "the port is in use"."""
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users: {prometheus: plaintext}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(["export", "--source", "sim:healthy", "--listen", f"127.0.0.1:{port}", "--web-config", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a bcrypt hash" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1


def test_relative_file_names_are_relative_to_the_web_config(pki: Path, tmp_path: Path) -> None:
    shutil.copy(pki / "server.crt", tmp_path / "tls.crt")
    shutil.copy(pki / "server.key", tmp_path / "tls.key")
    (tmp_path / "web.yml").write_text("tls_server_config: {cert_file: tls.crt, key_file: tls.key}\n")
    assert load_web_config(str(tmp_path / "web.yml")).tls


@pytest.mark.slow
def test_a_real_prometheus_scrapes_over_tls_with_basic_auth(pki: Path, tmp_path: Path) -> None:
    """Debian's Prometheus with scheme https, our CA and the password: up is 1 and the metrics arrive; a
    second job with a wrong password reads up 0 (the server said 401)."""
    import json
    import time

    from promtools import require

    binary = require("prometheus")
    web = (
        f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
        f"basic_auth_users:\n  prometheus: '{_hash('s3cret')}'\n"
    )
    for exporter in _serve(web, tmp_path):
        target = f"127.0.0.1:{exporter.server.port}"
        jobs = ""
        for job, password in (("good", "s3cret"), ("bad", "nope")):
            jobs += (
                f"  - job_name: {job}\n    scheme: https\n    tls_config: {{ca_file: '{pki / 'ca.crt'}'}}\n"
                f"    basic_auth: {{username: prometheus, password: {password}}}\n"
                f"    static_configs: [{{targets: ['{target}']}}]\n"
            )
        config = tmp_path / "prometheus.yml"
        config.write_text("global: {scrape_interval: 500ms, scrape_timeout: 500ms}\nscrape_configs:\n" + jobs)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            ups: dict[str, str] = {}
            while time.monotonic() < deadline and set(ups) != {"good", "bad"}:
                time.sleep(0.2)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query=up", timeout=5) as r:
                        result = json.load(r)["data"]["result"]
                except (urllib.error.URLError, OSError):
                    continue
                ups = {s["metric"]["job"]: s["value"][1] for s in result}
            assert ups == {"good": "1", "bad": "0"}, ups
            query = "http://127.0.0.1:" + str(port) + "/api/v1/query?query=gpu_triage_ticks_total"
            with urllib.request.urlopen(query, timeout=5) as r:
                assert json.load(r)["data"]["result"]
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
