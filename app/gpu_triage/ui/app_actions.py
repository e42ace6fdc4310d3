"""The dashboard's other keys as a mixin of :class:`~gpu_triage.ui.app.TriageApp`: recording (`r`), pause,
help, card selection, the panes shown (`o`), a card's detail (Enter) and the doctor (`d`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_triage.config import PANES, Config
from gpu_triage.model import HostInfo
from gpu_triage.recording.background import Recorder
from gpu_triage.sources.base import SourceStatus
from gpu_triage.ui.app_procs import ProcTableActions
from gpu_triage.ui.keys import Mode
from gpu_triage.verdicts.judge import Judgement

log = logging.getLogger(__name__)


class KeyActions(ProcTableActions):
    """Key actions and recording; the state they read and change is the app's (set in TriageApp.__init__)."""

    config: Config
    host: HostInfo
    interval_s: float
    mode: Mode
    paused: bool
    selected: int
    pane_order: list[str]
    recorder: Recorder | None
    publish_metrics: Callable[[Judgement, SourceStatus], object] | None
    _status: SourceStatus
    record_error: str | None
    simulated: bool
    doctor_loader: Callable[[], Any] | None

    # -- recording ----------------------------------------------------------------------------------
    def start_recording(self, path: Path) -> None:
        try:
            from gpu_triage.verdicts.settings import with_settings  # noqa: PLC0415 - when recording starts

            # each tick goes to the recorder with its raw verdict (TriageApp.ingest: the dashboard's own judge);
            # the file names the settings they were judged with (a copy: the dashboard's host stays as it is)
            host = with_settings(self.host, self.config.thresholds, self.config.window_s)
            self.recorder = Recorder(path, host, self.interval_s)
            self.record_error = None
        except Exception as exc:  # UserError, OSError, Arrow's errors: shown, the dashboard goes on
            log.exception("recording to %s could not start", path)
            self.recorder = None
            self.record_error = str(exc)

    def pass_on(self, judged: Judgement | None, record: bool) -> None:
        """A tick judged as it came: the recording stores its raw verdict, the metrics (``live --metrics``) its
        shown one."""
        if judged is not None and record and self.recorder is not None:
            self.recorder.append(judged.stamped())
        if judged is not None and self.publish_metrics is not None:
            self.publish_metrics(judged, self._status)

    def stop_recording(self) -> Path | None:
        rec, self.recorder = self.recorder, None
        if rec is None:
            return None
        try:
            return rec.close()
        except Exception as exc:  # noqa: BLE001 - UserError (no tick yet), OSError: said on screen and at exit
            log.warning("recording not saved: %s", exc)
            self.record_error = str(exc)
            return None

    # -- actions ------------------------------------------------------------------------------------
    def action_pause(self) -> None:
        self.paused = not self.paused
        self.redraw()

    def action_help(self) -> None:
        from gpu_triage.ui.screens import HelpScreen

        self.push_screen(HelpScreen(self.mode))

    def action_select(self, delta: int) -> None:
        if self.procs.focused:
            self.action_proc_move(delta)
            return
        n = max(1, self.window.view().n_gpus) if self.window.last is not None else 1
        self.selected = (self.selected + delta) % n
        self.redraw()

    def set_panes(self, order: list[str]) -> None:
        """Show these panes in this order (the others hidden): the `o` screen's answer."""
        self.pane_order = [p for p in order if p in PANES]
        if "procs" not in self.pane_order:
            self.procs.focused = False
        self.redraw()

    def action_panes(self) -> None:
        from gpu_triage.ui.screens import PanesScreen

        def apply(order: list[str] | None) -> None:
            if order is not None:
                self.set_panes(order)

        self.push_screen(PanesScreen(self.pane_order), apply)

    def action_detail(self) -> None:
        from gpu_triage.ui.detail_screen import DetailScreen

        view = self.window.view()
        if not view.n_gpus:
            self.notify("no GPU to show")
            return
        self.push_screen(DetailScreen(min(self.selected, view.n_gpus - 1), view))

    def action_record(self) -> None:
        if self.recorder is not None:
            path = self.stop_recording()
            if path is not None:
                self.notify(f"recording saved: {path}")
            else:  # not "recording saved: None": say what failed (the stream stays for `gpu-triage recover`)
                self.notify(f"recording not saved: {self.record_error}", severity="error")
        else:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            path = self.config.recording_dir / f"gpu-triage-{stamp}.parquet"
            self.start_recording(path)
            if self.recorder is not None:
                self.notify(f"recording to {path}")
        self.redraw()

    def action_doctor(self) -> None:
        if self.simulated and self.doctor_loader is None:
            # checking this machine while the screen shows the simulated server would mislead
            self.notify("the doctor checks a real machine, not the simulated server: "
                        "run `gpu-triage doctor` on the GPU machine")
            return
        try:
            from gpu_triage.ui.doctor_screen import DoctorScreen
        except ImportError:
            self.notify("doctor screen not available in this build: run `gpu-triage doctor`")
            return
        self.push_screen(DoctorScreen(loader=self.doctor_loader))
