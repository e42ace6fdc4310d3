"""The dashboard's keys, written once: the app's bindings, the key line at the bottom of the screen, the help
screen, ``gpu-triage --help`` and the README's Keys table are all built from (or checked against) ``KEYS``.

Plain data, no Textual: ``cli.py`` reads it for ``--help`` without loading the UI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["live", "replay"]
LIVE: tuple[Mode, ...] = ("live",)
REPLAY: tuple[Mode, ...] = ("replay",)
BOTH: tuple[Mode, ...] = ("live", "replay")


@dataclass(frozen=True, slots=True)
class Key:
    """One row of the key help: what a user presses and what it does, in which mode.

    ``bindings`` are (Textual key names, action) pairs; an empty action means the key is handled by the
    screen it opens (Esc on the detail view). ``footer`` is the short form on the key line, ``footer_in``
    the modes whose key line shows it and ``footer_rank`` its place there (replay's own keys come first).
    """

    shown: str  # as the README writes it, with backticks: "`↑` `↓`"
    help: str
    modes: tuple[Mode, ...]
    bindings: tuple[tuple[str, str], ...]
    footer: str | None = None
    footer_in: tuple[Mode, ...] = BOTH
    footer_rank: int = 50
    priority: tuple[str, ...] = ()  # keys Textual would otherwise take first (Tab moves the focus)

    @property
    def plain(self) -> str:
        """The key(s) without Markdown: "↑ ↓"."""
        return self.shown.replace("`", "")


KEYS: tuple[Key, ...] = (
    Key(
        "`q` `F10` `Ctrl-C`",
        "quit (a recording in progress is closed as a valid file)",
        BOTH,
        (("q", "quit"), ("f10", "quit"), ("ctrl+c", "quit")),
        "q quit",
        footer_rank=0,
        # Textual's own Ctrl-C shows a toast naming ctrl+q; a monitor quits on it (htop, nvitop, btop, watch)
        priority=("ctrl+c", "f10"),
    ),
    Key("`p`", "pause the display (sampling and recording go on)", BOTH, (("p", "pause"),), "p pause", LIVE, 10),
    Key("`↑` `↓`", "select a card (in the detail view: show the previous / next card)", BOTH,
        (("up", "select(-1)"), ("down", "select(1)")), "↑↓ card", footer_rank=60),
    Key(
        "`Enter` / `Esc`",
        "the selected card's charts (GPU-Util with min/max, SM, memory, PCIe/NVLink, power) / back",
        BOTH,
        (("enter", "detail"),),
        "⏎ detail",
        footer_rank=61,
    ),
    Key(
        "`r`",
        "stop the recording in progress (`--record FILE` starts one at launch), or start one in the configured "
        "recordings directory",
        LIVE,
        (("r", "record"),),
        "r record",
        footer_rank=62,
    ),
    Key("`d`", "the doctor's check-up of this machine (in it: `r` checks again, `Esc` back; not over the simulated "
        "server)", BOTH, (("d", "doctor"),), "d doctor", LIVE, 63),
    Key(
        "`Tab`",
        "the process table: `↑` `↓` move in it and a line under it shows the selected process's user and full "
        "command line; `Tab` or `Esc` back to the cards",
        BOTH,
        (("tab", "procs_focus"), ("escape", "procs_unfocus")),
        "Tab procs",
        footer_rank=64,
        priority=("tab",),
    ),
    Key("`j` `k`", "next / previous process (focuses the process table)", BOTH,
        (("j", "proc_move(1)"), ("k", "proc_move(-1)"))),
    Key(
        "`PgUp` `PgDn` `Home` `End`",
        "processes: a page up / down, the first / last",
        BOTH,
        (
            ("pageup", "proc_move('-page')"),
            ("pagedown", "proc_move('page')"),
            ("home", "proc_move('home')"),
            ("end", "proc_move('end')"),
        ),
    ),
    Key(
        "`s` `F6`",
        "sort the processes by card, by GPU memory, by GPU%, by CPU, by user (each press the next)",
        BOTH,
        (("s", "proc_sort"), ("f6", "proc_sort")),
    ),
    Key("`I`", "reverse the sort order (the table's heading shows ↓ or ↑)", BOTH, (("I", "proc_reverse"),)),
    Key(
        "`/` `F3`",
        "filter the processes by part of a name, user, command line or PID, over every process (empty: all)",
        BOTH,
        (("slash", "proc_filter"), ("f3", "proc_filter")),
    ),
    Key(
        "`t` `F5`",
        "DataLoader workers as a tree under their trainer, each with its CPU (again: folded)",
        BOTH,
        (("t", "proc_tree"), ("f5", "proc_tree")),
    ),
    Key(
        "`x` `F9`",
        "send SIGTERM or SIGKILL to the selected process, after a confirmation that names it; refused, with the "
        "reason, for a process you may not signal",
        LIVE,
        (("x", "proc_signal"), ("f9", "proc_signal")),
    ),
    Key(
        "`o`",
        "panes: show, hide and reorder the panes under the header (in it: `↑` `↓` select, `space` show / hide, "
        "`u` `n` move up / down, `Enter` apply, `Esc` cancel); `[ui] panes` in the config file sets them at start",
        BOTH,
        (("o", "panes"),),
    ),
    Key("`?` `F1`", "help", BOTH, (("question_mark", "help"), ("f1", "help")), "? help", footer_rank=99),
    Key("`space`", "play / pause", REPLAY, (("space", "play_pause"),), "space play/pause", footer_rank=1),
    Key("`←` `→`", "one tick back / forward (hold to repeat)", REPLAY, (("left", "step(-1)"), ("right", "step(1)")),
        "←/→ step", footer_rank=2),
    Key(
        "`[` `]`",
        "30 s back / forward",
        REPLAY,
        (("left_square_bracket", "jump(-30)"), ("right_square_bracket", "jump(30)")),
        "[/] ±30s",
        footer_rank=3,
    ),
    Key("`+` `-`", "faster / slower", REPLAY, (("plus,equals_sign", "speed(1)"), ("minus", "speed(-1)")), "+/- speed",
        footer_rank=4),
    Key("`g` `G`", "start / end", REPLAY, (("g", "seek('start')"), ("G", "seek('end')")), "g/G start/end",
        footer_rank=5),
)

REPLAY_ONLY_LABEL = "replay only: "  # the README marks the first replay-only row so


def keys_for(mode: Mode) -> list[Key]:
    return [k for k in KEYS if mode in k.modes]


def action_modes() -> dict[str, tuple[Mode, ...]]:
    """Action name (without arguments) -> the modes where it does something; for ``check_action``."""
    out: dict[str, tuple[Mode, ...]] = {}
    for key in KEYS:
        for _, action in key.bindings:
            out[action.split("(")[0]] = key.modes
    return out


def footer_line(mode: Mode, width: int | None = None) -> str:
    """The key line at the bottom of the screen; at ``width``, the keys ranked last give way first but
    "? help" stays at the end (it lists the rest): at 80 columns the replay's line lost it."""
    shown = sorted((k for k in KEYS if mode in k.footer_in and mode in k.modes and k.footer),
                   key=lambda k: k.footer_rank)
    parts = [k.footer for k in shown if k.footer]
    while width is not None and len(parts) > 2 and len("  ".join(parts)) > width:
        del parts[-2]
    return "  ".join(parts)


def markdown_table() -> list[str]:
    """The README's Keys table, row for row."""
    lines = ["| key | in the dashboard |", "|---|---|"]
    first_replay = True
    for key in KEYS:
        cell = key.shown
        if key.modes == REPLAY and first_replay:
            cell, first_replay = REPLAY_ONLY_LABEL + cell, False
        lines.append(f"| {cell} | {key.help} |")
    return lines


def cli_line() -> str:
    """One line for ``gpu-triage --help``."""
    live = ", ".join(k.footer for k in sorted(keys_for("live"), key=lambda k: k.footer_rank) if k.footer)
    replay = " ".join(k.plain for k in KEYS if k.modes == REPLAY)
    return f"keys in the dashboard: {live}, Esc back; replay adds {replay} (? in the dashboard lists them)"
