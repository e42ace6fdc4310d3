"""Size planning: how many lines each pane of the main screen gets, and the smallest terminal a screen needs.

Pure functions of sizes (no widgets), so the rules for what fits 80×24 and what a 200×60 terminal gains are
testable on their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The smallest terminals on which a screen is still readable. Below them the screen says so instead of
# drawing garbled charts (at 40x10 the detail and doctor screens would be unreadable).
DETAIL_MIN_SIZE = (60, 16)  # six plotext charts in a 2x3 grid: each needs ~30x5 to show an axis and a line
DOCTOR_MIN_SIZE = (60, 12)  # the doctor's table wraps below 60 columns into one word a line


def too_small(size: tuple[int, int], need: tuple[int, int]) -> str | None:
    """The line a screen shows instead of itself when the terminal is smaller than ``need``; else None."""
    width, height = size
    if width >= need[0] and height >= need[1]:
        return None
    return f"terminal too small (need {need[0]}x{need[1]}, have {width}x{height}): enlarge it, or Esc back"


# -- the main screen's panes -------------------------------------------------------------------------
# from this width a card line also carries temperature and clock (and a tall card drops them from its side)
WIDE_COLS = 120
CORE_LABEL = "core "  # the label before each line of per-core heat cells
CORE_LABEL_W = len(CORE_LABEL)
CORE_BAR_COLS = 16  # one htop-like core bar: "nnn" + 7 cells + " 99% " = 15 columns, and one spare
TALL_MAX_ROWS = 12  # 8 rows of GPU-Util + 4 of SM: more height adds no reading precision
TALL_MIN_ROWS = 6  # rows per card from which a card is drawn as two small graphs (util, SM) with a y-axis


def core_cells_per_line(width: int) -> int:
    """Heat cells (one per core) on a line of the compact CPU pane."""
    return max(1, width - CORE_LABEL_W)


def core_bars_per_line(width: int) -> int:
    """htop-like core bars on a line of the wide CPU pane."""
    return max(1, width // CORE_BAR_COLS)


@dataclass(slots=True)
class Budget:
    """Lines given to each pane; ``gpu_rows`` per card: 1 (compact), 2 (util row + SM row) or
    ``TALL_MIN_ROWS``..``TALL_MAX_ROWS`` (two small graphs with a y-axis, when few cards leave room)."""

    gpu_rows: int
    cpu: int
    disk: int
    procs: int
    diag: int
    net: int = 0  # the NET line (busiest network interfaces), when there is room


VERDICT_EVIDENCE_FIRST = 2  # evidence bullets the verdict keeps before disks and processes get a line
PROCS_MIN_LINES = 3  # a process table shorter than heading + two rows says nothing ("+8 more"): none instead


def plan_layout(
    height: int,
    width: int,
    n_gpus: int,
    n_cores: int,
    n_disks: int,
    n_procs: int,
    fixed: int,
    verdict: tuple[int, int] = (1, 0),
    n_nets: int = 0,
    procs_first: bool = False,
    hidden: frozenset[str] = frozenset(),
) -> Budget:
    """Share ``height`` lines between panes. Every card always gets its line; the rest is best effort.

    ``fixed`` counts the header, key line and replay bar. ``verdict`` is (the lines of the verdict's headline
    with its first advice line as wrapped at ``width``, the number of evidence bullets); see
    :func:`gpu_triage.ui.verdict_pane.verdict_need`. Order of need (the advice is the last thing to lose
    room): cards, the verdict's headline and first advice, CPU, the first evidence bullets, disks, processes,
    the other evidence, the past-verdicts strip, the NET line (``n_nets`` interfaces), then a second (SM)
    row per card and more of everything. The process table's first rows (heading and two) come before the
    disks: with 8 cards at 80x24 it was the pane that vanished. ``procs_first`` (the table has the focus,
    Tab): it takes its rows, and the detail line, right after the CPU line, before evidence and SM rows.
    ``hidden``: panes the user hid (config.PANES names), whose lines go to the others.
    """
    core, n_evidence = verdict
    if "diag" in hidden:
        core, n_evidence = 0, 0
    if "disk" in hidden:
        n_disks, n_nets = 0, 0
    if "procs" in hidden:
        n_procs = 0
    left = height - fixed - (0 if "gpu" in hidden else 1 + n_gpus)  # gpu title + one line per card
    need = _Need(width=width, n_gpus=0 if "gpu" in hidden else n_gpus, n_cores=n_cores, n_disks=n_disks,
                 n_procs=n_procs, n_nets=n_nets, core=core, n_evidence=n_evidence, procs_first=procs_first,
                 hidden=hidden)
    budget, left = _least(need, left)
    return _grown(need, budget, left)


@dataclass(frozen=True, slots=True)
class _Need:
    """What the main screen has to show, hidden panes already taken out (see :func:`plan_layout`)."""

    width: int
    n_gpus: int
    n_cores: int
    n_disks: int
    n_procs: int
    n_nets: int
    core: int  # the verdict's headline and first advice, in lines
    n_evidence: int
    procs_first: bool
    hidden: frozenset[str]


def _least(need: _Need, left: int) -> tuple[Budget, int]:
    """The first shares, in the order of need: the verdict's headline, CPU, (the focused process table,) the
    first evidence, the table's first rows, disks, the rest of the evidence, the NET line. The budget and the
    lines still free."""
    n_procs, procs_first = need.n_procs, need.procs_first
    diag = min(max(0, left), need.core)
    left -= diag
    cpu_cells = max(1, math.ceil(need.n_cores / core_cells_per_line(need.width))) if need.n_cores else 1
    cpu = 0 if "cpu" in need.hidden else min(max(0, left), cpu_cells + 1)
    left -= cpu
    procs = 0
    if procs_first and n_procs:
        procs = min(max(0, left), 2 + n_procs)  # heading, every row, the detail line
        procs = procs if procs >= min(PROCS_MIN_LINES, 1 + n_procs) else 0
        left -= procs
    evidence = min(max(0, left), need.n_evidence, VERDICT_EVIDENCE_FIRST)
    diag += evidence
    left -= evidence
    if n_procs and not procs_first:
        procs = min(max(0, left), min(PROCS_MIN_LINES, 1 + n_procs))
        procs = procs if procs >= min(PROCS_MIN_LINES, 1 + n_procs) else 0
        left -= procs
    disk = min(max(0, left), min(1 + need.n_disks, 3)) if need.n_disks else 0
    disk = disk if disk >= 2 else 0  # a heading alone says nothing
    left -= disk
    if n_procs and procs and not procs_first:
        more_rows = min(max(0, left), 1 + min(n_procs, 4) - procs)
        procs += more_rows
        left -= more_rows
    more = min(max(0, left), need.n_evidence - evidence + 1)  # the other bullets, then the past-verdicts strip
    diag += more
    left -= more
    net = 1 if need.n_nets and left >= 1 else 0
    left -= net
    return Budget(gpu_rows=1, cpu=cpu, disk=disk, procs=procs, diag=diag, net=net), left


def _grown(need: _Need, b: Budget, left: int) -> Budget:
    """What the lines still free add: a second (SM) row per card, then on wide terminals per-core bars, more
    disks and processes, then tall graphs per card, and more advice."""
    n_gpus, n_cores, n_disks, n_procs = need.n_gpus, need.n_cores, need.n_disks, need.n_procs
    gpu_rows = 2 if left >= n_gpus + 2 and n_gpus else 1
    if gpu_rows == 2:
        left -= n_gpus
    # wide terminals: per-core bars instead of cells, more disks, processes, evidence
    bars_per_line = core_bars_per_line(need.width)
    bar_lines = math.ceil(n_cores / bars_per_line) + 1 if n_cores else 0
    if n_cores and b.cpu and bar_lines > b.cpu and left >= bar_lines - b.cpu:
        left -= bar_lines - b.cpu
        b.cpu = bar_lines
    extra = min(max(0, left), max(0, 1 + n_disks - b.disk)) if n_disks else 0
    b.disk += extra
    left -= extra
    extra = min(max(0, left), max(0, 1 + n_procs - b.procs)) if n_procs and not need.procs_first else 0
    if b.procs + extra >= min(PROCS_MIN_LINES, 1 + n_procs):
        b.procs += extra
        left -= extra
    # still room (few cards, tall terminal): tall graphs per card, after keeping 4 lines for more advice
    spare = left - 4
    if n_gpus and spare > 0:
        per_card = min(TALL_MAX_ROWS, gpu_rows + spare // n_gpus)
        if per_card >= TALL_MIN_ROWS:
            left -= (per_card - gpu_rows) * n_gpus
            gpu_rows = per_card
    b.gpu_rows = gpu_rows
    b.diag += min(max(0, left), 4) if "diag" not in need.hidden else 0
    return b
