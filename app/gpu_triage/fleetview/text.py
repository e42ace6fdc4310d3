"""Strings from a scrape, made safe to draw on a terminal.

Every label value and error text in the fleet view comes from another machine (an exporter anyone on the
network can stand in for, or a Prometheus holding what such exporters said): an ESC or CSI sequence in a
label would move the cursor or recolour the screen, a newline would break a row, a bidi override would
reorder it, and a 1 MB label would be a 1 MB cell. What :func:`clean` returns has none of those.
"""

from __future__ import annotations

MAX_TEXT = 120  # characters of one outside string kept for a cell or an error line (a host name, a pod)


def clean(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as one printable line: control and format characters (C0, C1, DEL, bidi overrides,
    zero-width) become ``?``, other whitespace a space, and past ``limit`` characters it ends in ``…``."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit * 4:  # never walk a huge string character by character
        text = text[: limit * 4]
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif ch in "\t\n\r\v\f":
            out.append(" ")
        else:
            out.append("?")
        if len(out) > limit:
            break
    line = "".join(out)
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line

