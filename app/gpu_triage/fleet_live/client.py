"""The fleet view's network side: Prometheus' HTTP API or a pool of exporters, read in worker threads.

Everything here is bounded, because every byte comes from another machine: a body past its cap is an
error, not a memory spike; each host's fetch has one deadline for its whole exchange (:mod:`.fetch`), so a
host that hangs or drips holds one worker for at most ``--timeout`` and is skipped by the next rounds while
it is in flight, and never starves the others of workers; at most ``concurrency`` requests are in flight.

:class:`Fleet` runs the rounds and publishes one immutable :class:`FleetSnapshot` (one reference, swapped
whole): the screen reads it on its own timer and never waits for the network.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpu_triage.fleet_live.fetch import COLLECTOR_PAUSED
from gpu_triage.fleet_live.fetch import FetchError as FetchError
from gpu_triage.fleet_live.fetch import http_get as http_get
from gpu_triage.fleet_live.model import METRICS, HostRow, build_row, order_rows
from gpu_triage.fleet_live.samples import (
    HostCap,
    HostData,
    PrometheusError,
    Sample,
    group_by_host,
    parse_exposition,
    parse_vector,
)
from gpu_triage.safetext import clip

log = logging.getLogger(__name__)

EXPORTER_CAP_BYTES = 8 * 1024 * 1024  # a scrape of 8 busy H200s is ~40 KB: 200 times that is not an exporter
PROMETHEUS_CAP_BYTES = 64 * 1024 * 1024  # an instant vector of ~1,000 8-card hosts is ~25 MB of JSON
MAX_EXPORTERS = 4096  # the pool mode is for a small pool; a fleet has a Prometheus
PUBLISH_EVERY_S = 0.25  # at most this often is a new snapshot made while answers come in
LOST_RANGE = "24h"  # from Prometheus the GPU-hours lost column is the counter's increase over this range
# after a server refused that increase (the heaviest query of a round: about 80,000 samples a host at a 15 s
# scrape), how long the column stays n/a before it is asked again
LOST_RETRY_S = 300.0
UNMEASURED = ":unmeasured"  # the "lost" answer's bottleneck for the seconds of no figure: no bottleneck's word
UP_LOOKBACK = "1h"  # without --match, every target of a scrape job that exported gpu_triage_build_info in this window


# -- addresses ------------------------------------------------------------------------------------------------


def exporter_url(text: str) -> str:
    """``host:port``, ``[v6]:port`` or an ``http(s)://`` URL (path default ``/metrics``) as a URL; a bad
    one is a ValueError with one line."""
    raw = text.strip()
    shown = clip(raw, 80)
    if not raw:
        raise ValueError("an empty exporter address: give HOST:PORT")
    url = raw if "://" in raw else f"http://{raw}"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{shown}: give HOST:PORT or an http:// or https:// URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{shown}: the port is not a number from 1 to 65535") from None
    if not parts.hostname:
        raise ValueError(f"{shown}: no host name: give HOST:PORT")
    if port is None and "://" not in raw:
        raise ValueError(f"{shown}: no port: give HOST:PORT (gpu-triage export listens on 9839)")
    if port == 0:
        raise ValueError(f"{shown}: port 0 is not a port to scrape")
    if any(ch.isspace() or not ch.isprintable() for ch in raw):
        raise ValueError(f"{shown}: spaces or control characters in an address")
    path = parts.path or "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def prometheus_url(text: str) -> str:
    raw = text.strip()
    url = raw if "://" in raw else f"http://{raw}"
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"{clip(raw, 80)}: the port is not a number from 1 to 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{clip(raw, 80)}: give the Prometheus server as http://HOST:9090")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def label_matchers(text: str | None) -> str:
    """``--match``: PromQL label matchers (``job="gpu-triage"``), with or without the braces."""
    if not text or not text.strip():
        return ""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    if "{" in body or "}" in body or len(body) > 1000 or not body.isprintable():
        raise ValueError(f"--match {clip(text, 60)}: give label matchers such as job=\"gpu-triage\"")
    return body


# -- targets ------------------------------------------------------------------------------------------------


class Target(Protocol):
    key: str

    def fetch(self) -> list[HostRow]: ...


class ExporterTarget:
    """One exporter's ``/metrics``: its host's row, or a *down* row saying why."""

    def __init__(self, address: str, *, timeout_s: float, cap_bytes: int = EXPORTER_CAP_BYTES) -> None:
        self.key = address
        self.url = exporter_url(address)
        self.timeout_s = timeout_s
        self.cap_bytes = cap_bytes

    def fetch(self) -> list[HostRow]:
        try:
            body = http_get(
                self.url,
                timeout_s=self.timeout_s,
                cap_bytes=self.cap_bytes,
                accept="text/plain;version=0.0.4;q=1,*/*;q=0.1",
            )
        except FetchError as err:
            return [build_row(HostData(self.key, self.key, time.time(), error=str(err)))]
        with COLLECTOR_PAUSED:
            samples, notes = parse_exposition(body.decode("utf-8", errors="replace"))
            return [build_row(HostData(self.key, self.key, time.time(), samples=tuple(samples), notes=tuple(notes)))]


class PrometheusTarget:
    """Every host Prometheus holds our metrics of, from four instant queries per round."""

    def __init__(self, base: str, *, match: str = "", timeout_s: float) -> None:
        self.base = prometheus_url(base)
        self.key = self.base
        self.match = label_matchers(match)
        self.timeout_s = timeout_s
        self.left_out = 0  # hosts of the last answer past samples.MAX_HOSTS: counted, not shown
        self._lost_retry_at = 0.0  # a refused "lost" query is asked again from then on
        names = [n for fld, accepted in METRICS.items()
                 if fld not in ("up", "clock_reason", "time_lost", "time_unmeasured") for n in accepted]
        regex = "|".join(names) + "|gpu_triage_.*owner.*"  # an owner metric under any future name
        sep = "," if self.match else ""
        by = "job, instance, exported_job, exported_instance"
        self.queries = {
            "metrics": f'{{__name__=~"{regex}"{sep}{self.match}}}',
            "up": f"up{{{self.match}}}"
            if self.match
            # every target of a scrape job that exports our metrics, by `up`, so a target that never answered
            # or died long ago is listed (down) instead of left out. exported_job: federated without
            # honor_labels, the federating server's own `up` has the federating job, and no exported_job
            else "up and on(job, exported_job) group by (job, exported_job) "
            f"(last_over_time(gpu_triage_build_info[{UP_LOOKBACK}]))",
            "reasons": f"{METRICS['clock_reason'][0]}{{{self.match}}} == 1",
            # the GPU-hours lost over the last LOST_RANGE, not since each exporter started (restarts reset that),
            # and in the same answer the seconds of no figure over it, under a bottleneck no verdict names
            "lost": f"sum by ({by}, bottleneck) (increase({METRICS['time_lost'][0]}{{{self.match}}}[{LOST_RANGE}]))"
            f" or label_replace(sum by ({by}) (increase({METRICS['time_unmeasured'][0]}{{{self.match}}}"
            f"[{LOST_RANGE}])), \"bottleneck\", \"{UNMEASURED}\", \"\", \"\")",
        }

    def query(
        self, promql: str, deadline: float | None = None, cap: HostCap | None = None
    ) -> tuple[list[Sample], float | None]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        body = http_get(url, timeout_s=self.timeout_s, cap_bytes=PROMETHEUS_CAP_BYTES, accept="application/json",
                        deadline=deadline)
        with COLLECTOR_PAUSED:
            try:
                doc = json.loads(body.decode("utf-8", errors="replace"))
            except ValueError:
                raise FetchError("the answer is not JSON: is this the Prometheus server (its HTTP API)?") from None
            try:
                return parse_vector(doc, cap)
            except PrometheusError as err:
                raise FetchError(str(err)) from None

    def fetch(self) -> list[HostRow]:
        deadline = time.monotonic() + self.timeout_s  # the queries of a round share one --timeout
        cap = HostCap()
        with COLLECTOR_PAUSED:  # the answers and their rows: see fetch.COLLECTOR_PAUSED
            samples, when = self.query(self.queries["metrics"], deadline, cap)
            up, _ = self.query(self.queries["up"], deadline, cap)
            reasons, _ = self.query(self.queries["reasons"], deadline, cap)
            lost = self._lost_now(deadline, cap)
            self.left_out = len(cap.left_out)
            name = METRICS["clock_reason"][0]
            samples += [Sample(name, s.labels, s.value) for s in reasons]  # `== 1` may or may not keep the name
            samples += [_lost_sample(s) for s in lost]
            up = [Sample("up", s.labels, s.value) for s in up]
            return [build_row(h) for h in group_by_host(samples, up, when if when is not None else time.time())]

    def _lost_now(self, deadline: float, cap: HostCap) -> list[Sample]:
        """The GPU-hours lost per host and bottleneck. A server that refuses that query (its
        --query.max-samples on a large fleet) costs the column, read n/a, not the round, and is not asked it
        again for LOST_RETRY_S."""
        if time.monotonic() < self._lost_retry_at:
            return []
        try:
            return self.query(self.queries["lost"], deadline, cap)[0]
        except FetchError as err:
            log.warning("the GPU-hours lost query failed, its column reads n/a: %s", err)
            self._lost_retry_at = time.monotonic() + LOST_RETRY_S
            return []


def _lost_sample(s: Sample) -> Sample:
    """One answer of the "lost" query as the exporter's own series: the counter's increase over LOST_RANGE, or
    (its bottleneck UNMEASURED) the seconds of no figure over it."""
    if s.labels.get("bottleneck") == UNMEASURED:
        labels = {k: v for k, v in s.labels.items() if k != "bottleneck"}
        return Sample(METRICS["time_unmeasured"][0], {**labels, "range": LOST_RANGE}, s.value)
    return Sample(METRICS["time_lost"][0], {**s.labels, "range": LOST_RANGE}, s.value)


# -- the refresher --------------------------------------------------------------------------------------------


class _Workers:
    """A fixed number of daemon threads running what is submitted, in order. Not a ThreadPoolExecutor:
    the interpreter joins an executor's threads at exit, so quitting the view would wait for a host that
    hangs until its timeout; a request in flight here is simply dropped with the process."""

    def __init__(self, count: int) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], threading.Event] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"fleet-fetch-{i}", daemon=True) for i in range(count)
        ]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            fn, done = job
            try:
                fn()
            finally:
                done.set()

    def submit(self, fn: Callable[[], None]) -> threading.Event:
        done = threading.Event()
        self._queue.put((fn, done))
        return done

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """What the screen draws: the rows in order, and one line when the source itself failed."""

    source: str
    rows: tuple[HostRow, ...] = ()
    error: str | None = None
    updated: float | None = None  # epoch seconds of the newest answer; None before the first
    waiting: int = 0  # targets that have not answered once yet
    left_out: int = 0  # hosts the source named past samples.MAX_HOSTS: not shown

    @property
    def down(self) -> int:
        return sum(1 for r in self.rows if r.state != "ok")

    @property
    def attention(self) -> int:
        return sum(1 for r in self.rows if r.needs_attention)


class Fleet:
    """Rounds every ``interval_s``: each target not still in flight is fetched on a worker (at most
    ``concurrency`` at once); answers are published as they come, at most every ``PUBLISH_EVERY_S``."""

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        source: str,
        interval_s: float,
        concurrency: int = 16,
    ) -> None:
        self.targets = list(targets)
        self.interval_s = interval_s
        self._pool = _Workers(max(1, min(concurrency, len(self.targets))))
        self._lock = threading.Lock()
        self._rows: dict[str, list[HostRow]] = {}
        self._errors: dict[str, str] = {}
        self._answered: dict[str, float] = {}
        self._inflight: set[str] = set()
        self._took: dict[str, float] = {}  # seconds the target's last fetch took
        self._left_out: dict[str, int] = {}  # hosts past the cap in the target's last answer
        self._dirty = False
        self._wake = threading.Event()
        self._refresh = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.snapshot = FleetSnapshot(source=source, waiting=len(self.targets))

    # the worker's side
    def _fetch(self, target: Target) -> None:
        rows: list[HostRow] | None = None
        error = None
        started = time.monotonic()
        try:
            rows = target.fetch()
        except FetchError as err:
            error = f"{clip(target.key, 80)}: {err}"
        except Exception as err:  # a bug, not the network: said on screen and logged with its traceback
            log.exception("fetching %s failed", target.key)
            error = f"{clip(target.key, 80)}: {type(err).__name__}: {clip(err, 80)} (a bug: see --log-file)"
        with self._lock:
            self._inflight.discard(target.key)
            self._took[target.key] = time.monotonic() - started
            if rows is not None:
                self._rows[target.key] = rows
                self._left_out[target.key] = getattr(target, "left_out", 0)
                self._errors.pop(target.key, None)
                self._answered[target.key] = time.time()
            else:
                assert error is not None
                self._errors[target.key] = error
            self._dirty = True
        self._wake.set()

    def _submit_round(self) -> list[threading.Event]:
        futures: list[threading.Event] = []
        with self._lock:
            # the quick first: hosts that timed out last round queue behind those that answer, so a few dead
            # hosts delay no one when there are more of them than workers
            due = sorted(
                (t for t in self.targets if t.key not in self._inflight), key=lambda t: self._took.get(t.key, 0.0)
            )
            self._inflight.update(t.key for t in due)
        for t in due:
            futures.append(self._pool.submit(functools.partial(self._fetch, t)))
        return futures

    def _publish(self) -> FleetSnapshot:
        with self._lock:
            rows = [r for key in self._rows for r in self._rows[key]]
            errors = sorted(self._errors.values())
            updated = max(self._answered.values(), default=None)
            waiting = sum(1 for t in self.targets if t.key not in self._answered and t.key not in self._errors)
            left_out = sum(self._left_out.values())
            self._dirty = False
        error = errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "") if errors else None
        snap = FleetSnapshot(
            source=self.snapshot.source, rows=order_rows(rows), error=error, updated=updated, waiting=waiting,
            left_out=left_out,
        )
        self.snapshot = snap
        return snap

    # the caller's side
    def once(self) -> FleetSnapshot:
        """One round, waited for (each request bounded by its timeout): for --once and tests."""
        for done in self._submit_round():
            done.wait()
        return self._publish()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleet-refresh", daemon=True)
        self._thread.start()

    def refresh_now(self) -> None:
        self._refresh.set()
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
        self._pool.shutdown()  # requests in flight end by their own timeouts; nobody waits for them

    def _loop(self) -> None:
        next_round = 0.0
        last_publish = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_round or self._refresh.is_set():
                    self._refresh.clear()
                    self._submit_round()
                    next_round = now + self.interval_s
                if self._dirty and now - last_publish >= PUBLISH_EVERY_S:
                    last_publish = now
                    self._publish()
            except Exception:  # a bug: logged, and the next round tries again (a dead thread would freeze the view)
                log.exception("the fleet refresher's round failed")
                self._dirty = False
            timeout = next_round - now
            if self._dirty:
                timeout = min(timeout, max(0.0, last_publish + PUBLISH_EVERY_S - now))
            self._wake.wait(max(0.01, timeout))
            self._wake.clear()
