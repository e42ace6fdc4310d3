"""The dashboard's process table keys (Tab, ↑↓, sort, tree, `/` filter, F9 signal) as a mixin of
:class:`~gpu_triage.ui.app.TriageApp`: which processes the table shows now, and what each key does to it.
The table's drawing and state are :mod:`gpu_triage.ui.procview`'s."""

from __future__ import annotations

import time

from textual.app import App

from gpu_triage.config import Config, wait_band
from gpu_triage.model import ProcSample
from gpu_triage.proc_control import ProcControl, ProcDetails
from gpu_triage.sources.base import AllHostProcesses, HostProcesses, InsideNotice, Source, SourceStatus, Wrapper
from gpu_triage.ui import inside_lines, procview
from gpu_triage.ui.verdict_pane import Shown
from gpu_triage.window import RollingWindow, WindowView


class ProcTableActions(App[int]):
    """The process table's keys; the state they read and change is the app's (set in TriageApp.__init__)."""

    config: Config
    window: RollingWindow
    source: Source | None
    procs: procview.ProcState
    proc_control: ProcControl | None
    shown: Shown
    _proc_page: int
    _status: SourceStatus

    def redraw(self) -> None:
        """Draw the screen again (TriageApp's)."""
        raise NotImplementedError

    def _proc_details(self, pid: int) -> ProcDetails | None:
        return self.proc_control.details(pid) if self.proc_control is not None else None

    def _proc_here(self) -> procview.Local | None:
        """RSS and run time, which only this machine tells (none for simulated or recorded processes)."""
        control = self.proc_control
        if control is None:
            return None
        # read once per tick, not at every frame (a key press redraws the table)
        last = self.window.last
        tick = last.ts if last is not None else None
        if getattr(self, "_rss_tick", None) != tick or not hasattr(self, "_rss_read"):
            fresh: dict[int, int | None] = {}
            self._rss_tick, self._rss_read = tick, fresh
        read: dict[int, int | None] = self._rss_read

        def rss(pid: int) -> int | None:
            if pid not in read:
                read[pid] = control.rss(pid)
            return read[pid]

        return procview.Local(rss, time.time())

    def _procs_now(self) -> tuple[list[ProcSample], bool]:
        """The GPU processes of the newest tick; with none and no GPU (host-only), every process of the host,
        busiest first, as htop lists them: the table shows as many as its lines hold, and `/` then the PID of an
        idle process finds it."""
        last = self.window.last
        procs = list(last.procs) if last else []
        source = self.source.inner if isinstance(self.source, Wrapper) else self.source  # under --job-log, pulse
        if not procs and not self._status.gpu_available:
            if isinstance(source, AllHostProcesses):
                return list(source.host_processes()), True
            if isinstance(source, HostProcesses):
                return list(source.busiest_processes()), True
        return procs, False

    def _inside_of(self, view: WindowView) -> procview.Inside:
        """The detail line's look inside the selected process, from the window's stack samples."""
        return lambda row: inside_lines.detail_text(view, row.pid, row.proc.pid if row.is_worker else None)

    def _inside_lines(self, view: WindowView) -> list[str]:
        """The diagnosis pane's "inside" lines, or why no stacks are read (the live source says, under a wrapper)."""
        source, notice = self.source, None
        while source is not None and notice is None:
            notice = source.inside_notice() if isinstance(source, InsideNotice) else None
            source = source.inner if isinstance(source, Wrapper) else None
        return inside_lines.pane_lines(view, notice, self._cited_pids(), wait_band(self.config))

    def _cited_pids(self) -> frozenset[int]:
        """The processes whose main thread the shown verdict's evidence already describes (the pid of its
        main_thread_phase_share facts)."""
        facts = getattr(self.shown, "evidence_facts", None) or []
        return frozenset(f["pid"] for f in facts
                         if f.get("metric") == "main_thread_phase_share" and isinstance(f.get("pid"), int))

    def _proc_rows(self) -> list[procview.Row]:
        return procview.rows(self._procs_now()[0], self.procs, self._proc_details)

    def action_procs_focus(self) -> None:
        self.procs.focused = not self.procs.focused
        self.redraw()

    def action_procs_unfocus(self) -> None:
        if self.procs.focused:
            self.procs.focused = False
            self.redraw()

    def action_proc_move(self, delta: int | str) -> None:
        self.procs.focused = True
        procview.move(self.procs, self._proc_rows(), delta, self._proc_page)
        self.redraw()

    def action_proc_sort(self) -> None:
        self.procs.sort = procview.SORTS[(procview.SORTS.index(self.procs.sort) + 1) % len(procview.SORTS)]
        self.redraw()

    def action_proc_reverse(self) -> None:
        self.procs.reverse = not self.procs.reverse
        self.redraw()

    def action_proc_tree(self) -> None:
        self.procs.tree = not self.procs.tree
        self.redraw()

    def action_proc_filter(self) -> None:
        from gpu_triage.ui.screens import FilterScreen

        def apply(text: str | None) -> None:
            if text is not None:
                self.procs.filter = text.strip()
                self.procs.focused = True
                self.procs.offset = 0
                self.redraw()

        self.push_screen(FilterScreen(self.procs.filter), apply)

    def action_proc_signal(self) -> None:
        from gpu_triage.ui.screens import SignalScreen

        if self.proc_control is None:
            self.notify("these are not processes of this machine (simulated or recorded): nothing to signal")
            return
        table = self._proc_rows()
        row = next((r for r in table if r.pid == self.procs.selected), None) if self.procs.focused else None
        if row is None:
            self.notify("select a process first: Tab, then ↑ ↓")
            return
        control = self.proc_control
        # pinned now, as the confirmation names it: a signal goes to this process or, once it has
        # exited, to none (its pid may be another process's by the time the key is pressed)
        pinned = control.pin(row.pid)
        if isinstance(pinned, str):
            self.notify(f"not sent: {pinned}", severity="warning")
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
                self.notify(f"{name} sent to PID {row.pid}")
            else:
                self.notify(f"not sent: {error}", severity="error")

        self.push_screen(SignalScreen(what), send)
