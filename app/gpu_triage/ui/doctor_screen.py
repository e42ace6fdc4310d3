"""The doctor inside the dashboard (key ``d``): the same checks and topology matrix as ``gpu-triage doctor``.

Gathering takes seconds (NVML for every pair of cards, a child Python reading torch), so when no report is
given the screen shows "checking..." and runs :func:`gpu_triage.doctor.run.collect_report` in a worker
thread; the waveforms behind it keep updating.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from gpu_triage.doctor.render import render_text
from gpu_triage.doctor.run import Report, collect_report


class DoctorScreen(Screen[None]):
    """``DoctorScreen(report)`` shows a report; ``DoctorScreen()`` gathers one off the UI thread."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "back"),
        Binding("r", "refresh_report", "check again"),
    ]
    DEFAULT_CSS = """
    DoctorScreen #doctor-title { height: 1; background: $panel; padding: 0 1; }
    DoctorScreen VerticalScroll { height: 1fr; padding: 0 1; }
    """

    def __init__(self, report: Report | None = None, loader: Callable[[], Report] | None = None) -> None:
        super().__init__()
        self.report = report
        self.loader = loader or collect_report
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("Doctor   Esc/q back   r check again", id="doctor-title")
        with VerticalScroll():
            yield Static(self._body(), id="doctor-body")

    def on_mount(self) -> None:
        if self.report is None:
            self._gather()

    def _body(self) -> Text:
        if self.error is not None:
            return Text(f"The doctor could not finish: {self.error}\nRun `gpu-triage doctor` in a shell for details.", "red")
        if self.report is None:
            return Text("checking GPUs, topology, host and software...", "grey50")
        return Text.from_ansi(render_text(self.report, colour=True, width=max(40, self.app.size.width - 2)))

    def _show(self) -> None:
        self.query_one("#doctor-body", Static).update(self._body())

    @work(thread=True, exclusive=True)
    def _gather(self) -> None:
        try:
            report = self.loader()
        except Exception as exc:  # noqa: BLE001 - a broken driver must not take the dashboard down
            self.app.call_from_thread(self._done, None, f"{type(exc).__name__}: {exc}")
            return
        self.app.call_from_thread(self._done, report, None)

    def _done(self, report: Report | None, error: str | None) -> None:
        self.report, self.error = report, error
        self._show()

    def action_refresh_report(self) -> None:
        self.report, self.error = None, None
        self._show()
        self._gather()
