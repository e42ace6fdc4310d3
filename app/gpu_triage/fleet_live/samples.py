"""The fleet view's samples, pure: what a scrape of an exporter (:func:`parse_exposition`) or a Prometheus
instant query (:func:`parse_vector`) becomes, a name, its labels and a value each, grouped by host
(:func:`group_by_host`). Both inputs are someone else's text: numbers that are not finite are None, and a
host's series are capped. :mod:`gpu_triage.fleet_live.model` reads them into rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_triage.fleet_live import SORT_ORDER_HELP as SORT_ORDER_HELP
from gpu_triage.safetext import clip

MAX_SERIES_PER_HOST = 20_000  # samples kept per host; the rest are dropped and said
MAX_HOSTS = 5_000  # hosts kept of a Prometheus answer (the view is made for ~1,000); the rest are counted and said


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of a scrape or of a Prometheus answer: ``value`` None when it was not a finite number."""

    name: str
    labels: Mapping[str, str]
    value: float | None


@dataclass(frozen=True, slots=True)
class HostData:
    """What one fetch said about one host. ``time`` is when (epoch seconds): the scrape's end, or the
    Prometheus query's evaluation time. ``error`` is one line when the host could not be read."""

    key: str
    address: str
    time: float
    samples: tuple[Sample, ...] = ()
    job: str = ""
    up: float | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()


def number(value: object) -> float | None:
    """A finite float or None: NaN, ±Inf, and what is not a number at all ("abc", a list) are None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        f = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        try:
            f = float(value)
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def _labels(raw: Mapping[Any, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()}


def parse_exposition(text: str) -> tuple[list[Sample], list[str]]:
    """The samples of a ``/metrics`` body (Prometheus text format) through prometheus_client's parser,
    and notes on what was dropped. A body the parser rejects as a whole is parsed line by line, so one
    bad line costs that line, not the host. Parsing stops at :data:`MAX_SERIES_PER_HOST` samples: 8 MiB
    of one-character series would otherwise be two million objects."""
    from prometheus_client.parser import text_string_to_metric_families

    notes: list[str] = []
    samples: list[Sample] = []
    full = False

    def take(body: str) -> None:
        nonlocal full
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                if len(samples) >= MAX_SERIES_PER_HOST:
                    full = True
                    return
                samples.append(Sample(s.name, _labels(s.labels), number(s.value)))

    try:
        take(text)
    except (ValueError, TypeError, IndexError, KeyError) as err:
        samples.clear()
        full = False
        bad = 0
        first = ""
        for line in text.splitlines():
            if full:
                break
            if not line.strip() or line.startswith("#"):
                continue
            try:
                take(line + "\n")
            except (ValueError, TypeError, IndexError, KeyError) as line_err:
                bad += 1
                first = first or f"{type(line_err).__name__}: {line_err}"
        notes.append(f"{bad} unparsable line{'s' if bad != 1 else ''} skipped ({clip(first or err, 80)})")
    if full:
        notes.append(f"more than {MAX_SERIES_PER_HOST} samples: the rest not read")
    return samples, notes


class PrometheusError(ValueError):
    """The Prometheus answer was an error or not an instant vector: the message is one clean line."""


class HostCap:
    """At most ``limit`` hosts (job, instance) over the answers of one round: the first met are kept, later
    ones only counted, so that a Prometheus naming 400,000 hosts costs 5,000 hosts' samples and rows."""

    def __init__(self, limit: int = MAX_HOSTS) -> None:
        self.limit = limit
        self.kept: set[tuple[str, str]] = set()
        self.left_out: set[tuple[str, str]] = set()

    def admit(self, labels: Mapping[str, str]) -> bool:
        key = host_key(labels)
        if key in self.kept:
            return True
        if len(self.kept) < self.limit:
            self.kept.add(key)
            return True
        self.left_out.add(key)
        return False


def parse_vector(body: object, cap: HostCap | None = None) -> tuple[list[Sample], float | None]:
    """The samples of a ``/api/v1/query`` answer (``resultType: vector``) and its evaluation time; with
    ``cap``, only those of the hosts it admits."""
    if not isinstance(body, dict):
        raise PrometheusError("the answer is not a JSON object (is this the Prometheus HTTP API?)")
    if body.get("status") != "success":
        kind = clip(body.get("errorType", "error"), 40)
        raise PrometheusError(f"{kind}: {clip(body.get('error', 'no error text'))}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise PrometheusError("the answer holds no instant vector (data.resultType is not 'vector')")
    samples: list[Sample] = []
    when: float | None = None
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            continue
        value = item.get("value")
        if not isinstance(value, list) or len(value) != 2:
            continue
        raw = item["metric"]
        # the API's labels are strings: only a malformed answer pays for the conversion
        labels = raw if all(type(v) is str for v in raw.values()) else _labels(raw)
        if cap is not None and not cap.admit(labels):
            continue
        name = str(labels.pop("__name__", ""))
        samples.append(Sample(name, labels, number(value[1])))
        when = when if when is not None else number(value[0])
    return samples, when


def host_key(labels: Mapping[str, str]) -> tuple[str, str]:
    """(job, instance) of a series from Prometheus. Federated without ``honor_labels`` the original ones
    are ``exported_job`` / ``exported_instance``: those name the host, not the federating server."""
    instance = labels.get("exported_instance") or labels.get("instance") or ""
    job = labels.get("exported_job") or labels.get("job") or ""
    return job, instance


def group_by_host(samples: Iterable[Sample], up: Iterable[Sample], when: float) -> list[HostData]:
    """Prometheus' samples of every host, one :class:`HostData` per (job, instance); ``up`` series add the
    hosts that answer nothing (down), and say whether the others' last scrape worked."""
    grouped: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        grouped.setdefault(host_key(s.labels), []).append(s)
    ups: dict[tuple[str, str], float | None] = {}
    for s in up:
        key = host_key(s.labels)
        ups[key] = s.value if key not in ups or s.value == 0 else ups[key]
    hosts = []
    for key in sorted(set(grouped) | set(ups)):
        job, instance = key
        own = grouped.get(key, [])
        notes: tuple[str, ...] = ()
        if len(own) > MAX_SERIES_PER_HOST:
            notes = (f"{len(own) - MAX_SERIES_PER_HOST} samples past the first {MAX_SERIES_PER_HOST} dropped",)
            own = own[:MAX_SERIES_PER_HOST]
        hosts.append(
            HostData(
                key=f"{job}/{instance}",
                address=instance,
                job=job,
                time=when,
                samples=tuple(own),
                up=ups.get(key),
                notes=notes,
            )
        )
    return hosts
