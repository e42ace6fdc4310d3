"""A comparison of two runs as aligned plain text (``gpu-triage compare`` without ``--json``): the headline,
the files, what changed overall, per card and on the host, and the metadata that differs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_triage.compare import promise
from gpu_triage.compare.changes import PP_FLOOR, REL_FLOOR_PCT, changed, describe, unit_of
from gpu_triage.compare.jobs import render_job
from gpu_triage.compare.runs import CARD_METRICS, HOST_METRICS
from gpu_triage.trace.stream import unfinished_line
from gpu_triage.units import fmt_bytes

_BYTES_KEYS = {"mem_used_mean_bytes", "pcie_mean_bytes_per_s", "nvlink_mean_bytes_per_s"}


def _fmt_value(key: str, v: float | None, signed: bool = False, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if key in _BYTES_KEYS:
        return fmt_bytes(v, per_s="per_s" in key, signed=signed, digits=2)
    sign = "+" if signed and v > 0 else ""
    text = f"{sign}{v:.1f}"
    return f"{text} pp" if unit == "pp" and signed else text


def _fmt_pct(c: dict[str, Any]) -> str:
    if c.get("unit") == "%":
        return ""  # a percentage's change is in points, in the change column
    v = c.get("change_pct")
    return "n/a" if v is None else f"{v:+.0f}%"


def render_text(result: dict[str, Any], show_all: bool = False) -> str:  # noqa: C901 - one report, its parts in order
    """Aligned plain text, readable in a terminal and through a pipe: the headline first, then what changed
    (everything with ``show_all``), per card only for the cards that changed."""
    from gpu_triage.offline.render import human_duration

    if "headline" not in result:
        describe(result)
    lines: list[str] = [result["headline"]["text"], ""]
    for side in ("before", "after"):
        f = result[side]
        rec = ", recovered stream" if f["recovered"] else ""
        gaps = ""
        if f.get("gaps"):
            gaps = f", {f['gaps']} gap{'s' if f['gaps'] > 1 else ''} of {human_duration(f['gap_s'])} left out"
        if f.get("repeated_ticks"):  # a dataset side whose files repeat ticks (copies): each counted once
            gaps += f", {f['repeated_ticks']} repeated ticks left out"
        files = ""
        if "files" in f:  # a dataset side (gpu_triage.fleet_history.compare)
            hosts = f["hosts"]
            files = (f"{f['files']} file{'s' * (f['files'] != 1)} from "
                     f"{hosts[0] if len(hosts) == 1 else f'{len(hosts)} hosts'}, ")
        lines.append(
            f"{side:<7} {f['path']}  ({files}{f['ticks']} ticks, {human_duration(f['duration_s'])} at "
            f"{f['interval_s']:g} s{gaps}{rec})"
        )
        if trim := f.get("trimmed"):  # gpu_triage.compare.trim: the run's idle start and end
            parts = [f"{human_duration(trim['start_s'])} before"] if trim["start_ticks"] else []
            parts += [f"{human_duration(trim['end_s'])} after"] if trim["end_ticks"] else []
            lines.append(f"        left out: {' and '.join(parts)} the work ({trim['by']})")
        for skip in f.get("skipped", []):
            lines.append(f"        left out (unreadable): {skip['path']}: {skip['reason']}")
        for p in f.get("leftovers", []):
            lines.append(f"        not read: {unfinished_line(Path(p))}")
    if not show_all and not result["headline"]["changed"]:
        lines.append("")
        lines.extend(_metadata_lines(result["metadata_differences"]))
        lines.append("")
        lines.append("(--all shows every figure)")
        return "\n".join(lines)
    lines.extend(render_job(result.get("job"), show_all))
    lines.extend(promise.render(result.get("prediction")))
    hidden = False

    def block(title: str, rows: dict[str, dict[str, Any]], labels: Callable[[str], str]) -> None:
        nonlocal hidden
        shown = {k: c for k, c in rows.items() if show_all or c.get("changed", True)}
        same = [labels(k) for k in rows if k not in shown]
        hidden = hidden or bool(same)
        lines.append("")
        if not shown:
            lines.append(f"{title}: unchanged")
            return
        w = max([26, *(len(labels(k)) + 2 for k in shown)])  # a diagnosis key can be longer than a label
        lines.append(title)
        lines.append(f"  {'':<{w}}{'before':>13}{'after':>13}{'change':>14}{'%':>8}")
        for key, c in shown.items():
            lines.append(
                f"  {labels(key):<{w}}{_fmt_value(key, c['before']):>13}{_fmt_value(key, c['after']):>13}"
                f"{_fmt_value(key, c['change'], True, c.get('change_unit', '')):>14}{_fmt_pct(c):>8}".rstrip()
            )
        if same:
            lines.append(f"  unchanged: {', '.join(same)}")

    card_labels = dict(CARD_METRICS)
    block("all cards", result["overall"], card_labels.__getitem__)
    if "hosts" in result:  # a dataset side over several hosts: a block per host, the cards in --json
        for host, rows in result["hosts"].items():
            block(f"all cards of {host}", rows, card_labels.__getitem__)
    elif len(result["cards"]) > 1:  # with one card its block would repeat "all cards"
        same_cards, like_all = [], []
        for card, rows in result["cards"].items():
            if show_all:
                block(f"card {card}", rows, card_labels.__getitem__)
            elif not any(c.get("changed", True) for c in rows.values()):
                same_cards.append(card)
            elif _like(rows, result["overall"]):
                like_all.append(card)
            else:
                block(f"card {card}", rows, card_labels.__getitem__)
        for cards, what in ((like_all, "as all cards"), (same_cards, "unchanged")):
            if cards:
                hidden = True
                lines.append("")
                lines.append(f"card{'s' * (len(cards) > 1)} {', '.join(cards)}: {what}")
    block("host", result["host"], dict(HOST_METRICS).__getitem__)
    if result["diagnosis"] is None:
        lines.append("")
        lines.append("diagnosis: n/a (the offline diagnosis is not available in this installation)")
    else:
        block("diagnosis: share of time %", result["diagnosis"], lambda k: k)
    lines.append("")
    lines.extend(_metadata_lines(result["metadata_differences"]))
    if hidden:
        lines.append("")
        lines.append(f"(left out: changes under {PP_FLOOR:g} pp, or {REL_FLOOR_PCT:g} % for the rest; --all shows "
                     "every figure)")
    return "\n".join(lines)


def _like(rows: dict[str, dict[str, Any]], overall: dict[str, dict[str, Any]]) -> bool:
    """Whether a card changed as all cards did: the same figures changed, each by the change of all cards
    within twice the noise floor (a difference of two changes holds the noise of both). Its table would
    repeat the "all cards" block (eight cards that changed alike); a level that differs but did not change
    is no news of the comparison."""
    for key, c in rows.items():
        o = overall.get(key, {})
        if bool(c.get("changed")) != bool(o.get("changed")):
            return False
        if c.get("changed") and changed({"before": c.get("change"), "after": o.get("change")},
                                        c.get("unit", unit_of(key)), floors=2.0):
            return False
    return True


def _metadata_lines(diffs: dict[str, dict[str, Any]]) -> list[str]:
    if not diffs:
        return ["metadata: the same (driver, env vars, interval, cards, host)"]
    return ["metadata that differs", *(f"  {key}: {d['before']!r} -> {d['after']!r}" for key, d in diffs.items())]
