"""The dashboard's process table, owned by :class:`ProcTable`: which processes it shows now, how it is drawn
this frame, and what its keys (Tab, ↑↓, sort, tree, `/` filter, F9 signal) do to it. The table's drawing and
state are :mod:`gpu_triage.ui.procview`'s."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from rich.text import Text

from gpu_triage.model import ProcSample, Tick
from gpu_triage.proc_control import ProcControl, ProcDetails
from gpu_triage.sources.base import AllHostProcesses, HostProcesses, Source, SourceStatus, Wrapper
from gpu_triage.ui import inside_lines, procview
from gpu_triage.ui.surface import Surface
from gpu_triage.window import WindowView


class ProcTable:
    """The table's state (sort, filter, selection, focus), this machine's processes where they are this
    machine's, and the table's keys. ``newest`` and ``status`` read the app's newest tick and source state."""

    def __init__(self, surface: Surface, source: Source | None, newest: Callable[[], Tick | None],
                 status: Callable[[], SourceStatus]) -> None:
        self.surface = surface
        self.source = source
        self.newest = newest
        self.status = status
        self.state = procview.ProcState()
        # this machine's processes (user, command line, signals): set for `live` only; the simulated and the
        # recorded processes are not this machine's
        self.control: ProcControl | None = None
        self.page = 1  # the rows a page key moves by: the table's height at the last frame
        self._rss_tick: datetime | None = None  # the tick whose RSS reads _rss_read holds
        self._rss_read: dict[int, int | None] = {}
        self._rss_at = 0.0  # the wall clock when that tick's reads began

    def details(self, pid: int) -> ProcDetails | None:
        return self.control.details(pid) if self.control is not None else None

    def here(self) -> procview.Local | None:
        """RSS and run time, which only this machine tells (none for simulated or recorded processes)."""
        control = self.control
        if control is None:
            return None
        # read once per tick, not at every frame (a key press redraws the table), and the run times counted to
        # that moment: a paused screen, whose newest tick stays, keeps its table as it was
        last = self.newest()
        tick = last.ts if last is not None else None
        if self._rss_tick != tick:
            self._rss_tick, self._rss_read, self._rss_at = tick, {}, time.time()
        read = self._rss_read

        def rss(pid: int) -> int | None:
            if pid not in read:
                read[pid] = control.rss(pid)
            return read[pid]

        return procview.Local(rss, self._rss_at)

    def now(self) -> tuple[list[ProcSample], bool]:
        """The GPU processes of the newest tick; with none and no GPU (host-only), every process of the host,
        busiest first, as htop lists them: the table shows as many as its lines hold, and `/` then the PID of an
        idle process finds it."""
        last = self.newest()
        procs = list(last.procs) if last else []
        source = self.source.inner if isinstance(self.source, Wrapper) else self.source  # under --job-log, pulse
        if not procs and not self.status().gpu_available:
            if isinstance(source, AllHostProcesses):
                return list(source.host_processes()), True
            if isinstance(source, HostProcesses):
                return list(source.busiest_processes()), True
        return procs, False

    def pane(self, view: WindowView, procs: list[ProcSample], host_only: bool, width: int, lines: int) -> Text:
        """The table in ``lines`` lines, with the look inside the selected process from the window's stacks."""
        self.page = max(1, lines - 2)
        return procview.proc_pane(
            procs, width, lines, self.state, self.details,
            local=self.control is not None,
            host_only=host_only,
            inside=lambda row: inside_lines.detail_text(view, row.pid, row.proc.pid if row.is_worker else None),
            here=self.here(),
        )

    def _rows(self) -> list[procview.Row]:
        return procview.rows(self.now()[0], self.state, self.details)

    # -- the keys -----------------------------------------------------------------------------------
    def focus(self) -> None:
        self.state.focused = not self.state.focused
        self.surface.redraw()

    def unfocus(self) -> None:
        if self.state.focused:
            self.state.focused = False
            self.surface.redraw()

    def move(self, delta: int | str) -> None:
        self.state.focused = True
        procview.move(self.state, self._rows(), delta, self.page)
        self.surface.redraw()

    def sort(self) -> None:
        self.state.sort = procview.SORTS[(procview.SORTS.index(self.state.sort) + 1) % len(procview.SORTS)]
        self.surface.redraw()

    def reverse(self) -> None:
        self.state.reverse = not self.state.reverse
        self.surface.redraw()

    def tree(self) -> None:
        self.state.tree = not self.state.tree
        self.surface.redraw()

    def filter(self) -> None:
        from gpu_triage.ui.screens import FilterScreen

        def apply(text: str | None) -> None:
            if text is not None:
                self.state.filter = text.strip()
                self.state.focused = True
                self.state.offset = 0
                self.surface.redraw()

        self.surface.push_screen(FilterScreen(self.state.filter), apply)

    def signal(self) -> None:
        from gpu_triage.ui.screens import SignalScreen

        if self.control is None:
            self.surface.notify("these are not processes of this machine (simulated or recorded): nothing to signal")
            return
        table = self._rows()
        row = next((r for r in table if r.pid == self.state.selected), None) if self.state.focused else None
        if row is None:
            self.surface.notify("select a process first: Tab, then ↑ ↓")
            return
        control = self.control
        # pinned now, as the confirmation names it: a signal goes to this process or, once it has
        # exited, to none (its pid may be another process's by the time the key is pressed)
        pinned = control.pin(row.pid)
        if isinstance(pinned, str):
            self.surface.notify(f"not sent: {pinned}", severity="warning")
            return
        what = procview.detail_line(row, lambda _pid: pinned.details, local=True)

        def send(name: str | None) -> None:
            try:
                if name is None:
                    return
                error = control.send(pinned, name)
            finally:
                pinned.close()
            if error is None:
                self.surface.notify(f"{name} sent to PID {row.pid}")
            else:
                self.surface.notify(f"not sent: {error}", severity="error")

        self.surface.push_screen(SignalScreen(what), send)
