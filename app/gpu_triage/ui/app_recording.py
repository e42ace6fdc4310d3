"""The dashboard's recording, owned by :class:`Recording`: started by ``--record FILE`` or the `r` key, fed each
tick with the raw verdict the dashboard's own judge gave it, stopped by `r` again or at exit (a valid file)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.model import HostInfo
from gpu_triage.recording.background import Recorder
from gpu_triage.ui.surface import Surface
from gpu_triage.verdicts.judge import Judgement

log = logging.getLogger(__name__)


class Recording:
    """The recorder while one runs, and why the last one failed (the header says both)."""

    def __init__(self, surface: Surface, config: Config, host: HostInfo, interval_s: float) -> None:
        self.surface = surface
        self.config = config
        self.host = host
        self.interval_s = interval_s
        self.recorder: Recorder | None = None
        self.error: str | None = None

    def start(self, path: Path) -> None:
        try:
            from gpu_triage.verdicts.settings import with_settings  # noqa: PLC0415 - when recording starts

            # each tick goes to the recorder with its raw verdict (TriageApp.ingest: the dashboard's own judge);
            # the file names the settings they were judged with (a copy: the dashboard's host stays as it is)
            host = with_settings(self.host, self.config.thresholds, self.config.window_s)
            self.recorder = Recorder(path, host, self.interval_s)
            self.error = None
        except Exception as exc:  # UserError, OSError, Arrow's errors: shown, the dashboard goes on
            log.exception("recording to %s could not start", path)
            self.recorder = None
            self.error = str(exc)

    def append(self, judged: Judgement) -> None:
        """A tick as it was judged: the recording stores its raw verdict."""
        if self.recorder is not None:
            self.recorder.append(judged.stamped())

    def stop(self) -> Path | None:
        rec, self.recorder = self.recorder, None
        if rec is None:
            return None
        try:
            return rec.close()
        except Exception as exc:  # noqa: BLE001 - UserError (no tick yet), OSError: said on screen and at exit
            log.warning("recording not saved: %s", exc)
            self.error = str(exc)
            return None

    def toggle(self) -> None:
        """The `r` key: stop the recording and say where it went, or start one in the recording directory."""
        if self.recorder is not None:
            path = self.stop()
            if path is not None:
                self.surface.notify(f"recording saved: {path}")
            else:  # not "recording saved: None": say what failed (the stream stays for `gpu-triage recover`)
                self.surface.notify(f"recording not saved: {self.error}", severity="error")
        else:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            path = self.config.recording_dir / f"gpu-triage-{stamp}.parquet"
            self.start(path)
            if self.recorder is not None:
                self.surface.notify(f"recording to {path}")
        self.surface.redraw()
