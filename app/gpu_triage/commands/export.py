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

from gpu_triage.config import Config, stacks_wanted
from gpu_triage.export.monitor import Monitor
from gpu_triage.export.run import Exporter
from gpu_triage.model import Tick
from gpu_triage.recording.resilient import RetryingRecording
from gpu_triage.recording.source import job_monitor, recorded_source
from gpu_triage.sources.base import SourceStatus
from gpu_triage.stopsignals import WAKE_S, StopSignals

log = logging.getLogger(__name__)



def run_export(args: argparse.Namespace, config: Config, *, stop: StopSignals | None = None) -> int:
    from gpu_triage.sampler import Sampler

    interval_s = float(getattr(args, "interval", None) or config.interval_s)
    record_dir = getattr(args, "record", None)
    if record_dir:
        from gpu_triage.storage.dataset import check_dataset_dir

        check_dataset_dir(record_dir)  # an unwritable DIR: one line, exit 2, before anything starts
    # the training's own pulse, as `record` reads it; a bad log fails here, before the address is bound
    job = job_monitor(args.source, config, getattr(args, "job_log", None), getattr(args, "batch_size", None))
    web = None
    if getattr(args, "web_config", None):  # TLS and basic auth: checked whole before anything binds
        from gpu_triage.export.webconfig import load_web_config

        web = load_web_config(args.web_config)
    pid_labels = bool(getattr(args, "pid_labels", False))
    exporter = Exporter(args.listen, config, pid_labels=pid_labels, web=web)  # binds: port in use fails here
    try:
        # the stacks are read for the recording (--record) only: the metrics have no series for them
        stacks = bool(record_dir) and stacks_wanted(config, bool(getattr(args, "no_stacks", False)))
        source = recorded_source(args.source, config, interval_s, stacks=stacks, monitor=job, gpus=args.gpus,
                                 seed=args.seed, tell=_tell)
    except BaseException:
        exporter.close()
        raise
    monitor = exporter.attach(source, interval_s)
    recording = (RetryingRecording(record_dir, source, interval_s, getattr(args, "rotate", None), config)
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


def take(monitor: Monitor, recording: RetryingRecording | None, tick: Tick, status: SourceStatus | None = None) -> None:
    """One sampled tick, judged once for the metrics and the recording (whose files start the judge's window
    afresh, as ``diagnose FILE`` starts it); the metrics first: they never wait for the disk."""
    monitor.ingest(tick, status, fresh=recording is not None and recording.opens_file(tick))
    if recording is not None and monitor.judged is not None:
        recording.append(monitor.judged.stamped())


def _tell(message: str) -> None:
    print(f"gpu-triage: {message}", file=sys.stderr, flush=True)
