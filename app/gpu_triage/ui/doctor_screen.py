"""The doctor inside the dashboard (key ``d``): the same checks and topology matrix as ``gpu-triage doctor``.

Gathering takes seconds (NVML for every pair of cards, a child Python reading torch), so when no report is
given the screen shows "checking..." and runs :func:`gpu_triage.doctor.run.collect_report` in a worker
thread; the waveforms behind it keep updating.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from gpu_triage.doctor.render import render_text
from gpu_triage.doctor.run import Report, collect_report
from gpu_triage.ui.layout import DOCTOR_MIN_SIZE, too_small

DOCTOR_MARGIN = 4  # columns the report's box takes from the terminal: padding 0 1, and a 2-column scrollbar


class DoctorScreen(Screen[None]):
    """``DoctorScreen(report)`` shows a report; ``DoctorScreen()`` gathers one off the UI thread."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("q", "app.quit", "quit"),
        Binding("r", "refresh_report", "check again"),
    ]
    DEFAULT_CSS = """
    DoctorScreen #doctor-title { height: 1; background: $panel; padding: 0 1; }
    DoctorScreen VerticalScroll { height: 1fr; padding: 0 1; }
    DoctorScreen #too-small { height: 1fr; content-align: center middle; }
    """

    def __init__(self, report: Report | None = None, loader: Callable[[], Report] | None = None) -> None:
        super().__init__()
        self.report = report
        self.loader = loader or collect_report
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("Doctor   Esc back   r check again   q quit", id="doctor-title")
        yield Static(id="too-small")
        with VerticalScroll():
            yield Static(self._body(), id="doctor-body")

    def on_mount(self) -> None:
        self._fit()
        if self.report is None:
            self._gather()

    def on_resize(self) -> None:
        self._fit()
        self._show()

    def _fit(self) -> None:
        """The report when the terminal is big enough, else one line that says how big it must be."""
        msg = too_small((self.app.size.width, self.app.size.height), DOCTOR_MIN_SIZE)
        small = self.query_one("#too-small", Static)
        small.display = msg is not None
        small.update(msg or "")
        self.query_one(VerticalScroll).display = msg is None

    def _body(self) -> Text:
        if self.error is not None:
            return Text(f"The doctor could not finish: {self.error}\n"
                        "Run `gpu-triage doctor` in a shell for details.", "red")
        if self.report is None:
            return Text("checking GPUs, topology, host and software...", "grey50")
        # the box's padding (2) and its scrollbar (2) take 4 columns: at width - 2 Textual wrapped our already
        # wrapped lines again ("run on the / GPU / machine")
        return Text.from_ansi(render_text(self.report, colour=True, width=max(40, self.app.size.width - DOCTOR_MARGIN)))

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
