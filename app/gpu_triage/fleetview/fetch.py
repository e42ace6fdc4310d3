"""The fleet view's one way to read another machine: a bounded HTTP GET, and the collector paused while an
answer becomes rows.

Every byte comes from another machine: a body past its cap is an error, not a memory spike; the request has a
timeout and the whole read a deadline (a server dripping one byte a second is cut); redirects are not followed
(an exporter's answer could otherwise send the view to any address). Every failure is one clean line.
"""

from __future__ import annotations

import gc
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request

from gpu_triage import __version__
from gpu_triage.fleetview.text import clean

CHUNK = 64 * 1024
USER_AGENT = f"gpu-triage-fleet/{__version__}"


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


class FetchError(Exception):
    """One clean line: what failed, where."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, req: urllib.request.Request, fp: object, code: int, msg: str, headers: object, newurl: str
    ) -> None:
        raise FetchError(f"HTTP {code}: redirected to {clean(newurl, 80)}; give that address instead")


_OPENER = urllib.request.build_opener(_NoRedirect)


def http_get(url: str, *, timeout_s: float, cap_bytes: int, accept: str) -> bytes:
    """The body of a GET, at most ``cap_bytes``, within about ``timeout_s`` in all. Any failure is a
    :class:`FetchError` with one line (an HTTP error's body is read, capped, for Prometheus' own text)."""
    deadline = time.monotonic() + timeout_s
    req = urllib.request.Request(
        url, headers={"Accept": accept, "Accept-Encoding": "identity", "User-Agent": USER_AGENT}
    )
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise FetchError(f"the answer is {clean(encoding, 20)}-encoded although identity was asked for")
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
        raise FetchError(f"not an HTTP answer ({type(err).__name__}: {clean(err, 60)})") from None
    except ConnectionError as err:
        raise FetchError(_reason_line(err, timeout_s)) from None
    except OSError as err:
        raise FetchError(f"{type(err).__name__}: {clean(err.strerror or err, 80)}") from None


def _read_capped(resp: object, cap: int, deadline: float, timeout_s: float) -> bytes:
    parts: list[bytes] = []
    size = 0
    # read1: what one receive gives, so the deadline is looked at between receives. read(n) waits for n
    # bytes, and a server sending one byte a second would hold it for 18 hours of a 64 KiB chunk.
    read = getattr(resp, "read1", None) or resp.read  # type: ignore[attr-defined]
    while True:
        if time.monotonic() > deadline:
            raise FetchError(f"the answer took longer than {timeout_s:g} s (a slow or endless body)")
        chunk = read(CHUNK)
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
        return f"the name does not resolve ({clean(reason.strerror or reason, 60)})"
    if isinstance(reason, OSError) and reason.strerror:
        return clean(reason.strerror, 100)
    return clean(reason, 100)


def _http_error_line(code: int, reason: object, body: bytes) -> str:
    """Prometheus says what was wrong in a JSON body (bad_data, execution, timeout): that, in one line."""
    try:
        doc = json.loads(body.decode("utf-8", errors="replace")) if body else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("status") == "error":
        return f"HTTP {code}: {clean(doc.get('errorType', 'error'), 40)}: {clean(doc.get('error', ''))}"
    return f"HTTP {code} {clean(reason, 60)}"
