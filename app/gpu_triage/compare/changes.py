"""What changed between two runs: each compared figure's unit, whether it moved beyond its noise floor,
what happened to the dominant bottleneck, and the one line a comparison leads with (:func:`headline`).

Works on the dict :func:`gpu_triage.compare.runs.compare_traces` builds (and ``fleet compare``'s), in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gpu_triage.compare.jobs import scaling_line
from gpu_triage.diagnosis.vocab import label

# A change smaller than these reads as unchanged. Percentages: 1 point (NVML's utilisation samples are whole
# per cent, and a mean shown to a tenth moving by less than a point is the sampling, not the run). The rest:
# 2 % of the larger side (two runs of the same job differ by about that in throughput, power and rates),
# which also covers the display precision (a change that prints as 0.0 or -0 B is far below it).
PP_FLOOR = 1.0
REL_FLOOR_PCT = 2.0
_UNITS = {"samples_per_s": "samples/s", "steps_per_s": "steps/s", "step_time_s": "s", "power_mean_w": "W"}


def unit_of(key: str) -> str:
    """The unit of a compared figure, by its key: "%", "bytes", "bytes/s", "W", "samples/s", "steps/s", "s"."""
    if key in _UNITS:
        return _UNITS[key]
    if key.endswith("_pct"):
        return "%"
    if key.endswith("_bytes_per_s"):
        return "bytes/s"
    return "bytes" if key.endswith("_bytes") else ""


def changed(c: dict[str, Any], unit: str, floors: float = 1.0) -> bool:
    """Whether a before/after pair differs by more than its noise floor (a figure only one side has did);
    ``floors``: that many noise floors."""
    before, after = c.get("before"), c.get("after")
    if before is None or after is None:
        return (before is None) != (after is None)
    if unit == "%":
        return abs(after - before) >= PP_FLOOR * floors
    scale = max(abs(before), abs(after))
    return scale > 0 and abs(after - before) >= scale * REL_FLOOR_PCT * floors / 100.0


def _describe(rows: dict[str, dict[str, Any]] | None, unit: Callable[[str], str]) -> None:
    for key, c in (rows or {}).items():
        u = unit(key)
        c["unit"] = u
        c["change_unit"] = "pp" if u == "%" else u
        c["changed"] = changed(c, u)


def describe(result: dict[str, Any]) -> dict[str, Any]:
    """Adds to each figure of a comparison (in place) its ``unit``, the ``change_unit`` ("pp" for a
    percentage) and whether it ``changed`` beyond the noise floor, then the ``headline``; returns it."""
    if result.get("job"):
        _describe(result["job"]["metrics"], unit_of)
    for block in ("overall", "host"):
        _describe(result[block], unit_of)
    for group in ("cards", "hosts"):
        for rows in (result.get(group) or {}).values():
            _describe(rows, unit_of)
    _describe(result.get("diagnosis"), lambda _k: "%")
    result["headline"] = headline(result)
    return result


DOMINANT_MIN_PCT = 10.0  # a bottleneck for less of the time than this is not "the" bottleneck of a run


def _bottleneck_shares(diagnosis: dict[str, dict[str, Any]], side: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, c in diagnosis.items():
        b = key.rpartition("/")[2]
        if b not in ("none", "start_up") and c.get(side) is not None:
            out[b] = out.get(b, 0.0) + float(c[side])
    return out


def _dominant(shares: dict[str, float]) -> tuple[str | None, float]:
    if not shares:
        return None, 0.0
    b = max(shares, key=shares.__getitem__)
    return (b, shares[b]) if shares[b] >= DOMINANT_MIN_PCT else (None, 0.0)


def bottleneck_change(diagnosis: dict[str, dict[str, Any]] | None) -> str:
    """What happened to the dominant bottleneck (the one the most time went to), in a few words."""
    if diagnosis is None:
        return "no diagnosis in this installation"
    b0, s0 = _dominant(_bottleneck_shares(diagnosis, "before"))
    b1, s1 = _dominant(_bottleneck_shares(diagnosis, "after"))

    if b0 is None and b1 is None:
        return "no bottleneck before or after"
    if b1 is None:
        return f"{label(str(b0))} is no longer the bottleneck ({s0:.0f} % of the time before)"
    if b0 is None:
        return f"{label(b1)} became the bottleneck ({s1:.0f} % of the time)"
    if b0 != b1:
        return f"the bottleneck moved from {label(b0)} to {label(b1)} ({s1:.0f} % of the time)"
    if abs(s1 - s0) >= PP_FLOOR:
        return f"{label(b0)} is still the bottleneck, {s0:.0f} -> {s1:.0f} % of the time"
    return f"{label(b0)} is still the bottleneck ({s1:.0f} % of the time)"


def _rows(result: dict[str, Any]) -> Iterable[dict[str, Any]]:
    if result.get("job"):
        yield from result["job"]["metrics"].values()
    for block in ("overall", "host", "diagnosis"):
        yield from (result.get(block) or {}).values()
    for group in ("cards", "hosts"):
        for rows in (result.get(group) or {}).values():
            yield from rows.values()


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """One line, what changed: the job's samples/s when both sides have it, else the cards' mean GPU-Util,
    and what happened to the dominant bottleneck. ``basis``: the figure it leads with."""
    if not any(c.get("changed") for c in _rows(result)):
        return {"text": f"no change: every figure is within its noise floor ({PP_FLOOR:g} pp for percentages, "
                        f"{REL_FLOOR_PCT:g} % for the rest)", "basis": None, "changed": False}
    job = result.get("job")
    sps = job["metrics"]["samples_per_s"] if job else None
    if sps and sps.get("before") and sps.get("after"):
        basis = "samples_per_s"
        lead = (f"samples/s {sps['change_pct']:+.0f} % ({sps['before']:.0f} -> {sps['after']:.0f})" if sps["changed"]
                else f"samples/s unchanged ({sps['after']:.0f})")
    else:
        basis = "util_mean_pct"
        u = result["overall"]["util_mean_pct"]
        if u.get("before") is None or u.get("after") is None:
            lead = "GPU-Util n/a"
        elif u["changed"]:
            lead = f"GPU-Util {u['change']:+.0f} pp ({u['before']:.0f} -> {u['after']:.0f} %)"
        else:
            lead = f"GPU-Util unchanged ({u['after']:.0f} %)"
    why = bottleneck_change(result.get("diagnosis"))
    if job and job.get("scaling"):  # runs on different card counts: how well the cards added up is the news
        why = f"{scaling_line(job['scaling'])}; {why}"
    return {"text": f"{lead}: {why}", "basis": basis, "changed": True}
