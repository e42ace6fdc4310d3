"""The doctor's report as text for people: sections, aligned columns, the topology matrix drawn, colour only
on a terminal (and never with NO_COLOR set)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import IO, Any

from gpu_triage.topology import is_nvlink

SECTIONS = (
    ("gpu.", "GPUs"),
    ("topology.", "Topology"),
    ("host.", "Host"),
    ("software.", "Software"),
    ("traffic.", "Gradient traffic"),
)

_ANSI = {"ok": "32", "warn": "33", "fail": "31;1", "skip": "2", "dim": "2", "bold": "1",
         "nv": "32", "pcie": "33", "sys": "31"}


def use_colour(stream: IO[str] | Any, env: Mapping[str, str]) -> bool:
    if "NO_COLOR" in env or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class _Paint:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, text: str, style: str) -> str:
        return f"\x1b[{_ANSI[style]}m{text}\x1b[0m" if self.on else text


def label_style(label: str) -> str:
    """Green for NVLink, yellow for PCIe within a socket, red across sockets; dim for X and n/a."""
    if is_nvlink(label):
        return "nv"
    if label in ("PIX", "PXB", "PHB", "NODE"):
        return "pcie"
    if label == "SYS":
        return "sys"
    return "dim"


def render_matrix(matrix: list[list[str]], paint: Any = None, numa: list[int | None] | None = None) -> list[str]:
    """The matrix as nvidia-smi draws it: GPU names across and down, one aligned column per card."""
    paint = paint or _Paint(False)
    n = len(matrix)
    heads = [f"GPU{i}" for i in range(n)]
    width = max([len(h) for h in heads] + [len(c) for row in matrix for c in row] + [3]) + 2
    first = max(len(h) for h in heads) + 2
    numa_head = "  NUMA" if numa is not None else ""
    lines = [" " * first + "".join(h.ljust(width) for h in heads).rstrip() + numa_head]
    for i, row in enumerate(matrix):
        cells = "".join(paint(c.ljust(width), label_style(c)) for c in row)
        node = ""
        if numa is not None:
            node = "  " + ("n/a" if numa[i] is None else str(numa[i]))
        lines.append(heads[i].ljust(first) + cells + node)
    return lines


def _wrapped(text: str, indent: int, width: int | None) -> list[str]:
    """``text`` in lines that fit ``width`` columns, continuation lines under the first one's text."""
    if width is None or width - indent < 20:
        return [text]
    return textwrap.wrap(text, width - indent, break_on_hyphens=False) or [""]


TAG_WIDTH = 6  # "WARN  ": the widest status and its gap


def _check_lines(c: Any, paint: _Paint, id_width: int, width: int | None) -> list[str]:
    """One check: its status, id and summary, then its advice (marked "->" unless it is ok), each wrapped under
    its own column."""
    tag = paint(c.status.upper().ljust(TAG_WIDTH), c.status)
    pad = " " * (2 + TAG_WIDTH + id_width)
    first, *rest = _wrapped(c.summary, len(pad), width)
    lines = [f"  {tag}{c.id.ljust(id_width)}{first}", *(pad + line for line in rest)]
    if c.advice:
        mark = "-> " if c.status != "ok" else "   "
        for k, line in enumerate(_wrapped(c.advice, len(pad) + 3, width)):
            lines.append(pad + paint((mark if k == 0 else "   ") + line, "dim"))
    return lines


def render_text(report: Any, colour: bool = False, width: int | None = None) -> str:
    """The whole report; ``report`` is a :class:`gpu_triage.doctor.run.Report`. With ``width`` (a terminal's
    columns) summaries and advice wrap under their own column instead of running back to the margin."""
    paint = _Paint(colour)
    f = report.facts
    out: list[str] = []
    host = f.host.hostname or "this machine"
    out.append(paint(f"gpu-triage doctor: {host}", "bold"))
    id_width = max(len(c.id) for c in report.checks) + 2
    for prefix, title in SECTIONS:
        checks = [c for c in report.checks if c.id.startswith(prefix)]
        if not checks:
            continue
        out.append("")
        out.append(paint(title, "bold"))
        for c in checks:
            out.extend(_check_lines(c, paint, id_width, width))
        if prefix == "topology." and len(f.topology) > 1:
            out.append("")
            numa = [g.numa_node for g in f.gpus] if len(f.gpus) == len(f.topology) else None
            out.extend("    " + line for line in render_matrix(f.topology, paint, numa))
            legend = "NV# = # NVLink links; PIX/PXB = PCIe switch(es); PHB/NODE = through the CPU; SYS = across sockets"
            out.append("    " + paint(legend, "dim"))
    counts = {s: sum(1 for c in report.checks if c.status == s) for s in ("ok", "warn", "fail", "skip")}
    out.append("")
    verdicts = {"ok": "all good", "warn": "usable, with warnings", "fail": "fix the failures before training"}
    verdict = verdicts[report.status]
    skipped = f", {counts['skip']} skipped" if counts["skip"] else ""
    tally = f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail{skipped}"
    out.extend(paint(line, report.status) for line in _wrapped(f"{tally}: {verdict}", 0, width))
    return "\n".join(out) + "\n"
