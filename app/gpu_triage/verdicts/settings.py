"""The settings a recording's stored verdicts were judged with (the window and a digest of the thresholds),
kept in the file's host metadata under ``verdicts`` (:func:`with_settings`), so that a reader with other
settings knows to judge the file again (:func:`settings_fit`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

from gpu_triage.model import HostInfo

if TYPE_CHECKING:
    from gpu_triage.diagnosis.thresholds import Thresholds

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
