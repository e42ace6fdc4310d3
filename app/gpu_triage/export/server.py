"""``/metrics`` over HTTP, and nothing else: one thread, non-blocking sockets, bounded in every way.

Anyone who can reach the port is a client, and a client may be hostile (a shared server, a scanner, a
slow link). So the server is a single selector loop that never blocks on a client:

* **Threads**: one, however many clients. A client that sends a header line every few seconds costs one
  socket and a small buffer, never a thread.
* **Request size**: the request line and headers together are at most :data:`MAX_HEAD_BYTES` and
  :data:`MAX_HEADERS` lines; past that the answer is 431 (414 for the request line alone) and the
  connection is closed. A body is never read. Memory per connection is bounded by that buffer.
* **Time**: each connection has one deadline, :data:`REQUEST_DEADLINE_S` from accept to the last byte
  of the answer (not a timeout per read, which a drip-feeding client resets forever).
* **Connections**: at most :data:`MAX_CONNECTIONS` open; a new one past that closes the oldest, which has
  had the most time to finish, so a flood of slow clients cannot lock a real scrape out.
* **Descriptors**: out of them (EMFILE), the oldest connection is closed to make room, or with none open
  accepting pauses briefly: the listening socket stays readable while clients wait, and retrying at once
  would spin a core.
* **Backlog**: ``socket.SOMAXCONN`` (the kernel caps it at net.core.somaxconn), so a burst of scrapers
  waits in the kernel's queue instead of overflowing it into SYN retries.
* **One render per tick**: the page is rendered once per generation (the monitor's snapshot, which
  changes once per tick) and per negotiated format (text or OpenMetrics, gzip or not), then served to
  every scrape of that tick from the cache. Scrapes cost a copy into the socket, not a walk of the tick.
* **TLS** (``--web-config``'s ``tls_server_config``): each accepted socket is wrapped without a handshake
  and the handshake is driven by the loop like any read or write (``do_handshake()`` on readiness, waiting
  on whichever direction OpenSSL asks for). It counts against the connection's deadline, so a client that
  stalls mid-handshake holds one socket until then and never the loop, a thread or another scrape.
* **Basic auth** (``basic_auth_users``): checked on the parsed request, before anything is routed or
  rendered; without the right pair the answer is 401 with ``WWW-Authenticate``. bcrypt runs on the loop
  (a pair that passed is remembered, and the time bcrypt may take is budgeted: 503 past it; see
  :class:`~gpu_triage.export.webconfig.BasicAuth`), so a flood of wrong passwords cannot stall the loop.
* **Shutdown** (:meth:`MetricsServer.close`): stop accepting, close every connection still sending its
  request, give answers already being written :data:`SHUTDOWN_GRACE_S`, then close everything. The
  join of the loop's thread is bounded too: nothing a client does can hold the process.

The listening socket is bound when :class:`MetricsServer` is made, so a port in use or a bad address is
one :class:`UserError` line before anything else starts. The loop sleeps in select() on the sockets and
a wake-up pipe, with a timeout only while a connection has a deadline to keep: an idle daemon's server
thread never wakes, and close() is prompt (one byte down the pipe).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from gpu_triage.export.protocol import (
    MAX_HEAD_BYTES,
    REASONS,
    BadRequest,
    Pages,
    bind,
    parse_head,
    parse_listen,
    plain,
    route,
)
from gpu_triage.export.webconfig import BasicAuth, WebConfig

log = logging.getLogger(__name__)

REQUEST_DEADLINE_S = 10.0  # accept to the last byte of the answer, whatever the client does in between
DRAIN_S = 1.0  # after the answer: wait this long for the client's close, so ours does not reset the answer
MAX_CONNECTIONS = 256
SHUTDOWN_GRACE_S = 2.0  # close(): answers being written get this long
JOIN_SLACK_S = 1.0  # close(): beyond the grace, how long to wait for the loop before giving up on it
ACCEPT_PAUSE_S = 0.5  # out of file descriptors with no connection to close: how long to stop accepting
ACCEPTS_PER_WAKE = 64  # a burst of connections does not starve the ones already open
RECV_BYTES = 4096

@dataclass(slots=True, eq=False)
class _Conn:
    sock: socket.socket
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the answer still to send
    draining: bool = False  # answered; waiting (briefly) for the client's close
    handshaking: bool = False  # TLS: the handshake is not finished (no request is read before it is)


class MetricsServer:
    """Bound at construction; :meth:`start` serves on a thread; :meth:`close` is idempotent and bounded.

    ``generation`` returns a token (compared with ``==``) that changes when the metrics change (the tick
    count of the monitor's snapshot): the page is rendered once per token and format. Without it every
    scrape renders the registry. ``web`` (``--web-config``) adds TLS and/or basic auth."""

    def __init__(
        self,
        listen: str,
        registry: CollectorRegistry,
        *,
        generation: Callable[[], object] | None = None,
        web: WebConfig | None = None,
    ) -> None:
        host, port = parse_listen(listen)
        sock, family = bind(listen, host, port)
        self._sock = sock
        self.pages = Pages(registry, generation)
        self._tls: ssl.SSLContext | None = None if web is None else web.context
        self._auth: BasicAuth | None = BasicAuth(web.users) if web is not None and web.users else None
        self.host = host
        bound = sock.getsockname()
        self.port = int(bound[1])
        self.every_interface = ipaddress.ip_address(bound[0]).is_unspecified
        if self.every_interface:
            self.host = bound[0]  # "0" binds 0.0.0.0: the URL says the address it means
            log.warning(
                "listening on every interface (%s): any machine that can reach port %d can read these "
                "metrics; give --listen 127.0.0.1:%d (or one address of this machine) to limit it",
                f"[{bound[0]}]:{self.port}" if family == socket.AF_INET6 else f"{bound[0]}:{self.port}",
                self.port,
                self.port,
            )
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1  # the pipe close() wakes the loop through
        self._stopping = False
        self._paused_until: float | None = None  # accepting paused (out of descriptors) until then
        self._accept_warned_at: float | None = None
        self._accept_failures = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "http" if self._tls is None else "https"
        return f"{scheme}://{host}:{self.port}/metrics"

    def start(self) -> None:
        if self._thread is None and not self._closed:
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            # a daemon thread: close() waits a bounded time for it, and the process exits after that anyway
            self._thread = threading.Thread(target=self._serve, name="gpu-triage-metrics", daemon=True)
            self._thread.start()

    # -- the loop -------------------------------------------------------------------------------------

    def _serve(self) -> None:
        conns: dict[int, _Conn] = {}  # by file descriptor, in accept order (the oldest is dropped first)
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ, None)
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            try:
                self._loop(selector, conns)
            except Exception:  # a bug here must not leave the port half-open: logged, then everything closed
                log.exception("the metrics server stopped")
            finally:
                for conn in list(conns.values()):
                    self._drop(selector, conns, conn)
                try:
                    selector.unregister(self._sock)
                except (KeyError, ValueError):
                    pass
                self._sock.close()

    def _loop(self, selector: selectors.BaseSelector, conns: dict[int, _Conn]) -> None:
        stop_by: float | None = None  # set once close() has asked: the end of the grace
        while True:
            wake_at = self._wake_at(conns, stop_by)
            events = selector.select(None if wake_at is None else max(0.0, wake_at - time.monotonic()))
            self._dispatch(selector, conns, events, accepting=stop_by is None)
            now = time.monotonic()
            for conn in [c for c in conns.values() if c.deadline <= now]:
                self._drop(selector, conns, conn)
            if self._paused_until is not None and now >= self._paused_until and stop_by is None:
                self._paused_until = None
                selector.register(self._sock, selectors.EVENT_READ, None)
            if self._stopping and stop_by is None:
                stop_by = now + SHUTDOWN_GRACE_S
                self._stop_accepting(selector, conns)
            if stop_by is not None and (not conns or now >= stop_by):
                return

    def _wake_at(self, conns: dict[int, _Conn], stop_by: float | None) -> float | None:
        """The next deadline: a connection's, the end of the grace, or of an accept pause; None: none."""
        # a scan, not a heap: at most MAX_CONNECTIONS, and a wake-up is rare next to a render
        wake_at = min((c.deadline for c in conns.values()), default=None)
        for at in (stop_by, self._paused_until):
            if at is not None:
                wake_at = at if wake_at is None else min(wake_at, at)
        return wake_at

    def _dispatch(self, selector: selectors.BaseSelector, conns: dict[int, _Conn],
                  events: list[tuple[selectors.SelectorKey, int]], accepting: bool) -> None:
        for key, mask in events:
            if key.fileobj is self._sock:
                if accepting:
                    self._accept(selector, conns)
            elif key.fileobj == self._wake_r:
                try:
                    os.read(self._wake_r, 64)
                except BlockingIOError:
                    pass
            else:
                conn = key.data
                if mask & selectors.EVENT_READ:
                    self._on_readable(selector, conns, conn)
                if mask & selectors.EVENT_WRITE and conn.sock.fileno() in conns:
                    self._on_writable(selector, conns, conn)

    def _stop_accepting(self, selector: selectors.BaseSelector, conns: dict[int, _Conn]) -> None:
        if self._paused_until is None:
            selector.unregister(self._sock)
        self._sock.close()  # stop accepting: a new scrape is refused, not queued
        for conn in list(conns.values()):
            if conn.out is None:  # still sending its request, or answered: nothing owed to it
                self._drop(selector, conns, conn)

    def _accept(self, selector: selectors.BaseSelector, conns: dict[int, _Conn]) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(selector, conns, exc)
                return
            if len(conns) >= MAX_CONNECTIONS:
                self._drop(selector, conns, next(iter(conns.values())))
            sock.setblocking(False)
            handshaking = False
            if self._tls is not None:
                try:  # no handshake here: the loop drives it on readiness, within the deadline
                    sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except OSError as exc:  # the client is already gone (reset before we got to it)
                    log.debug("TLS wrap of an accepted connection failed: %s", exc)
                    sock.close()
                    continue
                handshaking = True
            conn = _Conn(sock, time.monotonic() + REQUEST_DEADLINE_S, handshaking=handshaking)
            conns[sock.fileno()] = conn
            selector.register(sock, selectors.EVENT_READ, conn)

    def _accept_failed(self, selector: selectors.BaseSelector, conns: dict[int, _Conn], exc: OSError) -> None:
        """Out of file descriptors (EMFILE: the process's limit, ENFILE: the system's) or memory. The
        listening socket stays readable while clients wait in the backlog, so retrying at once would spin:
        free a descriptor by closing the oldest connection, or with none open, stop accepting for
        ACCEPT_PAUSE_S. Said at most once a minute, with how often it happened."""
        self._accept_failures += 1
        now = time.monotonic()
        if self._accept_warned_at is None or now - self._accept_warned_at >= 60.0:
            log.warning("could not accept a scrape (%s), %d times since the last warning: closing the oldest "
                        "connection or pausing for %g s each time; raise the descriptor limit (LimitNOFILE=)",
                        exc.strerror or exc, self._accept_failures, ACCEPT_PAUSE_S)
            self._accept_warned_at, self._accept_failures = now, 0
        if conns:
            self._drop(selector, conns, next(iter(conns.values())))
        elif self._paused_until is None:
            selector.unregister(self._sock)
            self._paused_until = time.monotonic() + ACCEPT_PAUSE_S

    def _drop(self, selector: selectors.BaseSelector, conns: dict[int, _Conn], conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            conns.pop(fd, None)
            try:
                selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.sock.close()

    def _handshake(self, selector: selectors.BaseSelector, conns: dict[int, _Conn], conn: _Conn) -> None:
        """One step of the TLS handshake: done, waiting for the direction OpenSSL names, or failed (a
        client that does not trust our certificate, plain HTTP on the TLS port, no client certificate where
        one is required, a version below min_version): then the connection is refused (:meth:`_refuse`)."""
        sock = conn.sock
        if not isinstance(sock, ssl.SSLSocket):  # only TLS connections handshake
            return
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            selector.modify(conn.sock, selectors.EVENT_READ, conn)
            return
        except ssl.SSLWantWriteError:
            selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
            return
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake failed: %s", exc)
            self._refuse(selector, conns, conn)
            return
        conn.handshaking = False
        selector.modify(conn.sock, selectors.EVENT_READ, conn)
        # the request may have come with the client's last handshake flight, already read into OpenSSL's
        # buffer where select() does not see it
        self._on_readable(selector, conns, conn)

    def _refuse(self, selector: selectors.BaseSelector, conns: dict[int, _Conn], conn: _Conn) -> None:
        """After a failed handshake: half-close (after OpenSSL's alert, where it sent one) and wait briefly
        for the client's close as after an answer, reading and dropping what it sent. Closed at once, the
        bytes of its still unread (plain HTTP on the TLS port) would make the kernel reset the connection,
        and the client would read a reset instead of the alert or the end."""
        conn.handshaking = False
        try:
            conn.sock.shutdown(socket.SHUT_WR)  # an SSLSocket drops its TLS state: the reads are plain
        except OSError:
            self._drop(selector, conns, conn)
            return
        conn.draining = True
        conn.deadline = min(conn.deadline, time.monotonic() + DRAIN_S)
        selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _recv(self, conn: _Conn) -> bytes | None:
        """What the client sent (b"" at its end), or None when nothing is there yet."""
        sock = conn.sock
        try:
            data = sock.recv(RECV_BYTES)
            if isinstance(sock, ssl.SSLSocket) and not conn.draining:
                # a TLS record holds up to 16 KiB: what OpenSSL decrypted past RECV_BYTES waits in its own
                # buffer, where select() cannot see it, so it is read now (as far as a head can go)
                while data and sock.pending() and len(conn.buf) + len(data) <= MAX_HEAD_BYTES:
                    data += sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            # SSLWantWriteError on a read: OpenSSL has a record of its own to send first (a TLS 1.3 key
            # update) and the send buffer is full; a later readiness retries it, the deadline bounds it
            return None
        return data

    def _on_readable(self, selector: selectors.BaseSelector, conns: dict[int, _Conn], conn: _Conn) -> None:
        if conn.handshaking:
            self._handshake(selector, conns, conn)
            return
        try:
            data = self._recv(conn)
        except OSError:
            self._drop(selector, conns, conn)
            return
        if data is None:
            return
        if not data:
            if conn.out is not None:  # a client that half-closes after its request (nc -N) still gets the answer
                selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
                return
            self._drop(selector, conns, conn)  # closed, or half-closed before its request was whole
            return
        if conn.draining or conn.out is not None:
            return  # a body or a second request: not read, not kept
        conn.buf += data
        end, skip = conn.buf.find(b"\r\n\r\n"), 4
        bare = conn.buf.find(b"\n\n")
        if bare >= 0 and (end < 0 or bare < end):
            end, skip = bare, 2
        if end < 0 or end + skip > MAX_HEAD_BYTES:
            if len(conn.buf) <= MAX_HEAD_BYTES:
                return  # not whole yet: wait, within the deadline
            line_end = conn.buf.find(b"\n", 0, MAX_HEAD_BYTES)
            if line_end < 0:
                self._answer(selector, conn, *plain(414, f"the request line is longer than {MAX_HEAD_BYTES} bytes"))
            else:
                self._answer(selector, conn, *plain(431, f"request line and headers exceed {MAX_HEAD_BYTES} bytes"))
            return
        head = bytes(conn.buf[:end])
        conn.buf = bytearray()
        try:
            request = parse_head(head)
        except BadRequest as bad:
            self._answer(selector, conn, *plain(bad.status, str(bad)))
            return
        self._answer(selector, conn, *route(request, self._auth, self.pages))

    def _answer(
        self,
        selector: selectors.BaseSelector,
        conn: _Conn,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        head_only: bool,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {REASONS[status]}", *(f"{k}: {v}" for k, v in headers)]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        conn.out = memoryview("\r\n".join(lines).encode("latin-1") + (b"" if head_only else body))
        selector.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def _on_writable(self, selector: selectors.BaseSelector, conns: dict[int, _Conn], conn: _Conn) -> None:
        if conn.handshaking:
            self._handshake(selector, conns, conn)
            return
        out = conn.out
        if out is None:
            return
        try:
            # TLS: a write OpenSSL could not finish is retried with the same buffer, as it requires
            sent = conn.sock.send(out)
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return
        except OSError:
            self._drop(selector, conns, conn)
            return
        conn.out = out[sent:] if sent < len(out) else None
        if conn.out is None:  # all sent: half-close, then wait briefly for the client's own close
            try:
                if isinstance(conn.sock, ssl.SSLSocket):
                    _close_notify(conn.sock)
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._drop(selector, conns, conn)
                return
            conn.draining = True
            conn.deadline = min(conn.deadline, time.monotonic() + DRAIN_S)
            selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def close(self) -> None:
        """Stop accepting, finish answers being written (at most :data:`SHUTDOWN_GRACE_S`), release the port."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        thread = self._thread
        if thread is None:
            self._sock.close()
            return
        self._stopping = True
        os.write(self._wake_w, b"x")
        thread.join(SHUTDOWN_GRACE_S + JOIN_SLACK_S)
        if thread.is_alive():  # stuck in a collector: do not wait on it; the port is released regardless
            log.warning("the metrics server did not stop within %.0f s; leaving it", SHUTDOWN_GRACE_S + JOIN_SLACK_S)
            try:
                self._sock.close()
            except OSError:
                pass
            return
        os.close(self._wake_r)
        os.close(self._wake_w)


def _close_notify(sock: ssl.SSLSocket) -> None:
    """Send TLS's close_notify, the end of the answer, without waiting for the client's (the loop does
    not block: the first SSL_shutdown sends ours, the second would wait for theirs and says so)."""
    try:
        sock.unwrap()
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        pass
    except ssl.SSLError as exc:
        log.debug("TLS close_notify not sent: %s", exc)
