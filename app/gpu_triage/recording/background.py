"""The dashboard's recorder (``r``, ``live --record``): a :class:`~gpu_triage.recording.session.Recording`
appended on its own thread, so that recording never costs the UI thread more than a queue put."""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path

from gpu_triage.model import HostInfo, Tick
from gpu_triage.recording.session import Recording

log = logging.getLogger(__name__)


class Recorder:
    """Appends ticks to one trace file on a background thread; the UI thread only enqueues (each tick with its
    raw verdict: the dashboard's judge stamps it, :meth:`~gpu_triage.verdicts.judge.Judgement.stamped`).

    ``ticks`` and ``bytes_written`` are for the on-screen "● REC" line; :meth:`close` drains the queue and
    closes the recording so that the result is a valid Parquet file (also on SIGHUP).
    """

    def __init__(self, path: Path, host: HostInfo, interval_s: float) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._recording = Recording(self.path, host, interval_s, dataset=False)
        log.info("recording from the dashboard to %s every %g s", self.path, interval_s)
        self._queue: queue.Queue[Tick | None] = queue.Queue()
        self.ticks = 0
        self.error: BaseException | None = None
        self.closed_path: Path | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gpu-triage-recorder", daemon=True)
        self._thread.start()

    def append(self, tick: Tick) -> None:
        if not self._closed:
            self._queue.put(tick)

    def _run(self) -> None:
        while True:
            tick = self._queue.get()
            if tick is None:
                return
            if self.error is not None:
                continue
            try:
                self._recording.append(tick)
                self.ticks += 1
            except Exception as exc:  # disk full, permission: shown on screen, recording stops
                log.exception("recording to %s stopped", self.path)
                self.error = exc

    @property
    def bytes_written(self) -> int:
        """Bytes on disk so far: the crash-safe stream beside the target."""
        return self._recording.bytes_written

    def close(self) -> Path | None:
        """Finish the file; safe to call twice and from any thread."""
        with self._lock:
            if self._closed:
                return self.closed_path
            self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=30)
        self.closed_path = self._recording.close()
        log.info("recording stopped: %d ticks in %s", self.ticks, self.closed_path)
        return self.closed_path
