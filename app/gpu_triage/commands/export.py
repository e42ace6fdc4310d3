"""``gpu-triage export``: the headless daemon that serves ``/metrics`` through
:class:`gpu_triage.export.run.Exporter`.

Start-up order: the listen address is bound first (a port in use or a bad address is one line and exit
2 before any sampling), then the source is opened and the sampler started. SIGTERM, SIGINT and SIGHUP
stop it cleanly and promptly whatever the clients do: the server stops accepting, drops requests still
arriving and gives answers being written a bounded grace (export/server.py), then the sampler stops, the
source is closed and the recording's open file becomes Parquet.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading

from gpu_triage.config import Config, inside_settings, stacks_wanted
from gpu_triage.errors import UserError
from gpu_triage.export.monitor import Monitor
from gpu_triage.export.run import Exporter
from gpu_triage.model import Tick
from gpu_triage.sources.base import Source, SourceStatus
from gpu_triage.stopsignals import WAKE_S, StopSignals

log = logging.getLogger(__name__)



def run_export(args: argparse.Namespace, config: Config, *, stop: StopSignals | None = None) -> int:
    from gpu_triage.sampler import Sampler
    from gpu_triage.sources.spec import make_source

    interval_s = float(getattr(args, "interval", None) or config.interval_s)
    record_dir = getattr(args, "record", None)
    if record_dir:
        from gpu_triage.fleet.dataset import check_dataset_dir

        check_dataset_dir(record_dir)  # an unwritable DIR: one line, exit 2, before anything starts
    job_log = getattr(args, "job_log", None)
    job = None
    if args.source == "live" or job_log:  # the training's own pulse, as `record` reads it; a bad log fails here
        from gpu_triage.sources.job import monitor_for

        job = monitor_for(job_log, getattr(args, "batch_size", None), config, use_pulse=args.source == "live")
    web = None
    if getattr(args, "web_config", None):  # TLS and basic auth: checked whole before anything binds
        from gpu_triage.export.webconfig import load_web_config

        web = load_web_config(args.web_config)
    pid_labels = bool(getattr(args, "pid_labels", False))
    exporter = Exporter(args.listen, config, pid_labels=pid_labels, web=web)  # binds: port in use fails here
    try:
        # the stacks are read for the recording (--record) only: the metrics have no series for them
        stacks = bool(record_dir) and stacks_wanted(config, bool(getattr(args, "no_stacks", False)))
        source = make_source(args.source, gpus=args.gpus, seed=args.seed, interval_s=interval_s, stacks=stacks,
                             inside=inside_settings(config))
        if job is not None:
            from gpu_triage.sources.job import WithJob

            source = WithJob(source, job, interval_s, on_message=_tell)
    except BaseException:
        exporter.close()
        raise
    monitor = exporter.attach(source, interval_s)
    recording = (_Recording(record_dir, source, interval_s, getattr(args, "rotate", None), config)
                 if record_dir else None)
    if recording is not None:
        exporter.report_recording(lambda: recording.up)
    reported: set[str] = set()

    def on_tick(tick: Tick) -> None:
        take(monitor, recording, tick, source.status())

    def on_error(exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if text not in reported:  # each distinct source problem once; the metrics keep being served
            reported.add(text)
            print(f"gpu-triage: sampling failed ({text}); still serving", file=sys.stderr, flush=True)

    for message in source.status().messages:
        print(f"gpu-triage: {message}", file=sys.stderr, flush=True)
    sampler = Sampler(source, interval_s, on_tick, on_error, first_after_s=min(interval_s, 0.5))
    stop = stop or StopSignals(threading.Event())  # SIGINT/SIGTERM/SIGHUP, as `record` stops
    with stop:
        try:
            exporter.start()
            sampler.start()
            print(
                f"serving metrics of {source.name} on {exporter.server.url} every {interval_s:g} s"
                + (f", recording into {record_dir}" if record_dir else "")
                + "; Ctrl-C to stop",
                flush=True,
            )
            # a signal's handler sets the event; the wait wakes at least every WAKE_S (stopsignals.py says why)
            while not stop.event.wait(WAKE_S):
                pass
        finally:
            exporter.close()  # first, and bounded: answers being written get a short grace, no client is waited on
            sampler.stop()
            source.close()
            if recording is not None:
                recording.close()
    print(f"stopped ({stop.received or 'done'}) after {monitor.snapshot.ticks} ticks", flush=True)
    return 0


def take(monitor: Monitor, recording: _Recording | None, tick: Tick, status: SourceStatus | None = None) -> None:
    """One sampled tick, judged once for the metrics and the recording (whose files start the judge's window
    afresh, as ``diagnose FILE`` starts it); the metrics first: they never wait for the disk."""
    monitor.ingest(tick, status, fresh=recording is not None and recording.opens_file(tick))
    if recording is not None and monitor.judged is not None:
        recording.append(monitor.judged.stamped())


def _tell(message: str) -> None:
    print(f"gpu-triage: {message}", file=sys.stderr, flush=True)


class _Recording:
    """``export --record DIR``: the rotating dataset, appended on the sampler thread after the metrics.

    A write error (a full disk) ends the file it hit (its ticks kept: Parquet if that can still be written,
    else its stream for ``recover``) and the next tick tries again in a new file, tick after tick, until a
    write succeeds: a disk that fills for an hour costs that hour, not every hour after it. The outage is
    said twice on stderr and in the log, when it begins and when the recording resumes, and
    ``gpu_triage_recording_up`` is 0 meanwhile. A tick whose retry fails costs a file without a tick,
    which leaves nothing behind."""

    def __init__(self, root: str, source: Source, interval_s: float, rotate_s: float | None,
                 config: Config | None = None) -> None:
        from gpu_triage.fleet.dataset import DatasetWriter
        from gpu_triage.hostmeta import recorder_extra
        from gpu_triage.verdicts.settings import with_settings

        config = config or Config()
        host = source.host_info()
        host.extra.update(recorder_extra(source.name, interval_s, describe_machine=source.name == "live"))
        host = with_settings(host, config.thresholds, config.window_s)  # what the stored verdicts were judged with
        self.writer = DatasetWriter(root, host, interval_s, rotate_s=rotate_s)
        self.up = True
        self._missed = 0  # ticks not recorded in the current outage

    def opens_file(self, tick: Tick) -> bool:
        """Whether ``tick`` begins a file (where ``diagnose FILE`` starts its window, and so the judge)."""
        return self.writer.opens_file(tick.ts)

    def append(self, tick: Tick) -> None:
        """Record ``tick``, judged already (its raw verdict set: :meth:`Judgement.stamped`)."""
        try:
            self.writer.append(tick)
        except UserError as err:  # TraceWriter's own words: what failed, and where the ticks so far are
            self._failed(err)
            return
        if not self.up:
            self.up = True
            _say(
                f"recording resumed into {self.writer.current} after {self._missed} ticks were not recorded",
                logging.WARNING,
            )
            self._missed = 0

    def _failed(self, err: UserError) -> None:
        self._missed += 1
        if self.up:
            self.up = False
            _say(f"recording stopped, still serving metrics, retrying at each tick: {err}", logging.ERROR)
        else:
            log.debug("recording retry failed: %s", err)
        try:
            self.writer.end_file()
        except UserError as kept:  # the file's ticks could not become Parquet: its stream says how to get them
            _say(str(kept), logging.ERROR)

    def close(self) -> None:
        try:
            self.writer.close()
        except UserError as err:
            print(f"gpu-triage: {err}", file=sys.stderr, flush=True)


def _say(message: str, level: int) -> None:
    """One line on stderr (the journal, under systemd) and the same record in the log file."""
    print(f"gpu-triage: {message}", file=sys.stderr, flush=True)
    log.log(level, "%s", message, extra={"already_shown": True})
