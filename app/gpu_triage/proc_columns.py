"""The process table's columns, shared by the dashboard's process pane and the text ``snapshot``: what each
column is called, how wide it is, how its value is written, and which columns a width keeps.

A column is kept or dropped whole, heading and values together: values without their heading read as another
column's. Columns go by rank (the lowest
rank stays longest); COMMAND comes last and takes the rest of the line, so that a command line of any
length, in any script, never moves another column.

Pure text (no Textual, no rich): the values come in as plain fields, cleaned where they entered
(gpu_triage.safetext) and cleaned again here, since a recording read back may hold anything.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from gpu_triage.model import ProcSample
from gpu_triage.safetext import clean
from gpu_triage.units import fmt_pct, short_bytes

COMMAND = "COMMAND"
COMMAND_MIN = 20  # the COMMAND heading with the table's state beside it ("COMMAND [by card ↑]")
COMMAND_TEXT_MAX = 160  # cells of COMMAND in the text snapshot (the dashboard's width cuts it there)
WORKERS_CPU = "WORKERS' CPU%"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    width: int
    rank: int  # the lowest ranks stay at a narrow width
    left: bool = False  # aligned to the left (text), else to the right (figures)


# In the order drawn. Ranks: what answers "whose process, on which card, doing what" first; then the card's
# share and the workers (the method's evidence); then the owner's job, run time and host memory.
GPU_COLUMNS = (
    Column("PID", 7, 0),
    Column("USER", 8, 1, left=True),
    Column("OWNER", 14, 6, left=True),
    Column("GPU", 3, 1),
    Column("GPU MEM", 7, 1),
    Column("GPU%", 4, 2),
    Column("CPU%", 5, 1),
    Column("RSS", 5, 7),
    Column("TIME", 8, 4),
    Column("WORKERS", 7, 3),
    Column(WORKERS_CPU, 13, 5, left=True),
)
# no GPU (host-only): the card's columns would be dashes; the owner is not read for host processes
HOST_COLUMNS = (Column("PID", 7, 0), Column("USER", 8, 1, left=True), Column("CPU%", 5, 1),
                Column("RSS", 5, 7), Column("TIME", 8, 4))
OWNER_KNOWN_RANK = 3  # processes of several owners (a shared box): OWNER says whose each one is


def choose(columns: tuple[Column, ...], width: int | None, *, owners: bool = False) -> list[Column]:
    """The columns a line of ``width`` cells holds beside COMMAND (at least COMMAND_MIN of them), in the
    order drawn; every column when ``width`` is None (no terminal: the text snapshot)."""
    if width is None:
        return list(columns)
    ranked = sorted(columns, key=lambda c: (OWNER_KNOWN_RANK if owners and c.name == "OWNER" else c.rank))
    kept: set[str] = set()
    used = COMMAND_MIN
    for col in ranked:  # by rank until one does not fit: a narrower column of a lower rank waits its turn
        if used + col.width + 1 > width and col.rank > 0:
            break
        kept.add(col.name)
        used += col.width + 1
    return [c for c in columns if c.name in kept]


def cells(text: str) -> int:
    """Terminal cells ``text`` takes: a wide (CJK) character two, a combining or format character none."""
    n = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) == "Cf":
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def fit(text: str, width: int, *, left: bool = True, ellipsis: bool = False) -> str:
    """``text`` in exactly ``width`` cells: cut (with "…" where asked) and padded, so that a name in another
    script does not push the next column along."""
    text = clean(text)
    if cells(text) > width:
        out, used, room = [], 0, width - (1 if ellipsis else 0)
        for ch in text:
            w = cells(ch)
            if used + w > room:
                break
            out.append(ch)
            used += w
        text = "".join(out) + ("…" if ellipsis and width > 0 else "")
    pad = " " * max(0, width - cells(text))
    return text + pad if left else pad + text


def heading(cols: list[Column]) -> str:
    return " ".join(c.name.ljust(c.width) if c.left else c.name.rjust(c.width) for c in cols)


def line(cols: list[Column], values: dict[str, str], command: str, width: int | None) -> str:
    """One row: each kept column's value in its width, then the command in what is left of ``width``."""
    parts = [fit(values.get(c.name, ""), c.width, left=c.left) for c in cols]
    head = " ".join(parts)
    if width is None:  # no terminal (the text snapshot): a long command line still ends somewhere
        return f"{head} {fit(command, min(cells(command), COMMAND_TEXT_MAX), ellipsis=True)}".rstrip()
    room = width - cells(head) - 1
    return f"{head} {fit(command, room, ellipsis=True)}".rstrip() if room > 0 else head


_INTERPRETERS = ("python", "bash", "sh", "perl", "ruby", "node", "julia", "Rscript")


def short_command(argv: list[str]) -> str | None:
    """The command line as the COMMAND column shows it: the program without its directory (and the script an
    interpreter runs, likewise), every argument kept (the column's width cuts them): ``python3 train.py --lr
    3e-4``, not ``/opt/conda/bin/python3 /home/alice/run/train.py --lr 3e-4``. Cleaned: anyone's argv."""
    if not argv:
        return None
    words = [clean(a) for a in argv]
    words[0] = words[0].rsplit("/", 1)[-1] or words[0]
    if len(words) > 1 and words[0].startswith(_INTERPRETERS) and not words[1].startswith("-"):
        words[1] = words[1].rsplit("/", 1)[-1] or words[1]
    return " ".join(words)  # as ps and nvitop join them: a quote added here would read as the program's own


def elapsed(seconds: float | None) -> str:
    """Run time as ps's ELAPSED and nvitop's TIME: ``4:07``, ``3:04:07``, ``12d 03h``; "n/a" unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "n/a"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    if s < 100 * 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 86400}d {s // 3600 % 24:02d}h"


def owner_cell(p: ProcSample) -> str:
    """The OWNER column: the Slurm job, the pod or the container the process runs in ("-": none of them,
    read and found so); "n/a" where nothing was read (a recording made before owners were, the simulator)."""
    found = p.owner()
    if found is not None and found[0] != "user":
        kind, ident = found
        return f"{'job' if kind == 'slurm' else kind} {ident}"
    return "-" if p.user else "n/a"


def workers_cpu(wcpu: list[float], width: int = 13) -> str:
    """WORKERS' CPU% in ``width`` cells: few workers each one's figure (to spot the one that lags), many (or
    too wide) their mean and max, which decides "more workers" against "lighter preprocessing"."""
    if not wcpu:
        return "-"
    each = " ".join(f"{w:.0f}" for w in wcpu) + " %"
    if len(wcpu) <= 4 and len(each) <= width:
        return each
    return f"avg {sum(wcpu) / len(wcpu):.0f} max {max(wcpu):.0f}"


def values(p: ProcSample, user: str | None, rss_bytes: int | None, elapsed_s: float | None) -> dict[str, str]:
    """A process's cells by column name (COMMAND aside): None is "n/a", never 0."""
    out = {"PID": str(p.pid), "USER": user or "n/a", "CPU%": fmt_pct(p.cpu_pct),
           "RSS": short_bytes(rss_bytes), "TIME": elapsed(elapsed_s)}
    if p.gpu_index >= 0:  # host-only rows have no card, no workers counted (HOST_COLUMNS)
        out.update({
            "OWNER": owner_cell(p), "GPU": str(p.gpu_index), "GPU MEM": short_bytes(p.gpu_mem_bytes),
            # GPU%: the process's own share of its card's time (not the card's SM activity), as the driver
            # samples it; no sample: n/a
            "GPU%": fmt_pct(p.sm_pct), "WORKERS": "n/a" if p.workers is None else str(p.workers),
            WORKERS_CPU: "n/a" if p.workers is None else workers_cpu(p.workers_cpu_pct or []),
        })
    return out
