"""The engine's raw verdict on every tick a recorder writes (trace v3's ``verdict`` column), so that a fleet's
summary reads verdicts instead of running the engine again (``fleet/stored.py``).

:class:`VerdictStamp` keeps the dashboard's rolling window (the same capacity, :func:`~gpu_triage.window.
window_capacity`, and thresholds) over the ticks being recorded and diagnoses each one. The window starts
afresh where ``diagnose FILE`` starts it when it reads the recording back: at the first tick of each file (a
dataset's hourly files included) and after a gap (no tick for more than ``GAP_INTERVALS`` intervals, the
offline reading's one definition, :mod:`gpu_triage.offline.gaps`). So a stored verdict is what ``diagnose``
recomputes at that tick, up to the precision the file keeps (docs/trace-v3.md).

The ticks are the product: a diagnosis that fails leaves that tick's verdict None, is logged once with its
traceback (later failures at debug level, counted), and the window starts afresh at the next tick.

The settings the verdicts were judged with (the window and a digest of the thresholds) go into the file's host
metadata under ``verdicts`` (:func:`with_settings`), so that a reader with other settings knows to judge the
file again (:func:`settings_fit`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from gpu_triage.model import HostInfo, Tick, VerdictSample
from gpu_triage.offline.gaps import gap_limit

if TYPE_CHECKING:
    from gpu_triage.diagnosis.engine import Verdict
    from gpu_triage.diagnosis.thresholds import Thresholds

log = logging.getLogger(__name__)

SETTINGS_KEY = "verdicts"  # the host metadata's key (``gpu_triage.host``) naming the verdicts' settings


def thresholds_digest(thresholds: Thresholds) -> str:
    """A short name of the thresholds' values, stable across runs and machines: the first 16 hex digits of the
    SHA-256 of their JSON, fields sorted by name, numbers as floats (``5`` in a config file is 5.0; Python
    writes a float back exactly)."""
    values = {f.name: _number(getattr(thresholds, f.name)) for f in dataclasses.fields(thresholds)}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def _number(v: Any) -> Any:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


def settings(thresholds: Thresholds, window_s: float) -> dict[str, Any]:
    """What a file records of the settings its verdicts were judged with."""
    return {"window_s": float(window_s), "thresholds": thresholds_digest(thresholds)}


def with_settings(host: HostInfo, thresholds: Thresholds, window_s: float) -> HostInfo:
    """A copy of ``host`` whose metadata names the verdicts' settings (``host`` itself is left as it is)."""
    return dataclasses.replace(host, extra={**host.extra, SETTINGS_KEY: settings(thresholds, window_s)})


def _defaults() -> dict[str, Any]:
    from gpu_triage.diagnosis.thresholds import DEFAULT_WINDOW_S, Thresholds  # noqa: PLC0415 - with the engine

    return settings(Thresholds(), DEFAULT_WINDOW_S)


def settings_fit(extra: dict[str, Any], thresholds: Thresholds, window_s: float) -> bool:
    """Whether the verdicts stored in a file whose host metadata is ``extra`` are the ones a reader judging
    with ``thresholds`` and ``window_s`` would give. A file without the key (recorded before it was written):
    unknown settings, taken only by a reader with the default ones."""
    stored = extra.get(SETTINGS_KEY, _defaults()) if isinstance(extra, dict) else _defaults()
    return isinstance(stored, dict) and stored == settings(thresholds, window_s)


def merged_settings(seen: list[Any]) -> Any:
    """The settings of verdicts merged from several files (``compact``): each file's ``verdicts`` value, None
    for one without the key. One value all agree on: it; unknown ones beside the defaults: None (no key: taken
    under the defaults only, as each part would be); else ``{"mixed": [...]}``, which fits no reader: the
    verdicts are kept, and a summary judges the file again."""
    distinct: list[Any] = []
    for s in seen:
        if s not in distinct:
            distinct.append(s)
    if len(distinct) == 1:
        return distinct[0]
    if not distinct or all(s is None or s == _defaults() for s in distinct):
        return None
    return {"mixed": distinct}


def verdict_sample(v: Verdict) -> VerdictSample:
    """What a recording keeps of a raw verdict: its pattern, bottleneck, mechanism (None before any rule
    named one), confidence as the word the screen shows, and the cards it names."""
    from gpu_triage.diagnosis.verdict import confidence_word  # noqa: PLC0415 - numpy, with the engine

    return VerdictSample(str(v.pattern), str(v.bottleneck), str(v.mechanism) or None,
                         confidence_word(v.confidence), [int(g) for g in v.gpus])


class VerdictStamp:
    """Diagnoses each recorded tick over the rolling window and returns the tick with its ``verdict`` set.

    ``track``: also feed the dashboard's hysteresis (:class:`~gpu_triage.diagnosis.tracker.VerdictTracker`),
    whose log lines say when the shown verdict changes (``record --log-file`` at info)."""

    def __init__(self, thresholds: Thresholds, window_s: float, interval_s: float, cpu_count: int | None,
                 *, track: bool = False) -> None:
        # numpy and the engine load here, when a recorder starts: not when the CLI only parses its arguments
        from gpu_triage.diagnosis.engine import diagnose  # noqa: PLC0415
        from gpu_triage.diagnosis.tracker import VerdictTracker  # noqa: PLC0415
        from gpu_triage.window import RollingWindow, window_capacity  # noqa: PLC0415

        self._diagnose = diagnose
        self._thresholds = thresholds
        self._cpu_count = cpu_count
        self._window = RollingWindow(window_capacity(window_s, interval_s)[0])
        self._gap_s = gap_limit(interval_s)
        self._tracker = VerdictTracker(thresholds) if track else None
        self._last_t: float | None = None
        self.failures = 0  # ticks recorded without a verdict because the diagnosis failed

    def __call__(self, tick: Tick, *, fresh: bool = False) -> Tick:
        """``tick`` with its raw verdict. ``fresh``: the tick begins a new file (the window starts afresh)."""
        t = tick.ts.timestamp()
        if fresh or self._last_t is None or not 0 < t - self._last_t <= self._gap_s:
            self._window.clear()  # a new file, a gap, or a clock that went back: what diagnose FILE would do
        self._last_t = t
        try:
            self._window.append(tick)
            view = self._window.view()
            raw = self._diagnose(view, self._thresholds, self._cpu_count)
            if self._tracker is not None:
                self._tracker.update(t, raw, view)
            stamped = verdict_sample(raw)
        except Exception:  # a diagnosis bug must not cost a tick: this tick goes without its verdict
            self.failures += 1
            if self.failures == 1:
                log.exception("diagnosing a recorded tick failed; its verdict is not recorded (said once; the "
                              "recording goes on, the window starts afresh)")
            else:
                log.debug("diagnosis failed again at %s (%d ticks without a verdict)", tick.ts, self.failures)
            self._last_t = None
            return tick
        return dataclasses.replace(tick, verdict=stamped)
