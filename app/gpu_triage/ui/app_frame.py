"""One frame of the dashboard, laid out by :class:`Frame`: how many lines each pane gets on this screen
(:func:`~gpu_triage.ui.layout.plan_layout`) and the text each one shows, from the data of a :class:`Still`;
:func:`put_on_screen` puts them on the app's pane widgets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rich.text import Text
from textual.containers import Vertical
from textual.dom import DOMNode

from gpu_triage.config import PANES
from gpu_triage.model import Tick
from gpu_triage.sources.base import InsideNotice, JobSource, Source, SourceStatus, Wrapper
from gpu_triage.sources.waiting import WaitBand
from gpu_triage.ui import gpu_pane, host_panes, inside_lines, job_pane, verdict_pane
from gpu_triage.ui.app_procs import ProcTable
from gpu_triage.ui.layout import plan_layout
from gpu_triage.ui.pane_widget import Pane
from gpu_triage.ui.panes import Colours
from gpu_triage.ui.verdict_pane import Shown
from gpu_triage.window import WindowView

Drawn = dict[str, tuple[Text, int]]  # each pane's text and its lines (0: not shown)


@dataclass(frozen=True, slots=True)
class Still:
    """The data one frame draws, at whatever size: the window's view, the verdict shown with its history, the
    newest tick (the process table's) and the source's state. A paused dashboard keeps drawing the last one."""

    view: WindowView
    shown: Shown
    history: list[tuple[float, str, str]]  # a copy: the strip must not move on while the frame is kept
    newest: Tick | None
    status: SourceStatus  # a copy too: a live source keeps one status and changes it in place each tick

    @classmethod
    def of(cls, view: WindowView, shown: Shown, history: list[tuple[float, str, str]], newest: Tick | None,
           status: SourceStatus) -> Still:
        """The frame's data kept apart from what goes on changing while it is shown."""
        return cls(view, shown, list(history), newest,
                   replace(status, lost_gpus=set(status.lost_gpus), messages=list(status.messages)))


class Frame:
    """The panes' texts from a :class:`Still` and the process table."""

    def __init__(self, source: Source | None, colours: Colours, procs: ProcTable, band: WaitBand) -> None:
        self.source = source
        self.band = band  # when a card waits, for the "inside" lines: the stack sampler's band
        self.colours = colours
        self.procs = procs
        # lines the diagnosis pane shows above the stacks' (a replay's: the headroom its recording stored)
        self.lines_first: Callable[[], list[str]] = list

    def panes(self, still: Still, width: int, height: int, *, header: Text, bar: Text, keys: Text,
              selected: int, order: list[str]) -> Drawn:
        """Each pane's text and lines in a ``width`` x ``height`` screen; the panes not in ``order`` get none."""
        view, shown, status = still.view, still.shown, still.status
        bar_lines = 1 if bar.plain else 0
        fixed = len(header.plain.split("\n")) + 1 + bar_lines
        shown_procs, host_only = self.procs.now()
        notice = self.source.job_notice() if isinstance(self.source, JobSource) else None  # the job pane's
        job_n = job_pane.job_lines(view, notice) if isinstance(self.source, JobSource) or any(view.jobs) else 0
        inside = self._inside_lines(view, shown)  # what the waiting processes were doing, for the diagnosis pane
        hidden = frozenset(PANES) - set(order)
        if "job" in hidden:
            job_n = 0
        focused = self.procs.state.focused
        budget = plan_layout(
            height,
            width,
            view.n_gpus if host_only else max(1, view.n_gpus),  # host only: one line says so, no card's
            view.cpu.shape[1],
            0 if focused else len(view.disk_names),  # a focused table takes the disks' lines
            len(shown_procs),
            fixed + job_n,
            verdict_pane.verdict_need(shown, width, len(inside)),
            n_nets=len(view.nets[-1]) if view.nets else 0,
            procs_first=focused and "procs" not in hidden,
            hidden=hidden,
        )
        drawn: Drawn = {
            "header": (header, fixed - 1 - bar_lines),
            "gpu": (
                gpu_pane.gpu_pane(
                    view,
                    width,
                    budget.gpu_rows,
                    self.colours,
                    lost=status.lost_gpus,
                    selected=selected,
                    gpu_available=status.gpu_available,
                    driver_failed=status.driver_failure is not None,
                ),
                1 + max(1, view.n_gpus) * budget.gpu_rows,
            ),
            "job": (job_pane.job_pane(view, width, job_n, self.colours, notice=notice), job_n),
            "diag": (
                verdict_pane.diag_pane(shown, still.history, view, width, budget.diag, self.colours, inside),
                budget.diag,
            ),
            "cpu": (host_panes.cpu_pane(view, width, budget.cpu, self.colours), budget.cpu),
            "disk": (host_panes.disk_pane(view, width, budget.disk + budget.net, net=budget.net > 0),
                     budget.disk + budget.net),
            "procs": (self.procs.pane(view, shown_procs, host_only, width, budget.procs), budget.procs),
            "keys": (keys, 1),
            "bar": (bar, bar_lines),
        }
        # no more lines than the text has; none for an empty or hidden pane
        return {name: (text, min(lines, len(text.plain.split("\n"))) if text.plain and name not in hidden else 0)
                for name, (text, lines) in drawn.items()}

    def _inside_lines(self, view: WindowView, shown: Shown) -> list[str]:
        """The diagnosis pane's "inside" lines, or why no stacks are read (the live source says, under a wrapper)."""
        source, notice = self.source, None
        while source is not None and notice is None:
            notice = source.inside_notice() if isinstance(source, InsideNotice) else None
            source = source.inner if isinstance(source, Wrapper) else None
        return [*self.lines_first(), *inside_lines.pane_lines(view, notice, _cited_pids(shown), self.band)]


def _cited_pids(shown: Shown) -> frozenset[int]:
    """The processes whose main thread the shown verdict's evidence already describes (the pid of its
    main_thread_phase_share facts)."""
    facts = getattr(shown, "evidence_facts", None) or []
    return frozenset(f["pid"] for f in facts
                     if f.get("metric") == "main_thread_phase_share" and isinstance(f.get("pid"), int))


def put_on_screen(screen: DOMNode, drawn: Drawn, order: list[str]) -> None:
    """Each pane of ``screen`` (the app) gets its text and lines; the body's panes come in the user's ``order``
    (the header first, hidden ones last, with no lines)."""
    wanted = ["header", *order, *(p for p in PANES if p not in order)]
    body = screen.query_one("#body", Vertical)
    if [w.id for w in body.children] != wanted:
        for before, after in zip(wanted, wanted[1:], strict=False):
            body.move_child(screen.query_one(f"#{after}", Pane), after=screen.query_one(f"#{before}", Pane))
    for name, (text, lines) in drawn.items():
        pane = screen.query_one(f"#{name}", Pane)
        height = pane.styles.height
        # "auto" is a Scalar of value 1 too: a one-line pane left "auto" was measured from the text Static
        # last laid out, so a key line written at 120 columns took two rows once the screen was 80 wide
        if height is None or height.is_auto or height.value != lines:
            pane.styles.height = lines
            pane.display = lines > 0
        pane.show(text)
