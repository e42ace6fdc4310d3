"""``export --record DIR``'s recording: a rotating dataset that outlives a full disk, appended on the exporter's
sampler thread after the metrics, with the ticks the exporter's judge stamped."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.model import Tick
from gpu_triage.recording.session import Recording, recording_host
from gpu_triage.sources.base import Source

log = logging.getLogger(__name__)


class RetryingRecording:
    """A rotating dataset whose write errors cost the file they hit, not the recording.

    A write error (a full disk) ends the file it hit (its ticks kept: Parquet if that can still be written,
    else its stream for ``recover``) and the next tick tries again in a new file, tick after tick, until a
    write succeeds: a disk that fills for an hour costs that hour, not every hour after it. The outage is
    said twice on stderr and in the log, when it begins and when the recording resumes, and ``up`` (served as
    ``gpu_triage_recording_up``) is False meanwhile. A tick whose retry fails costs a file without a tick,
    which leaves nothing behind."""

    def __init__(self, root: str | Path, source: Source, interval_s: float, rotate_s: float | None,
                 config: Config | None = None) -> None:
        host = recording_host(source.host_info(), source.name, interval_s, config or Config(),
                              describe_machine=source.name == "live")
        self.recording = Recording(root, host, interval_s, rotate_s=rotate_s, dataset=True)
        self.up = True
        self._missed = 0  # ticks not recorded in the current outage

    def opens_file(self, tick: Tick) -> bool:
        """Whether ``tick`` begins a file (where ``diagnose FILE`` starts its window, and so the judge)."""
        return self.recording.opens_file(tick)

    def append(self, tick: Tick) -> None:
        """Record ``tick``, judged already (its raw verdict set: ``Judgement.stamped``)."""
        try:
            self.recording.append(tick)
        except UserError as err:  # TraceWriter's own words: what failed, and where the ticks so far are
            self._failed(err)
            return
        if not self.up:
            self.up = True
            _say(f"recording resumed into {self.recording.current} after {self._missed} ticks were not recorded",
                 logging.WARNING)
            self._missed = 0

    def _failed(self, err: UserError) -> None:
        self._missed += 1
        if self.up:
            self.up = False
            _say(f"recording stopped, still serving metrics, retrying at each tick: {err}", logging.ERROR)
        else:
            log.debug("recording retry failed: %s", err)
        try:
            self.recording.end_file()
        except UserError as kept:  # the file's ticks could not become Parquet: its stream says how to get them
            _say(str(kept), logging.ERROR)

    def close(self) -> None:
        try:
            self.recording.close()
        except UserError as err:
            print(f"gpu-triage: {err}", file=sys.stderr, flush=True)


def _say(message: str, level: int) -> None:
    """One line on stderr (the journal, under systemd) and the same record in the log file."""
    print(f"gpu-triage: {message}", file=sys.stderr, flush=True)
    log.log(level, "%s", message, extra={"already_shown": True})
