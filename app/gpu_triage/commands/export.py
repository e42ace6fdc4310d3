"""``gpu-triage export``: the headless daemon that serves ``/metrics`` through
:class:`gpu_triage.export.run.Exporter`.

Start-up order: the listen address is bound first (a port in use or a bad address is one line and exit
2 before any sampling), then the source is opened and the sampler started. SIGTERM, SIGINT and SIGHUP
stop it cleanly: the server stops accepting and finishes the scrapes in flight, then the sampler stops
and the source is closed.
"""

from __future__ import annotations

import argparse
import sys
import threading

from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.export.run import Exporter
from gpu_triage.model import Tick
from gpu_triage.sources.base import Source
from gpu_triage.stopsignals import StopSignals

IDLE_WAIT_S = 60.0  # the main thread only waits for a stop: a safety net, not a cadence


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
        source = make_source(args.source, gpus=args.gpus, seed=args.seed, interval_s=interval_s)
        if job is not None:
            from gpu_triage.sources.job import WithJob

            source = WithJob(source, job, interval_s, on_message=_tell)
    except BaseException:
        exporter.close()
        raise
    monitor = exporter.attach(source)
    recording = _Recording(record_dir, source, interval_s, getattr(args, "rotate", None)) if record_dir else None
    reported: set[str] = set()

    def on_tick(tick: Tick) -> None:
        monitor.ingest(tick, source.status())  # first: the metrics never wait for the disk
        if recording is not None:
            recording.append(tick)

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
            # a signal's handler sets the event (a blocked wait is interrupted on POSIX): no 1 s polling
            while not stop.event.wait(IDLE_WAIT_S):
                pass
        finally:
            exporter.close()  # first: scrapes in flight finish on the last snapshot
            sampler.stop()
            source.close()
            if recording is not None:
                recording.close()
    print(f"stopped ({stop.received or 'done'}) after {monitor.snapshot.ticks} ticks", flush=True)
    return 0


def _tell(message: str) -> None:
    print(f"gpu-triage: {message}", file=sys.stderr, flush=True)


class _Recording:
    """``export --record DIR``: the rotating dataset, appended on the sampler thread after the metrics.
    A write error (a full disk) stops the recording with one line on stderr; the metrics go on."""

    def __init__(self, root: str, source: Source, interval_s: float, rotate_s: float | None) -> None:
        from gpu_triage.fleet.dataset import DatasetWriter
        from gpu_triage.hostmeta import recorder_extra

        host = source.host_info()
        host.extra.update(recorder_extra(source.name, interval_s, describe_machine=source.name == "live"))
        self.writer: DatasetWriter | None = DatasetWriter(root, host, interval_s, rotate_s=rotate_s)

    def append(self, tick: Tick) -> None:
        if self.writer is None:
            return
        try:
            self.writer.append(tick)
        except UserError as err:  # TraceWriter's own words: what failed, and that the stream is kept
            self.writer.abort()
            self.writer = None
            print(f"gpu-triage: recording stopped, still serving metrics: {err}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.writer is None:
            return
        try:
            self.writer.close()
        except UserError as err:
            print(f"gpu-triage: {err}", file=sys.stderr, flush=True)
