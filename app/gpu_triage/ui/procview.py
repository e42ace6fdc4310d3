"""The process table's state and drawing, as htop and nvitop users expect: a selection that
scrolls, sorting, a filter by name / user / command, DataLoader workers as a tree under their trainer, and a
detail line (user, whose job it is, full command line) for the selected process.

Plain text and data (no Textual): the app owns a :class:`ProcState`, the keys change it, :func:`proc_pane`
draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from gpu_triage import proc_columns
from gpu_triage.model import ProcSample
from gpu_triage.proc_control import ProcDetails

SORTS = ("card", "GPU memory", "GPU%", "CPU", "user")  # `s` cycles through them
# biggest first unless reversed (`I`, as htop's invert); card and user run in their natural order
DESCENDING = frozenset({"GPU memory", "GPU%", "CPU"})
WORKER = "DataLoader wkr"


@dataclass(slots=True)
class ProcState:
    focused: bool = False  # Tab: ↑↓ move in the process table instead of selecting a card
    sort: str = "card"
    reverse: bool = False  # `I`: the other direction of the sort
    filter: str = ""
    tree: bool = False  # `t`: each trainer's DataLoader workers on rows of their own under it
    selected: int | None = None  # pid of the selected row
    offset: int = 0  # first row shown


@dataclass(frozen=True, slots=True)
class Row:
    pid: int
    proc: ProcSample  # the GPU process itself, or the trainer of a worker row
    worker_cpu: float | None = None  # set on a worker row
    last_worker: bool = False

    @property
    def is_worker(self) -> bool:
        return self.pid != self.proc.pid


Details = Callable[[int], ProcDetails | None]


def _sort_value(sort: str, p: ProcSample, details: Details) -> object:
    """The value a process is sorted by; None (not read: no driver sample, hidden) goes last either way."""
    if sort == "GPU memory":
        return p.gpu_mem_bytes
    if sort == "CPU":
        return p.cpu_pct
    if sort == "GPU%":  # a process's own share of its card, from the driver
        return p.sm_pct
    if sort == "user":
        d = details(p.pid)
        return d.user if d is not None and d.user else None
    # card order; the host-only list (no card) busiest first, as it came
    return (p.gpu_index, -(p.cpu_pct or 0.0) if p.gpu_index < 0 else 0.0)


def sort_arrow(state: ProcState, host_only: bool = False) -> str:
    """↓ biggest first, ↑ smallest (or first in order) first: the direction the heading shows."""
    descending = state.sort in DESCENDING or (host_only and state.sort == "card")
    return "↓" if descending != state.reverse else "↑"


def _sorted(procs: list[ProcSample], state: ProcState, details: Details) -> list[ProcSample]:
    values = {p.pid: _sort_value(state.sort, p, details) for p in procs}
    by_pid = sorted(procs, key=lambda p: p.pid)
    present = [p for p in by_pid if values[p.pid] is not None]
    missing = [p for p in by_pid if values[p.pid] is None]
    descending = (state.sort in DESCENDING) != state.reverse
    # a stable sort keeps equal values in pid order, in either direction
    present.sort(key=lambda p: values[p.pid], reverse=descending)  # type: ignore[arg-type,return-value]
    return present + missing


def matches(p: ProcSample, needle: str, details: Details) -> bool:
    """The filter: a case-insensitive part of the process name, its user or its command line."""
    if not needle:
        return True
    needle = needle.lower()
    if needle in (p.name or "").lower() or needle in str(p.pid):
        return True
    d = details(p.pid)
    return d is not None and any(needle in (v or "").lower() for v in (d.user, d.cmdline))


def rows(procs: list[ProcSample], state: ProcState, details: Details) -> list[Row]:
    """The table's rows in order: sorted, filtered, and with worker rows under their trainer in tree mode."""
    out: list[Row] = []
    for p in _sorted([p for p in procs if matches(p, state.filter, details)], state, details):
        out.append(Row(p.pid, p))
        if state.tree and p.worker_pids:
            cpus = list(p.workers_cpu_pct or [])
            for k, wpid in enumerate(p.worker_pids):
                cpu = cpus[k] if k < len(cpus) else None
                out.append(Row(wpid, p, worker_cpu=cpu, last_worker=k == len(p.worker_pids) - 1))
    return out


def move(state: ProcState, table: list[Row], delta: int | str, page: int) -> None:
    """Move the selection: by ``delta`` rows, a page ("page" / "-page"), or to "home" / "end"."""
    if not table:
        state.selected, state.offset = None, 0
        return
    pids = [r.pid for r in table]
    at = pids.index(state.selected) if state.selected in pids else 0
    if delta == "home":
        at = 0
    elif delta == "end":
        at = len(table) - 1
    elif delta == "page":
        at += max(1, page)
    elif delta == "-page":
        at -= max(1, page)
    elif isinstance(delta, int):
        at += delta
    at = min(len(table) - 1, max(0, at))
    state.selected = pids[at]


def _user(row: Row, details: Details, local: bool) -> str:
    """The USER column: this machine's word for a live process; for a replayed or simulated one, the user the
    recording holds (the detail line says the same), "n/a" where it holds none."""
    d = details(row.pid) if local else None
    user = d.user if d is not None and d.user else (None if local else _shown(row.proc.user))
    return user or "n/a"


@dataclass(frozen=True, slots=True)
class Local:
    """What only this machine tells of a process (not in a tick, nor in a recording): its resident memory
    now and the wall clock its run time is counted to. Without it (replay, simulation): "n/a"."""

    rss: Callable[[int], int | None]
    now: float


def _values(row: Row, details: Details, local: bool, here: Local | None) -> tuple[dict[str, str], str]:
    """A row's cells by column name, and its COMMAND: the command line where this machine has it, else the
    process's name (what a recording holds)."""
    d = details(row.pid) if local else None
    rss = elapsed = None
    if local and here is not None:
        rss = here.rss(row.pid)
        elapsed = None if d is None or d.created is None else here.now - d.created
    user = _user(row, details, local)
    if row.is_worker:
        values = proc_columns.values(ProcSample(row.pid, -1, cpu_pct=row.worker_cpu), user, rss, elapsed)
        return values, f"{'└' if row.last_worker else '├'} {WORKER}"
    command = (d.command or d.cmdline) if d is not None else None
    return proc_columns.values(row.proc, user, rss, elapsed), command or (row.proc.name or "n/a")


def _shown(value: str | None, limit: int = 64) -> str | None:
    """An owner field as drawn: a recording from elsewhere may hold anything, so only printable text."""
    return value[:limit] if value and value.isprintable() else None


def owner_text(p: ProcSample) -> str | None:
    """Whose job the process is, as the detail line says it: the Slurm job, the Kubernetes pod (namespace/name,
    else the start of its uid) and the container (runtime and short id); None when none of them is known."""
    parts = []
    if job := _shown(p.slurm_job):
        parts.append(f"slurm job {job}")
    name, ns, uid = _shown(p.pod_name), _shown(p.pod_namespace), _shown(p.pod_uid)
    if name:
        parts.append(f"pod {ns}/{name}" if ns else f"pod {name}")
    elif uid:
        parts.append(f"pod uid {uid[:8]}")
    if container := _shown(p.container, 200):
        runtime, sep, cid = container.rpartition("://")
        parts.append(f"{runtime} {cid[:12]}" if sep else f"container {cid[:12]}")
    return " · ".join(parts) or None


Inside = Callable[[Row], str | None]  # what the row's process was doing inside at its latest stack sample


def detail_line(row: Row | None, details: Details, local: bool, inside: str | None = None) -> str:
    """User, owner (Slurm job, pod, container) and full command line of the selected process (what
    `ps -o user,args` says, with whose job it is); ``inside``, what it was doing at its latest stack sample,
    comes right after the pid: a long command line is what the width cuts."""
    if row is None:
        return "no process selected"
    what = f"worker of {row.proc.pid}" if row.is_worker else (row.proc.name or "n/a")
    owner = owner_text(row.proc)  # a worker's is its trainer's: same cgroup, same job
    owned = f" · {owner}" if owner else ""
    doing = f" · {inside}" if inside else ""
    if not local:
        user = _shown(row.proc.user)
        who = f" · user {user}{owned}" if user else owned
        return f"PID {row.pid} {what}{doing}{who} · command: n/a (simulated or recorded, not this machine's)"
    d = details(row.pid)
    user = d.user if d is not None and d.user else (_shown(row.proc.user) or "n/a")
    cmd = d.cmdline if d is not None and d.cmdline else "n/a (exited, or hidden from this user)"
    return f"PID {row.pid}{doing} · user {user}{owned} · {cmd}"


def _flags(table: list[Row], state: ProcState, host_only: bool) -> list[str]:
    """What the heading's tag says: host-only, the order, the filter, and when focused the position."""
    flags = ["no GPU: host processes"] if host_only else []
    # host-only, the card order is the busiest first: said as what it is
    flags.append(f"by {'CPU' if host_only and state.sort == 'card' else state.sort} {sort_arrow(state, host_only)}")
    if state.filter:
        flags.append(f"/{state.filter}")
    if state.focused and table:
        at = [r.pid for r in table].index(state.selected) if state.selected in [r.pid for r in table] else 0
        flags.append(f"{at + 1}/{len(table)}")
    return flags


def _heading(
    procs: list[ProcSample], table: list[Row], state: ProcState, width: int, host_only: bool
) -> tuple[list[proc_columns.Column], str]:
    """The columns that fit ``width`` and the heading line that names them, the tag after COMMAND."""
    # whole columns only, heading and values together (proc_columns.choose); the state goes after COMMAND
    # processes of two jobs or more (or a job beside processes of none): whose is which comes before workers
    owners = len({proc_columns.owner_cell(p) for p in procs} - {"n/a"}) >= 2
    cols = proc_columns.choose(proc_columns.HOST_COLUMNS if host_only else proc_columns.GPU_COLUMNS, width,
                               owners=owners)
    head = proc_columns.heading(cols) + " " + proc_columns.COMMAND
    tag_room = max(0, width - len(head))
    flags = _flags(table, state, host_only)
    tag = " [" + " · ".join(flags) + "]"
    if len(tag) > tag_room:  # the short form before a cut one, which would lose the position ("[by card ↑ · 1…")
        tag = " [" + " ".join(f.removeprefix("by ").removesuffix(": host processes") for f in flags) + "]"
    return cols, head + proc_columns.fit(tag, tag_room, ellipsis=True).rstrip()


def _rows_in_sight(table: list[Row], state: ProcState, room: int) -> list[Row]:
    """The rows that fit ``room`` lines: focused, the window that keeps the selection in sight (moved as
    little as it can); unfocused, the first rows and a line for the rest."""
    if not state.focused:
        return table if len(table) <= room else table[: max(0, room - 1)]
    pids = [r.pid for r in table]
    at = pids.index(state.selected) if state.selected in pids else 0
    state.offset = min(max(0, state.offset, at - room + 1), at, max(0, len(table) - room))
    state.offset = max(0, state.offset)
    return table[state.offset : state.offset + room]


def _selected_detail(table: list[Row], state: ProcState, details: Details, local: bool,
                     inside: Inside | None) -> str:
    chosen = next((r for r in table if r.pid == state.selected), None)
    doing = inside(chosen) if inside is not None and chosen is not None else None
    return detail_line(chosen, details, local, doing)


def proc_pane(
    procs: list[ProcSample],
    width: int,
    lines: int,
    state: ProcState,
    details: Details,
    *,
    local: bool = True,
    host_only: bool = False,
    inside: Inside | None = None,
    here: Local | None = None,
) -> Text:
    """The process table in ``lines`` lines: heading (with sort, filter and position), rows, and when focused
    a detail line. Unfocused it reads as before: the first rows and "+N more"; focused it scrolls with the
    selection. What does not fit is counted, never dropped silently. ``here``: this machine's side of its
    processes (RSS, run time), given where they are this machine's."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    table = rows(procs, state, details)
    if state.focused and table and state.selected not in [r.pid for r in table]:
        state.selected = table[0].pid
    cols, heading = _heading(procs, table, state, width, host_only)
    out.append(heading, "bold")
    if not table:
        out.append("\n")
        msg = f"no process matches /{state.filter}" if state.filter and procs else "no process on any GPU"
        out.append(msg[:width], "grey50")
        return out
    detail = state.focused and lines >= 3
    room = lines - 1 - int(detail)
    shown = _rows_in_sight(table, state, room)
    for row in shown:
        out.append("\n")
        selected = state.focused and row.pid == state.selected
        values, command = _values(row, details, local, here)
        line = proc_columns.line(cols, values, command, width)
        out.append(line.ljust(width) if selected else line, "reverse" if selected else "")
    if not state.focused and len(shown) < len(table) and room >= 1:
        out.append("\n")
        out.append(f"{'':>8} +{len(table) - len(shown)} more (Tab: scroll, sort, filter)"[:width], "grey50")
    if detail:
        out.append("\n")
        out.append(_selected_detail(table, state, details, local, inside)[:width], "italic")
    return out
