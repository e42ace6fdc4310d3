"""The diagnosis pane: the verdict, its evidence and its advice, the strip of recent verdicts, and the raw
facts when there is no verdict to show."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from rich.text import Text

from gpu_triage.diagnosis.engine import Verdict, format_confidence
from gpu_triage.diagnosis.present import CHANGING
from gpu_triage.ui.formatters import (
    pct,
    quiet_nan_warnings,
    rate,
)
from gpu_triage.ui.glyphs import (
    Runs,
)
from gpu_triage.ui.panes import PATTERN_COLOURS, Colours
from gpu_triage.window import WindowView


@dataclass(slots=True)
class FactsOnly:
    """The diagnosis pane with no verdict to show (no tick yet, or the engine failed): the raw facts."""

    lines: list[str]


Shown: TypeAlias = Verdict | FactsOnly  # what the diagnosis pane shows: the tracker's verdict, or the raw facts


ADVICE_MAX_LINES = 3  # the first advice line wraps (at 80 columns the fix is past the edge); the rest are cut


def first_advice_lines(shown: Shown, width: int) -> list[str]:
    """The verdict's first advice ("→ …") wrapped at ``width`` under itself, at most ADVICE_MAX_LINES lines."""
    if isinstance(shown, FactsOnly) or not shown.advice:
        return []
    wrapped = textwrap.wrap(
        "→ " + shown.advice[0], width=max(10, width), subsequent_indent="  ", break_on_hyphens=False
    ) or ["→"]
    if len(wrapped) > ADVICE_MAX_LINES:
        wrapped = wrapped[:ADVICE_MAX_LINES]
        wrapped[-1] = _cut(wrapped[-1] + " …", width)
    return [_cut(w, width) for w in wrapped]


def _changing_at(shown: Verdict) -> set[int]:
    """Which evidence lines say the verdict is changing (present.on_screen): drawn under the headline."""
    return {i for i, f in enumerate(shown.evidence_facts) if f.get("metric") == CHANGING and i < len(shown.evidence)}


def verdict_need(shown: Shown, width: int, inside: int = 0) -> tuple[int, int]:
    """(lines of the headline, a changing line and the wrapped first advice, evidence bullets and the ``inside``
    lines after them): what the layout keeps first."""
    if isinstance(shown, FactsOnly):
        return 1 + len(first_advice_lines(shown, width)), inside
    changing = len(_changing_at(shown))
    # the headroom line is not counted: it takes an evidence line's room rather than a graph's
    return 1 + changing + len(first_advice_lines(shown, width)), len(shown.evidence) - changing + inside


def _cut(text: str, width: int) -> str:
    """``text`` in ``width`` columns, an ellipsis marking what was cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def diag_pane(shown: Shown, history: list[tuple[float, str, str]], view: WindowView, width: int, lines: int,
              colours: Colours, inside: list[str] | None = None) -> Text:
    """Headline, past-verdicts strip, evidence, ``inside`` (what the waiting processes were doing, from their
    stacks: ui/inside_lines.py), advice. With too few lines the first advice line is kept before any evidence
    bullet and the strip goes first (the fix is what the user came for); the inside lines go before the
    evidence."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    if isinstance(shown, FactsOnly):
        out.append("FACTS "[:width], "bold")
        out.append(("  ·  ".join(shown.lines) or "waiting for ticks")[: max(0, width - 6)])
        evidence: list[str] = []
        all_advice: list[str] = []
        changing: list[str] = []
    else:
        bad = shown.bottleneck != "none"
        out.append("VERDICT ", "bold")
        out.append(shown.pattern, f"bold {PATTERN_COLOURS.get(shown.pattern, '')}")
        out.append(" · ")
        out.append(shown.bottleneck, f"bold reverse {colours.alert}" if bad else "bold")
        extra = ""
        if shown.gpus:
            extra += f"  GPU {','.join(map(str, shown.gpus))}"
        # no card to read: a confidence would rate a GPU verdict that was never possible
        extra += f"  {format_confidence(shown.confidence)}" if view.n_gpus else "  no GPU: host facts only"
        out.append(extra)
        out.truncate(width)
        # a verdict shown while it changes says so first (present.on_screen): its first line, under the headline
        at = _changing_at(shown)
        changing = [_cut(shown.evidence[i], width) for i in sorted(at)]
        evidence = [_cut("• " + e, width) for i, e in enumerate(shown.evidence) if i not in at]
        hr = shown.headroom
        if hr is not None and hr.kind != "none":  # what fixing it is worth, after the two lines it rests on
            evidence.insert(min(2, len(evidence)), _cut(hr.line(), width))
        all_advice = shown.advice
    room = lines - 1
    for text in changing[:room]:
        out.append("\n")
        out.append(text, f"bold {colours.alert}")
        room -= 1
    advice = first_advice_lines(shown, width)[:room]
    room -= len(advice)
    evidence = [*evidence, *(_cut(line, width) for line in inside or ())][:room]
    room -= len(evidence)
    strip = room >= 1
    room -= int(strip)
    more_advice = [_cut("→ " + a, width) for a in all_advice[1:]][: max(0, room)]
    if strip:
        out.append("\n")
        out.append_text(verdict_strip(history, view, width))
    for text in evidence:
        out.append("\n")
        out.append(text)
    for text in [*advice, *more_advice]:
        out.append("\n")
        out.append(text, f"bold {colours.sm}" if text in advice else colours.sm)
    return out


def verdict_strip(history: list[tuple[float, str, str]], view: WindowView, width: int) -> Text:
    """Past verdicts over the window, one coloured cell per tick (newest right); red mark = bottleneck."""
    label = "past "
    out = Text(label, "grey50", no_wrap=True, end="")
    cells = width - len(label)
    if not view.n or not history:
        return out
    t0 = float(view.t[0])
    recent = [h for h in history if h[0] >= t0 - 1e-6][-cells:]
    out.append(" " * (cells - len(recent)))
    runs = Runs(out)
    for _, pattern, bottleneck in recent:
        ch = "▆" if bottleneck in (None, "none") else "▇"
        runs.add(ch, PATTERN_COLOURS.get(pattern, "white") + ("" if bottleneck in (None, "none") else " underline"))
    runs.flush()
    return out


def facts(view: WindowView) -> list[str]:
    """The two-minute method's raw facts, shown while no diagnosis engine is there."""
    if not view.n:
        return []
    with quiet_nan_warnings():
        gpu = float(np.nanmean(view.gpu["util_pct"])) if view.n_gpus else float("nan")
        cpu = float(np.nanmean(view.cpu)) if view.cpu.size else float("nan")
        disk = float(np.nanmax(np.nanmean(view.disk["busy_pct"], axis=0))) if view.disk_names else float("nan")
        links = float(
            np.nansum(
                [np.nanmean(view.gpu[f]) for f in ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s",
                                                    "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")]
            )
        ) if view.n_gpus else float("nan")
    return [f"GPU mean{pct(gpu)}", f"CPU busy{pct(cpu)}", f"disk busy{pct(disk)}", f"links {rate(links)}"]
