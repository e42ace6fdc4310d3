"""The exporter's side of HTTP, apart from its loop (:mod:`gpu_triage.export.server`): the listening address,
a request's head parsed within bounds, the answer to it (auth, route, the page), and the page cache.

Request size: the request line and headers together are at most :data:`MAX_HEAD_BYTES` and
:data:`MAX_HEADERS` lines; past that the answer is 431 (414 for the request line alone). A body is never read.
"""

from __future__ import annotations

import errno
import gzip
import ipaddress
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from gpu_triage.errors import UserError
from gpu_triage.export import DEFAULT_HOST, DEFAULT_LISTEN, DEFAULT_PORT
from gpu_triage.export.webconfig import REALM, BasicAuth

log = logging.getLogger(__name__)

METRICS_PATHS = ("/metrics", "/metrics/")
MAX_HEAD_BYTES = 8192  # request line + headers; Prometheus sends ~300 bytes
MAX_HEADERS = 64
CACHE_VARIANTS = 8  # formats kept per tick: the version in an Accept header is the client's to choose
BACKLOG = socket.SOMAXCONN

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1). Port 0 picks a free one."""
    what = f"--listen/--metrics {text!r}"
    text = text.strip()
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise UserError(f"{what}: write an IPv6 address as [ADDRESS]:PORT, e.g. [::1]:{DEFAULT_PORT}")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
        if ":" in host:
            raise UserError(f"{what}: write an IPv6 address as [ADDRESS]:PORT, e.g. [::1]:{DEFAULT_PORT}")
    else:
        host, port_text = "", text
    try:
        port = int(port_text)
    except ValueError:
        raise UserError(f"{what}: the port must be a number, as in {DEFAULT_LISTEN}") from None
    if not 0 <= port <= 65535:
        raise UserError(f"{what}: the port must be 0 to 65535")
    return host or DEFAULT_HOST, port


def bind(listen: str, host: str, port: int) -> tuple[socket.socket, socket.AddressFamily]:
    """A non-blocking listening socket on ``host:port`` with a backlog that fits a burst of scrapers; a port in
    use or a bad address is one :class:`UserError` line (``listen`` as the user wrote it)."""
    family = socket.AF_INET
    try:
        if ipaddress.ip_address(host).version == 6:
            family = socket.AF_INET6
    except ValueError:
        pass  # a name (localhost): resolved by bind, IPv4
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart does not wait out TIME_WAIT
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except socket.gaierror:
        sock.close()
        raise UserError(
            f"cannot listen on {listen!r}: unknown host {host!r}; give an address of this machine"
        ) from None
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(
                f"cannot listen on {host}:{port}: the port is in use; pick another with --listen HOST:PORT"
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise UserError(
                f"cannot listen on {host}:{port}: permission denied (ports below 1024 need root)"
            ) from None
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; give an address of this machine"
        ) from None
    sock.setblocking(False)
    return sock, family


class BadRequest(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]


def parse_head(head: bytes) -> Request:
    """The request line and headers (without the blank line), or :class:`BadRequest` with the status."""
    lines = head.decode("latin-1").split("\n")
    request_line = lines[0].rstrip("\r")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, "a request line is METHOD PATH HTTP/1.x")
    method, target, _version = parts
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, f"more than {MAX_HEADERS} header lines")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        line = raw.rstrip("\r")
        name, colon, value = line.partition(":")
        value = value.strip(" \t")
        if not colon or not name or name != name.strip() or any(c < " " and c != "\t" for c in value):
            raise BadRequest(400, "a header line is NAME: VALUE, without control characters")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if target.startswith(("http://", "https://")):  # absolute form, as a proxy sends it
        target = urlsplit(target).path or "/"
    return Request(method, target.partition("?")[0], headers)


class Pages:
    """The page of each negotiated format (text or OpenMetrics, gzip or not), rendered once per ``generation``
    token (which changes when the metrics do: once per tick) and served from the cache until it changes.
    Without ``generation`` every scrape renders the registry."""

    def __init__(self, registry: CollectorRegistry, generation: Callable[[], object] | None) -> None:
        self.registry = registry
        self.generation = generation
        self._cache_of: object = None
        self._cache: dict[tuple[str, bool], bytes] = {}
        self.renders = 0  # pages rendered (the rest were served from the cache): for the benchmark

    def page(self, accept: str, accept_encoding: str) -> tuple[str, bool, bytes]:
        encoder, content_type = choose_encoder(accept)
        zipped = gzip_accepted(accept_encoding)
        key = (content_type, zipped)
        if self.generation is not None:
            current = self.generation()
            if current != self._cache_of:
                self._cache_of, self._cache = current, {}
            cached = self._cache.get(key)
            if cached is not None:
                return content_type, zipped, cached
        page = encoder(self.registry)
        if zipped:
            page = gzip.compress(page)
        self.renders += 1
        if self.generation is not None and len(self._cache) < CACHE_VARIANTS:
            self._cache[key] = page
        return content_type, zipped, page


def route(request: Request, auth: BasicAuth | None, pages: Pages) -> tuple[int, list[tuple[str, str]], bytes, bool]:
    """The answer to one parsed request: (status, headers, body, head only); auth before anything is routed."""
    if auth is not None:
        verdict = auth.check(request.headers.get("authorization", ""))
        if verdict == BasicAuth.BUSY:  # bcrypt's time budget spent (a flood of wrong passwords)
            status, headers, body, _ = plain(503, "too many password checks at once; try again shortly")
            return status, [*headers, ("Retry-After", "1")], body, False
        if verdict != BasicAuth.OK:
            status, headers, body, _ = plain(401, "Unauthorized")
            return status, [*headers, ("WWW-Authenticate", f'Basic realm="{REALM}"')], body, False
    if request.path not in METRICS_PATHS:
        return plain(404, "gpu-triage serves /metrics only")
    if request.method not in ("GET", "HEAD"):
        status, headers, body, _ = plain(405, "GET /metrics")
        return status, [*headers, ("Allow", "GET, HEAD")], body, False
    try:
        content_type, zipped, page = pages.page(
            request.headers.get("accept", ""), request.headers.get("accept-encoding", "")
        )
    except Exception:  # a collector's bug: this scrape fails, the next tick's may not
        log.exception("rendering /metrics failed")
        return plain(500, "rendering the metrics failed; the exporter's log says why")
    headers = [("Content-Type", content_type), ("Vary", "Accept, Accept-Encoding")]
    if zipped:
        headers.append(("Content-Encoding", "gzip"))
    return 200, headers, page, request.method == "HEAD"


def plain(status: int, text: str) -> tuple[int, list[tuple[str, str]], bytes, bool]:
    return status, [("Content-Type", "text/plain; charset=utf-8")], f"{text}\n".encode(), False
