"""One HTTP GET to another machine, bounded in bytes and in time, for the fleet view.

The time bound is one deadline for the whole exchange: the connection, the request, the status line, the
headers and the body. A socket timeout alone bounds each receive, and restarts with every byte: a peer that
sends a byte of its headers every few seconds would hold the request for as long as it liked (and with it one
of the view's workers). So every socket this module reads from is a :class:`_DeadlineSocket` (or its TLS
form), which sets its timeout to the time left before each send and receive, and fails once none is left.

Redirects are not followed (an exporter's answer could otherwise send the view to any address); where one is
met the error line names it. Any failure is a :class:`FetchError` with one clean line. While a worker turns an
answer into rows, the cyclic garbage collector is paused (:data:`COLLECTOR_PAUSED`).
"""

from __future__ import annotations

import functools
import gc
import http.client
import json
import math
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from gpu_triage import __version__
from gpu_triage.safetext import clip

CHUNK = 64 * 1024
USER_AGENT = f"gpu-triage-fleet/{__version__}"


class FetchError(Exception):
    """One clean line: what failed, where."""


class _CollectorPaused:
    """Python's cyclic garbage collector paused while any worker turns an answer into rows.

    The answer of a large fleet is millions of small objects (1,000 hosts: ~17 MiB of JSON), none of them in a
    cycle: reference counting frees them all. Their allocation sets the cyclic collector off again and again,
    and its passes over the whole heap hold the GIL, up to a second each on a busy 2-core box: the screen's
    thread waited behind them, so a key, or quitting, took seconds (py-spy: ``gc_collect_main``). Paused from
    the first worker in to the last one out, and resumed only if it was running before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._resume:
                gc.enable()


COLLECTOR_PAUSED = _CollectorPaused()


class _Deadline:
    """Sends and receives of a socket bounded by one deadline (``time.monotonic()``), not each by its own
    timeout."""

    deadline = math.inf

    def _arm(self) -> None:
        if self.deadline == math.inf:  # not given one (yet): the socket's own timeout stands
            return
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self.settimeout(left)  # type: ignore[attr-defined]

    def recv(self, *args: Any) -> Any:
        self._arm()
        return super().recv(*args)  # type: ignore[misc]

    def recv_into(self, *args: Any) -> Any:
        self._arm()
        return super().recv_into(*args)  # type: ignore[misc]

    def send(self, *args: Any) -> Any:
        self._arm()
        return super().send(*args)  # type: ignore[misc]

    def sendall(self, *args: Any) -> Any:
        self._arm()  # one call: CPython's sendall keeps one deadline of its timeout over all its sends
        return super().sendall(*args)  # type: ignore[misc]


class _DeadlineSocket(_Deadline, socket.socket):
    pass


class _DeadlineSSLSocket(_Deadline, ssl.SSLSocket):
    pass


def _connect(deadline: float, address: tuple[str, int], timeout: object = None, source: Any = None) -> socket.socket:
    """``socket.create_connection`` within the deadline, as a socket that keeps to it from then on. (The name
    lookup before it is the resolver's, and not bounded here.)"""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    raw = socket.create_connection(address, left, source)
    sock = _DeadlineSocket(raw.family, raw.type, raw.proto, fileno=raw.detach())
    sock.deadline = deadline
    sock._arm()  # the TLS handshake, if one follows, runs under this timeout: CPython keeps one deadline for it
    return sock


class _HTTP(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # http.client opens its socket through this attribute (HTTPS too, before wrapping it): the one seam
        # that gives every byte of the exchange, the proxy's CONNECT included, to a deadline socket
        self._create_connection = functools.partial(_connect, deadline)


class _HTTPS(http.client.HTTPSConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = functools.partial(_connect, deadline)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        assert isinstance(self.sock, _DeadlineSSLSocket)  # _tls_context() makes them
        self.sock.deadline = self._deadline


@functools.cache
def _tls_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()  # the system's CAs and hostname checks, as urllib's own default
    ctx.sslsocket_class = _DeadlineSSLSocket
    return ctx


class _Request(urllib.request.Request):
    deadline = math.inf


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: _Request) -> http.client.HTTPResponse:  # type: ignore[override]
        return self.do_open(functools.partial(_HTTP, deadline=req.deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: _Request) -> http.client.HTTPResponse:  # type: ignore[override]
        return self.do_open(functools.partial(_HTTPS, deadline=req.deadline), req, context=_tls_context())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, req: urllib.request.Request, fp: object, code: int, msg: str, headers: object, newurl: str
    ) -> None:
        raise FetchError(f"HTTP {code}: redirected to {clip(newurl, 80)}; give that address instead")


_OPENER = urllib.request.build_opener(_NoRedirect, _HTTPHandler, _HTTPSHandler)


def http_get(url: str, *, timeout_s: float, cap_bytes: int, accept: str, deadline: float | None = None) -> bytes:
    """The body of a GET, at most ``cap_bytes``, the whole exchange within ``timeout_s`` (or by ``deadline``,
    a ``time.monotonic()`` shared by several requests). Any failure is a :class:`FetchError` with one line
    (an HTTP error's body is read, capped, for Prometheus' own text)."""
    if deadline is None:
        deadline = time.monotonic() + timeout_s
    req = _Request(url, headers={"Accept": accept, "Accept-Encoding": "identity", "User-Agent": USER_AGENT})
    req.deadline = deadline
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise FetchError(f"the answer is {clip(encoding, 20)}-encoded although identity was asked for")
            return _read_capped(resp, cap_bytes, deadline, timeout_s)
    except urllib.error.HTTPError as err:
        try:
            body = _read_capped(err, min(cap_bytes, 1024 * 1024), deadline, timeout_s)
        except FetchError:
            body = b""
        raise FetchError(_http_error_line(err.code, err.reason, body)) from None
    except urllib.error.URLError as err:
        raise FetchError(_reason_line(err.reason, timeout_s)) from None
    except TimeoutError:
        raise FetchError(f"no answer within {timeout_s:g} s") from None
    except http.client.HTTPException as err:  # not an HTTP server (BadStatusLine, LineTooLong, IncompleteRead)
        raise FetchError(f"not an HTTP answer ({type(err).__name__}: {clip(err, 60)})") from None
    except ConnectionError as err:
        raise FetchError(_reason_line(err, timeout_s)) from None
    except OSError as err:
        raise FetchError(f"{type(err).__name__}: {clip(err.strerror or err, 80)}") from None


def _read_capped(resp: object, cap: int, deadline: float, timeout_s: float) -> bytes:
    parts: list[bytes] = []
    size = 0
    # read1: what one receive gives, so the deadline is looked at between receives. read(n) waits for n
    # bytes, and a server sending one byte a second would hold it for 18 hours of a 64 KiB chunk.
    read = getattr(resp, "read1", None) or resp.read  # type: ignore[attr-defined]
    slow = FetchError(f"the answer took longer than {timeout_s:g} s (a slow or endless body)")
    while True:
        if time.monotonic() > deadline:
            raise slow
        try:
            chunk = read(CHUNK)
        except TimeoutError:
            raise slow from None
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > cap:
            raise FetchError(f"the answer is larger than {cap // (1024 * 1024)} MiB: not read further")
        parts.append(chunk)


def _reason_line(reason: object, timeout_s: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    if isinstance(reason, socket.gaierror):
        return f"the name does not resolve ({clip(reason.strerror or reason, 60)})"
    if isinstance(reason, OSError) and reason.strerror:
        return clip(reason.strerror, 100)
    return clip(reason, 100)


def _http_error_line(code: int, reason: object, body: bytes) -> str:
    """Prometheus says what was wrong in a JSON body (bad_data, execution, timeout): that, in one line."""
    try:
        doc = json.loads(body.decode("utf-8", errors="replace")) if body else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("status") == "error":
        return f"HTTP {code}: {clip(doc.get('errorType', 'error'), 40)}: {clip(doc.get('error', ''))}"
    return f"HTTP {code} {clip(reason, 60)}"
