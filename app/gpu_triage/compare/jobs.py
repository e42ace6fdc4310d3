"""The job's side of ``gpu-triage compare``: samples/s before and after (listed first: it is what a tuning
change is for), and scaling efficiency when the two runs used different numbers of cards.

A run's throughput is the mean of its per-tick samples/s from the first to the last tick in which the job
made progress: ticks before it started and after it ended (a log that stopped growing reads 0) do not
count, stalls in between do. Cards used: the job's ``WORLD_SIZE`` from its pulse, else the cards whose mean
GPU-Util was above the idle threshold (a one-card job on a two-card machine used one card).
Scaling efficiency: ``(after / before) / (cards_after / cards_before)``; "2 cards give 1.71x one card: 86 %".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from gpu_triage.trace.reader import TraceFile

JOB_METRICS: tuple[tuple[str, str], ...] = (
    ("samples_per_s", "samples/s"),
    ("steps_per_s", "steps/s"),
    ("step_time_s", "step time s"),
    ("data_wait_pct", "data wait %"),
)


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(vals) if vals else None


def job_summary(trace: TraceFile, idle_util_pct: float = 5.0) -> dict[str, Any] | None:
    """Mean job figures over the stretch the job progressed, and the cards it used; None without job data."""
    return summarise_jobs(trace.table.column("job").to_pylist(), lambda: _busy_cards(trace, idle_util_pct))


def slim_job(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """What :func:`summarise_jobs` reads of one tick's job: kept per tick for a whole dataset."""
    if job is None:
        return None
    out = {k: job.get(k) for k, _ in JOB_METRICS}
    out["source"] = job.get("source")
    out["ranks"] = [{"rank": r.get("rank"), "world_size": r.get("world_size")} for r in job.get("ranks") or [] if r]
    return out


def summarise_jobs(jobs: list[dict[str, Any] | None],
                   busy_cards: Callable[[], int | None]) -> dict[str, Any] | None:
    """:func:`job_summary` of the job column's rows in time order; ``busy_cards()`` counts the cards whose
    mean GPU-Util was above the idle threshold (asked only when the job names no ranks)."""
    present = [j for j in jobs if j is not None]
    if not present:
        return None
    moving = [i for i, j in enumerate(jobs) if j is not None and (j.get("samples_per_s") or j.get("steps_per_s"))]
    span = jobs[moving[0] : moving[-1] + 1] if moving else present
    span = [j for j in span if j is not None]
    out: dict[str, Any] = {k: _mean([j.get(k) for j in span]) for k, _ in JOB_METRICS}
    out["source"] = present[-1].get("source")
    out["cards"] = _job_cards(present, busy_cards)
    return out


def _job_cards(present: list[dict[str, Any]], busy_cards: Callable[[], int | None]) -> int | None:
    """The job's cards: its world size, else the ranks it names, else the busy cards."""
    world = [r.get("world_size") for j in present for r in (j.get("ranks") or []) if r.get("world_size")]
    ranks = {r.get("rank") for j in present for r in (j.get("ranks") or []) if r.get("rank") is not None}
    if world:
        return max(world)
    if ranks:
        return len(ranks)
    return busy_cards()


def _busy_cards(trace: TraceFile, idle_util_pct: float) -> int | None:
    sums: dict[int, list[float]] = {}
    for gpus in trace.table.column("gpus").to_pylist():
        for g in gpus or []:
            if g and g.get("util_pct") is not None:
                sums.setdefault(int(g["index"]), []).append(float(g["util_pct"]))
    busy = [i for i, v in sums.items() if v and statistics.fmean(v) > idle_util_pct]
    return len(busy) or None


def compare_job(before: TraceFile, after: TraceFile, idle_util_pct: float = 5.0) -> dict[str, Any] | None:
    """Before/after job figures with their change, and scaling when the card counts differ; None if neither
    recording has job data."""
    return compare_job_summaries(job_summary(before, idle_util_pct), job_summary(after, idle_util_pct))


def compare_job_summaries(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two :func:`summarise_jobs` results side by side (see :func:`compare_job`)."""
    if a is None and b is None:
        return None
    a, b = a or {}, b or {}
    rows = {}
    for key, _ in JOB_METRICS:
        x, y = a.get(key), b.get(key)
        change = None if x is None or y is None else y - x
        rows[key] = {"before": x, "after": y, "change": change,
                     "change_pct": None if change is None or not x else 100.0 * change / abs(x)}
    scaling = None
    ca, cb = a.get("cards"), b.get("cards")
    sa, sb = a.get("samples_per_s"), b.get("samples_per_s")
    if ca and cb and ca != cb and sa and sb:
        speedup = sb / sa
        scaling = {"cards_before": ca, "cards_after": cb, "speedup": speedup,
                   "efficiency_pct": 100.0 * speedup / (cb / ca)}
    return {"metrics": rows, "cards": {"before": ca, "after": cb}, "scaling": scaling,
            "source": {"before": a.get("source"), "after": b.get("source")}}


def _cards(n: int) -> str:
    return "one card" if n == 1 else f"{n} cards"


def scaling_line(s: dict[str, Any]) -> str:
    """ "2 cards give 1.71x one card: 86 %" """
    return (f"{_cards(s['cards_after'])} give{'s' if s['cards_after'] == 1 else ''} {s['speedup']:.2f}x "
            f"{_cards(s['cards_before'])}: {s['efficiency_pct']:.0f} % scaling efficiency")


def render_job(job: dict[str, Any] | None, show_all: bool = True) -> list[str]:
    """The job block of the text report (first after the file lines); one n/a line without job data.
    Unless ``show_all``, a figure marked unchanged (``compare.runs.describe``) is named, not tabled."""
    if job is None:
        return ["", "job: n/a (no job data in either recording: record with --job-log or gpu_triage.pulse)"]
    lines = ["", "job (the training's own clock)", f"  {'':<26}{'before':>13}{'after':>13}{'change':>14}{'%':>8}"]
    same = []
    for key, label in JOB_METRICS:
        c = job["metrics"][key]
        if not show_all and not c.get("changed", True):
            same.append(label)
            continue
        pp = c.get("change_unit") == "pp"  # a percentage changes by points; its relative change is no figure
        change = _v(c["change"], True) + (" pp" if pp and c["change"] is not None else "")
        lines.append(f"  {label:<26}{_v(c['before']):>13}{_v(c['after']):>13}{change:>14}"
                     f"{'' if pp else _p(c['change_pct']):>8}".rstrip())
    if len(same) == len(JOB_METRICS):
        lines[1:] = [f"{lines[1]}: unchanged"]
    elif same:
        lines.append(f"  unchanged: {', '.join(same)}")
    if job["scaling"] is not None:
        lines.append(f"  scaling: {scaling_line(job['scaling'])}")
    return lines


def _v(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    sign = "+" if signed else ""
    return f"{x:{sign}.1f}" if abs(x) >= 10 else f"{x:{sign}.3f}"


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"
