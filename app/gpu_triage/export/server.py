"""``/metrics`` over HTTP, and nothing else, through prometheus_client's WSGI app.

The listening socket is bound when :class:`MetricsServer` is made, so a port in use or a bad address is
one :class:`UserError` line before anything else starts. Each scrape runs on its own thread; on
:meth:`MetricsServer.close` the server stops accepting and *waits for the scrapes in flight* (non-daemon
request threads), so a scrape during shutdown gets a whole answer or a refused connection, never half a
page. A client that stalls is cut after :data:`REQUEST_TIMEOUT_S`.

The accept loop sleeps in one select() on the listening socket and a wake-up pipe: no timeout, so an idle
daemon's server thread never wakes (socketserver's serve_forever polls its shutdown flag every
poll_interval instead), and close() is still prompt: it writes one byte to the pipe.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from gpu_triage.errors import UserError
from gpu_triage.export import DEFAULT_HOST, DEFAULT_LISTEN, DEFAULT_PORT
from gpu_triage.export.webconfig import WebConfig

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
METRICS_PATHS = ("/metrics", "/metrics/")


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


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def _server_class(family: int) -> type[WSGIServer]:
    class _Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = False  # close() waits for scrapes in flight: a clean answer or none
        block_on_close = True

    return _Server


def metrics_only(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Wrap the metrics app: ``GET``/``HEAD /metrics`` only; 404 or 405 for anything else."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") not in METRICS_PATHS:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"gpu-triage serves /metrics only\n"]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")])
            return [b"GET /metrics\n"]
        return app(environ, start_response)

    return wsgi


class MetricsServer:
    """Bound at construction; :meth:`start` serves on a thread; :meth:`close` is idempotent."""

    def __init__(self, listen: str, registry: CollectorRegistry, *, web: WebConfig | None = None) -> None:
        host, port = parse_listen(listen)
        family = socket.AF_INET
        try:
            if ipaddress.ip_address(host).version == 6:
                family = socket.AF_INET6
        except ValueError:
            pass  # a name (localhost): resolved by bind, IPv4
        try:
            app = metrics_only(make_wsgi_app(registry))
            self._httpd = make_server(
                host, port, web.wrap(app) if web is not None else app, _server_class(family), _QuietHandler
            )
        except socket.gaierror:
            raise UserError(
                f"cannot listen on {listen!r}: unknown host {host!r}; give an address of this machine"
            ) from None
        except OSError as exc:
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
        if web is not None and web.context is not None:
            # the handshake happens on the scrape's own thread (on its first read, under the handler's
            # timeout), not in accept(): a client that stalls mid-handshake must not hold the accept loop
            self._httpd.socket = web.context.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._scheme = "https" if web is not None and web.tls else "http"
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1  # the pipe close() wakes the accept loop through
        self._closed = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self._scheme}://{host}:{self.port}/metrics"

    def start(self) -> None:
        if self._thread is None:
            self._wake_r, self._wake_w = os.pipe()
            self._thread = threading.Thread(target=self._serve, name="gpu-triage-metrics", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        """Accept until close() writes to the wake-up pipe; each scrape is handled on its own thread."""
        httpd = self._httpd
        with selectors.DefaultSelector() as selector:
            selector.register(httpd.socket, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_r in ready:
                    return
                try:
                    request, client = httpd.get_request()
                except OSError:
                    continue  # the client gave up before we accepted
                if not httpd.verify_request(request, client):
                    httpd.shutdown_request(request)
                    continue
                try:
                    httpd.process_request(request, client)  # a thread per scrape (ThreadingMixIn)
                except Exception:  # e.g. no thread could be started: drop this scrape, keep serving
                    log.exception("could not serve a scrape from %s", client)
                    httpd.shutdown_request(request)

    def close(self) -> None:
        """Stop accepting, let scrapes in flight finish, release the port."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join()
            os.close(self._wake_r)
            os.close(self._wake_w)
        self._httpd.server_close()  # joins the request threads (block_on_close)
