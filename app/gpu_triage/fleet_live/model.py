"""The fleet view's model, pure: samples in, one sorted row per host out.

A host's samples come from a scrape of its exporter or from a Prometheus instant query
(:mod:`gpu_triage.fleet_live.samples`); either way a sample is a name, its labels and a value, and
:func:`build_row` reads them through :data:`METRICS`, the one table of the names the view understands.
Each field lists the names it accepts, preferred first, so a metric renamed in the exporter (a gauge
that becomes a ``_total`` counter) is read under its old and its new name, and following a rename is a
change to one line of that table.

What a row says is what the exporter said, never a guess: a card whose GPU-Util is not exported is not
counted busy or idle, a missing figure is ``None`` ("n/a" on screen), and a host whose scrape failed or
whose ``up`` is 0 is *down*, never a host of idle cards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_triage.diagnosis.lost import total
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.vocab import GPU_FAULT, SEVERITY, is_healthy, severity
from gpu_triage.fleet_live import SORT_ORDER_HELP as SORT_ORDER_HELP
from gpu_triage.fleet_live.owners import owner_of as owner_of
from gpu_triage.fleet_live.owners import owner_text, owners_of
from gpu_triage.fleet_live.samples import HostData, Sample
from gpu_triage.safetext import clip

# field -> accepted metric names, preferred first. Sample names as Prometheus stores them (a counter's
# name ends in _total, an info metric's in _info).
METRICS: dict[str, tuple[str, ...]] = {
    "verdict": ("gpu_triage_verdict",),
    "confidence": ("gpu_triage_verdict_confidence_ratio",),
    "verdict_age": ("gpu_triage_verdict_age_seconds",),
    "build": ("gpu_triage_build_info",),
    "tick_time": ("gpu_triage_tick_timestamp_seconds",),
    "tick_interval": ("gpu_triage_tick_interval_seconds",),
    "driver": ("gpu_triage_gpu_driver_available",),
    "gpu_info": ("gpu_triage_gpu_info",),
    "lost": ("gpu_triage_gpu_lost",),
    "util": ("gpu_triage_gpu_utilization_ratio",),
    "sm_active": ("gpu_triage_gpu_sm_active_ratio",),
    "mem_used": ("gpu_triage_gpu_memory_used_bytes",),
    "mem_total": ("gpu_triage_gpu_memory_total_bytes",),
    "power": ("gpu_triage_gpu_power_watts",),
    "temp": ("gpu_triage_gpu_temperature_celsius",),
    "clock_reason": ("gpu_triage_gpu_clock_event_reason",),
    "ecc_uncorrected": ("gpu_triage_gpu_ecc_uncorrected_errors_total", "gpu_triage_gpu_ecc_uncorrected_errors"),
    "xid": ("gpu_triage_gpu_xid_events_total", "gpu_triage_gpu_xid_events"),
    "cpu_busy": ("gpu_triage_host_cpu_busy_ratio",),
    "iowait": ("gpu_triage_host_iowait_ratio",),
    "samples_per_s": ("gpu_triage_job_samples_per_second",),
    # GPU-seconds lost per bottleneck: the exporter's counter since it started; from Prometheus, its increase over
    # client.LOST_RANGE (the sample then carries a `range` label saying so)
    "time_lost": ("gpu_triage_gpu_lost_seconds_total",),
    # seconds of ticks whose loss has no figure (no covered card reads GPU-Util): a loss still 0 beside them is n/a
    "time_unmeasured": ("gpu_triage_gpu_lost_unmeasured_seconds_total",),
    "job_since_progress": ("gpu_triage_job_seconds_since_progress",),
    "owner": ("gpu_triage_owner_info", "gpu_triage_gpu_owner_info", "gpu_triage_process_gpu_memory_bytes"),
    "up": ("up",),
}
# Throttling clock reasons (those that slow a card down; idle and app-clocks do not): docs/metrics.md.
THROTTLE_REASONS = frozenset({"power", "thermal", "hw-slowdown", "hw-thermal", "power-brake"})

#: A card at or above the diagnosis's idle line ran kernels during the tick: it counts as busy.
BUSY_UTIL_RATIO = Thresholds().idle_util_pct / 100.0
STALE_TICKS = 5.0  # a newest tick older than this many tick intervals is stale: the exporter's sampler stopped
STALE_MIN_S = 15.0  # and never before this many seconds (a scrape 1 s after a 2 s tick is not stale)
MAX_CARDS = 256  # `gpu` labels kept per host (a hostile scrape could name a million)


OK, STALE, DOWN = "ok", "stale", "down"


@dataclass(frozen=True, slots=True)
class Card:
    index: int
    name: str | None = None
    util: float | None = None
    sm_active: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    lost: bool = False
    throttles: tuple[str, ...] = ()
    ecc_uncorrected: float | None = None
    xid: float | None = None


@dataclass(frozen=True, slots=True)
class HostRow:
    """One host, as the table and the detail show it. Text fields are already :func:`~gpu_triage.safetext.clip`."""

    key: str
    host: str
    address: str
    job: str
    state: str  # OK, STALE or DOWN
    hostname: str | None = None  # what the exporter calls its machine (gpu_triage_build_info)
    error: str | None = None
    pattern: str | None = None
    bottleneck: str | None = None
    verdict_cards: str | None = None
    confidence: float | None = None
    verdict_age_s: float | None = None
    busy: int | None = None
    total: int | None = None
    util: float | None = None
    samples_per_s: float | None = None
    # None: the exporter does not serve the counter (an older version), or it could measure nothing it counts (its
    # covered cards read no GPU-Util) and knows of nothing lost: then lost_range says over what
    gpu_hours_lost: float | None = None
    lost_bottleneck: str | None = None  # the bottleneck that lost the most of them
    lost_range: str | None = None  # over what: "since the exporter started", or Prometheus' range ("24h")
    owner: str | None = None
    owners: tuple[str, ...] = ()
    tick_age_s: float | None = None
    cpu_busy: float | None = None
    iowait: float | None = None
    driver: bool | None = None
    cards: tuple[Card, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def needs_attention(self) -> bool:
        return self.state != OK or self.has_bottleneck

    @property
    def has_bottleneck(self) -> bool:
        return self.state == OK and not is_healthy(self.bottleneck)


# -- one row per host -----------------------------------------------------------------------------------------


class _Index:
    """The samples of one host by name, read through :data:`METRICS` (first accepted name present)."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self.by_name: dict[str, list[Sample]] = {}
        for s in samples:
            self.by_name.setdefault(s.name, []).append(s)

    def all(self, fld: str) -> list[Sample]:
        for name in METRICS[fld]:
            if name in self.by_name:
                return self.by_name[name]
        return []

    def one(self, fld: str) -> float | None:
        for s in self.all(fld):
            if s.value is not None:
                return s.value
        return None

    def per_card(self, fld: str) -> dict[int, float]:
        out: dict[int, float] = {}
        for s in self.all(fld):
            i = _card_index(s.labels.get("gpu"))
            if i is not None and s.value is not None:
                out[i] = s.value
        return out


def _card_index(text: str | None) -> int | None:
    if text is None or not text.isdigit() or len(text) > 4:
        return None
    return int(text)


def _ratio(v: float | None) -> float | None:
    """A 0-1 share, or None: a value outside it (a hostile or broken exporter) is not drawn as 1e308 %."""
    return v if v is not None and -1e-9 <= v <= 1.0 + 1e-6 else None


def _amount(v: float | None) -> float | None:
    """A count, a size, watts: never negative."""
    return v if v is not None and v >= 0 else None


def _may_name_owner(name: str) -> bool:
    """The series that carry whose work it is: the GPU processes' and any owner metric."""
    return name.startswith("gpu_triage_process_") or "owner" in name or name in METRICS["owner"]


def _down_reason(data: HostData, ours: Sequence[Sample]) -> str | None:
    """Why the host cannot be read at all, or None when it answered with our metrics."""
    if data.error is not None:
        return clip(data.error)
    if data.up == 0:
        return "up == 0: Prometheus' last scrape of it failed"
    if not ours:
        return "no gpu_triage metrics in the answer"
    return None


def _verdict_labels(idx: _Index) -> tuple[str | None, str | None, str | None]:
    """The host's current verdict (the first in bottleneck, pattern order when several say 1), cleaned: its
    pattern, bottleneck and cards."""
    verdicts = sorted(
        (s for s in idx.all("verdict") if s.value == 1),
        key=lambda s: (s.labels.get("bottleneck", ""), s.labels.get("pattern", "")),
    )
    v = verdicts[0].labels if verdicts else {}
    return (
        clip(v["pattern"], 40) if "pattern" in v else None,
        clip(v["bottleneck"], 40) if "bottleneck" in v else None,
        clip(v["cards"], 60) if "cards" in v else None,
    )


def _card_names(idx: _Index) -> dict[int, str | None]:
    names = {}
    for s in idx.all("gpu_info"):
        i = _card_index(s.labels.get("gpu"))
        if i is not None:
            names[i] = clip(s.labels.get("name", ""), 40) or None
    return names


def _card_throttles(idx: _Index) -> dict[int, list[str]]:
    throttles: dict[int, list[str]] = {}
    for s in idx.all("clock_reason"):
        i = _card_index(s.labels.get("gpu"))
        reason = s.labels.get("reason", "")
        if i is not None and s.value == 1 and reason in THROTTLE_REASONS:
            throttles.setdefault(i, []).append(reason)
    return throttles


def _cards(idx: _Index) -> tuple[Card, ...]:
    """The host's cards (at most :data:`MAX_CARDS`), a lost card's utilisation unknown."""
    raw_util = idx.per_card("util")
    util = {i: r for i, x in raw_util.items() if (r := _ratio(x)) is not None}
    lost = {i for i, x in idx.per_card("lost").items() if x == 1}
    names = _card_names(idx)
    mem_total = idx.per_card("mem_total")
    indexes = sorted(set(raw_util) | lost | set(names) | set(mem_total) | set(idx.per_card("lost")))[:MAX_CARDS]
    mem_used, power, temp = idx.per_card("mem_used"), idx.per_card("power"), idx.per_card("temp")
    sm, ecc, xid = idx.per_card("sm_active"), idx.per_card("ecc_uncorrected"), idx.per_card("xid")
    throttles = _card_throttles(idx)
    return tuple(
        Card(
            index=i,
            name=names.get(i),
            util=None if i in lost else util.get(i),
            sm_active=_ratio(sm.get(i)),
            mem_used=_amount(mem_used.get(i)),
            mem_total=_amount(mem_total.get(i)),
            power_w=_amount(power.get(i)),
            temp_c=temp.get(i),
            lost=i in lost,
            throttles=tuple(sorted(throttles.get(i, ()))),
            ecc_uncorrected=_amount(ecc.get(i)),
            xid=_amount(xid.get(i)),
        )
        for i in indexes
    )


def _freshness(data: HostData, idx: _Index) -> tuple[str, str | None, float | None]:
    """The host's state (stale when its newest tick is older than its sampler's pace allows), why, and the
    newest tick's age."""
    tick_time, interval = idx.one("tick_time"), _amount(idx.one("tick_interval"))
    tick_age = data.time - tick_time if tick_time is not None else None
    stale_after = max(STALE_TICKS * (interval or 0.0), STALE_MIN_S)
    if tick_age is None:
        return STALE, "no tick yet", None
    if tick_age > stale_after:
        return STALE, f"newest tick is {tick_age:.0f} s old: its sampler stopped", tick_age
    return OK, None, tick_age


def build_row(data: HostData) -> HostRow:
    """One :class:`HostRow` from what one host said (or failed to say)."""
    address = clip(data.address or data.key)
    job = clip(data.job)
    notes = tuple(clip(n) for n in data.notes)
    ours = [s for s in data.samples if s.name.startswith("gpu_triage_")]
    down = _down_reason(data, ours)
    if down is not None:
        return HostRow(key=data.key, host=address, address=address, job=job, state=DOWN, error=down, notes=notes)
    idx = _Index(data.samples)
    build = idx.all("build")
    hostname = clip(build[0].labels.get("hostname", ""), 60) if build else ""
    cards = _cards(idx)
    measured = [c.util for c in cards if c.util is not None]
    busy = sum(1 for u in measured if u >= BUSY_UTIL_RATIO) if measured else None
    state, error, tick_age = _freshness(data, idx)
    owners = owners_of(s for s in ours if _may_name_owner(s.name))
    driver = idx.one("driver")
    pattern, bottleneck, verdict_cards = _verdict_labels(idx)
    lost_hours, lost_by, lost_range = _lost(idx)
    return HostRow(
        host=hostname or address,
        hostname=hostname or None,
        state=state,
        error=error,
        pattern=pattern,
        bottleneck=bottleneck,
        verdict_cards=verdict_cards,
        confidence=_ratio(idx.one("confidence")),
        verdict_age_s=_amount(idx.one("verdict_age")),
        busy=busy,
        total=len(cards) if cards else (0 if driver == 0 else None),
        util=sum(measured) / len(measured) if measured else None,
        samples_per_s=_amount(idx.one("samples_per_s")),
        gpu_hours_lost=lost_hours,
        lost_bottleneck=lost_by,
        lost_range=lost_range,
        owner=owner_text(owners),
        owners=owners,
        tick_age_s=tick_age,
        cpu_busy=_ratio(idx.one("cpu_busy")),
        iowait=_ratio(idx.one("iowait")),
        driver=None if driver is None else driver != 0,
        cards=cards,
        key=data.key,
        address=address,
        job=job,
        notes=notes,
    )


def _lost(idx: _Index) -> tuple[float | None, str | None, str | None]:
    """GPU-hours lost (every bottleneck's together), the bottleneck that lost the most, and over what range."""
    per: dict[str, float] = {}
    span = None
    for s in idx.all("time_lost"):
        seconds = _amount(s.value)
        if seconds is not None:
            b = clip(s.labels.get("bottleneck", ""), 40)
            per[b] = per.get(b, 0.0) + seconds
            span = span or s.labels.get("range")
    if not per:
        return None, None, None
    top = max(sorted(per), key=per.__getitem__)
    where = f"over the last {clip(span, 10)}" if span else "since the exporter started"
    unmeasured = sum(v for s in idx.all("time_unmeasured") if (v := _amount(s.value)) is not None)
    lost = total([sum(per.values()), *([None] if unmeasured > 0 else [])])  # diagnosis.lost's rule: n/a, not 0
    return None if lost is None else lost / 3600.0, top if per[top] > 0 else None, where


def _unique_names(rows: list[HostRow]) -> list[HostRow]:
    """Two hosts that call themselves the same (containers, a cloned image) are shown by their addresses:
    the part that tells them apart would be cut off behind a shared name (the detail shows both)."""
    seen: dict[str, int] = {}
    for r in rows:
        seen[r.host] = seen.get(r.host, 0) + 1
    out = []
    for r in rows:
        if seen[r.host] > 1 and r.host != r.address:
            r = dataclasses.replace(r, host=r.address)
        out.append(r)
    return out


def _cards_share(row: HostRow) -> float:
    """The share of the host's cards the verdict names (8 of 8 before 1 of 8); 0 when it names none."""
    named = [c for c in (row.verdict_cards or "").split(",") if c.strip()]
    return len(named) / row.total if named and row.total else 0.0


def severity_rank(row: HostRow) -> int:
    """How bad the row is, 0 the worst: cards that are gone (a GPU fault), then a host that cannot be seen
    (down, then stale), then each bottleneck in the one order of severity (``vocab.SEVERITY``); rows that
    need no human share the last rank."""
    if row.state == OK and row.bottleneck == GPU_FAULT:
        return 0
    if row.state == DOWN:
        return 1
    if row.state == STALE:
        return 2
    if row.has_bottleneck:
        return 2 + severity(row.bottleneck)
    return 3 + len(SEVERITY)


def sort_key(row: HostRow) -> tuple[int, float, float, str, str]:
    """:data:`SORT_ORDER_HELP` as a key."""
    rank = severity_rank(row)
    if row.needs_attention:
        return (rank, -_cards_share(row), -(row.confidence or 0.0), row.host, row.key)
    return (rank, -1.0 if row.util is None else row.util, 0.0, row.host, row.key)


def _by_util(row: HostRow) -> tuple[bool, float, str, str]:
    return (row.util is None, row.util or 0.0, row.host, row.key)


def _by_lost(row: HostRow) -> tuple[bool, float, str, str]:
    return (row.gpu_hours_lost is None, -(row.gpu_hours_lost or 0.0), row.host, row.key)


#: The screen's orders (``s`` cycles them), the first the view's own (:data:`SORT_ORDER_HELP`): severity, host
#: name, lowest mean GPU-Util first (n/a last), most GPU-hours lost first (n/a last).
SORTS: dict[str, Callable[[HostRow], Any]] = {
    "severity": sort_key,
    "host": lambda r: (r.host, r.key),
    "lowest GPU-Util": _by_util,
    "most GPU-hours lost": _by_lost,
}


def matches(row: HostRow, text: str) -> bool:
    """The screen's filter (``/``): ``text`` (any case) in the host's name or address, its scrape job, its state,
    bottleneck or pattern, or an owner's name. Empty: every row."""
    needle = text.strip().lower()
    if not needle:
        return True
    fields = (row.host, row.address, row.hostname, row.job, row.state, row.bottleneck, row.pattern, *row.owners)
    return any(needle in f.lower() for f in fields if f)


def order_rows(rows: Iterable[HostRow]) -> tuple[HostRow, ...]:
    """Rows in the order of :data:`SORT_ORDER_HELP`, hosts of the same name told apart by address."""
    return tuple(sorted(_unique_names(list(rows)), key=sort_key))


def build_rows(hosts: Iterable[HostData]) -> tuple[HostRow, ...]:
    """Every host's row, in the order of :data:`SORT_ORDER_HELP`."""
    return order_rows(build_row(h) for h in hosts)
