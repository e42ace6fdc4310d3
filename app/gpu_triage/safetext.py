"""Text that someone else chose, made safe to draw and to export.

Process names, command lines, user names, NIC and disk names, host names and job log lines come from
outside gpu-triage: on a shared server another user picks them. Written to a terminal as they are, an ESC
starts an escape sequence (set the window title, clear the screen, draw a fake line, write the clipboard
with OSC 52), a CR moves the cursor, and bidirectional overrides reorder what is read. Undecodable bytes
reach Python as lone surrogates (psutil and ``os`` decode with ``surrogateescape``), which cannot be
encoded to UTF-8: one of them in a metric label makes every Prometheus scrape fail.

:func:`clean` replaces each such character with a visible one, keeping everything else:

- C0 controls (U+0000-U+001F) and DEL become their Unicode "control pictures" (ESC -> ␛, BEL -> ␇,
  DEL -> ␡): one column wide, never typed by accident (unlike ``^[``, which a name may hold literally),
  and they say which character it was, so a planted escape sequence is seen for what it is.
- C1 controls (U+0080-U+009F: CSI, OSC and ST have one-character forms), lone surrogates, bidirectional
  controls, zero-width characters and the line/paragraph separators become U+FFFD, the replacement
  character a UTF-8 decoder puts where it cannot read: there is no picture for them, and their code point
  tells a reader nothing.

:func:`clip` is :func:`clean` for one line of text from another machine, cut to a length (the fleet view's
cells and error lines).

Pure and in the lowest layer, so every source can clean what it reads where it enters, and the UI and the
exporter can clean again where they draw or serve (a recording read back, a field nobody thought of).
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"  # invisible: "ro\u200bot" reads as "root"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}{_ZERO_WIDTH}\u2028\u2029]")
CLIP = 120  # characters :func:`clip` keeps by default: a cell or an error line, not a 1 MB label


def _picture(m: re.Match[str]) -> str:
    c = ord(m.group())
    if c < 0x20:
        return chr(0x2400 + c)
    if c == 0x7F:
        return "\u2421"
    return REPLACEMENT


def clean(text: str) -> str:
    """``text`` with every control, bidi-control and undecodable character replaced by a visible one."""
    if _UNSAFE.search(text) is None:  # the common case: nothing to replace, no new string
        return text
    return _UNSAFE.sub(_picture, text)


def clip(value: object, limit: int = CLIP) -> str:
    """``value`` as one visible line of at most ``limit`` characters (:func:`clean`, which keeps the length,
    after a cut that ends in …): for text from another machine drawn in a cell or quoted in an error line."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return clean(text)


def clean_lines(text: str) -> str:
    """:func:`clean` for text of several lines that we laid out: its newlines are kept."""
    if _UNSAFE.search(text) is None:
        return text
    return "\n".join(clean(line) for line in text.split("\n"))


def clean_opt(text: str | None) -> str | None:
    """:func:`clean`, passing None through (a field the system did not give)."""
    return None if text is None else clean(text)


def clean_tree(obj: Any) -> Any:
    """Every string of a JSON-like tree (a command's result: dicts, lists, tuples; dict keys too) through
    :func:`clean`, as one line each: a newline a recording planted in a name cannot start a line of its own
    in the text made from the tree, nor reach a script as a control character in the JSON."""
    if isinstance(obj, str):
        return clean(obj)
    if isinstance(obj, dict):
        return {clean(k) if isinstance(k, str) else k: clean_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(clean_tree(v) for v in obj)
    return obj


def is_clean(text: str) -> bool:
    return _UNSAFE.search(text) is None
