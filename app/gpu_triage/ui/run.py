"""Entry point of the dashboard subcommands: live, demo, replay.

Everything that can fail on user input (a bad file to replay, an unknown scenario) fails here, as a
UserError, before the screen is taken over. SIGHUP (the SSH session dropped) and SIGTERM end the app cleanly and
closes a recording in progress as a valid file.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.feeds import ReplayFeed, open_replay
from gpu_triage.safetext import clean
from gpu_triage.window import window_capacity

NO_GPU_BANNER = (
    "No NVIDIA GPU/driver found: showing host only. Run `gpu-triage demo` to see a recorded H200 session"
)
DEMO_LINE = (
    "Demo: a real recording of one NVIDIA H200 running known PyTorch cases one after another (looping). "
    "Try `gpu-triage demo data_pipeline` for a simulated 8-GPU server."
)


def build_app(command: str, args: argparse.Namespace, config: Config) -> Any:
    """Make the TriageApp for a subcommand without running it (tests and screenshots use this too)."""
    from gpu_triage.ui.app import TriageApp
    from gpu_triage.ui.app_header import load_labels
    from gpu_triage.ui.replay import ReplayApp

    record = getattr(args, "record", None)
    record_path = Path(record).expanduser() if record else None
    if record_path is not None and (command == "replay" or not getattr(args, "scenario", True)):
        raise UserError(f"--record {record}: {command} plays a recording already, there is nothing new to record "
                        "(--record is for `live` and `demo SCENARIO`)")
    if record_path is not None:
        from gpu_triage.trace.target import (
            check_record_target,  # pyarrow: it records from the start anyway
        )

        check_record_target(record_path)  # a bad --record FILE fails here, before the screen is taken
    if command == "replay":
        trace = open_replay(args.file)
        window_ticks, _ = window_capacity(config.window_s, trace.interval_s)  # the app says when it is capped
        feed = ReplayFeed(trace, window_ticks, speed=getattr(args, "speed", 1.0) or 1.0)
        # the reader's notice (a crash leftover read in place of FILE, a torn last tick) stays on screen
        # the file's name is anyone's: one visible line in the header (a newline in it would forge a second line)
        return ReplayApp(config, feed, source_label=f"replay: {clean(Path(args.file).name)}",
                         banner=getattr(trace, "notice", None))
    if command == "demo" and not getattr(args, "scenario", None):
        from gpu_triage.data import H200_TRACE_2S, labels_for

        trace = open_replay(H200_TRACE_2S)
        window_ticks, _ = window_capacity(config.window_s, trace.interval_s)  # the app says when it is capped
        feed = ReplayFeed(trace, window_ticks, loop=True, from_start=True, speed=getattr(args, "speed", 1.0) or 1.0)
        return ReplayApp(
            config,
            feed,
            source_label="demo: real H200 recording",
            banner=DEMO_LINE,
            labels=load_labels(labels_for(H200_TRACE_2S)),
        )
    if command == "demo":
        from gpu_triage.sources.sim import SimulatedSource

        source = SimulatedSource(
            args.scenario, gpus=args.gpus, cores=args.cores, seed=args.seed, interval_s=config.interval_s
        )
        return TriageApp(
            config,
            source=source,
            source_label=f"demo: simulated {args.gpus}-GPU server, {args.scenario}",
            record_path=record_path,
            speed=getattr(args, "speed", 1.0) or 1.0,
        )
    if command == "live":
        from gpu_triage.sources.base import Source
        from gpu_triage.sources.job import WithJob, monitor_for
        from gpu_triage.sources.live import LiveSource

        monitor = monitor_for(getattr(args, "job_log", None), getattr(args, "batch_size", None), config)
        from gpu_triage.config import inside_settings, stacks_wanted
        from gpu_triage.sources.inside import InsideSampler

        stacks = stacks_wanted(config, bool(getattr(args, "no_stacks", False)))
        # what the waiting processes are doing
        live = LiveSource(inside=InsideSampler(settings=inside_settings(config)) if stacks else None)
        status = live.status()  # a broken driver is no "no GPU" banner: the header's red fault line says it
        banner = None if status.gpu_available or status.fault() is not None else NO_GPU_BANNER
        watched: Source = live if monitor is None else WithJob(live, monitor, config.interval_s)  # + the job's pulse
        from gpu_triage.proc_control import ProcControl

        app = TriageApp(config, source=watched, source_label="live", banner=banner, record_path=record_path)
        app.procs.control = ProcControl()  # this machine's processes: user, command line, signals
        return app
    raise UserError(f"unknown dashboard command {command!r}")


def _metrics_exporter(command: str, args: argparse.Namespace, config: Config) -> Any:
    """``--metrics HOST:PORT``: the same exporter as ``gpu-triage export`` (gpu_triage.export.run)."""
    listen = getattr(args, "metrics", None)
    if not listen:
        return None
    if command != "live" and not getattr(args, "scenario", None):
        raise UserError("--metrics needs a live or simulated source (live, or demo SCENARIO), not a recording")
    from gpu_triage.export.run import Exporter

    return Exporter(listen, config)


def serve_metrics(app: Any, exporter: Any) -> None:
    """``--metrics``: the dashboard's own ticks and its own judge's verdicts (each tick diagnosed once) on
    /metrics too; the server starts."""
    app.publish_metrics = exporter.attach(app.source, app.interval_s).publish
    exporter.start()


def run_dashboard(command: str, args: argparse.Namespace, config: Config) -> int:
    exporter = _metrics_exporter(command, args, config)  # bound before the screen: a port in use is one line
    try:
        app = build_app(command, args, config)
    except BaseException:
        if exporter is not None:
            exporter.close()
        raise
    if exporter is not None:
        serve_metrics(app, exporter)

    def on_hangup(signum: int, frame: object) -> None:
        # the terminal is gone: finish the recording first (a valid file), then leave the app
        app.shutdown()
        loop = app._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(app.exit, 0)

    # SIGTERM too (`kill PID`, a scheduler ending the job, systemd): without a handler Python died on the
    # spot and a recording in progress was left as a stream for `gpu-triage recover`
    stop_signals = [s for s in (getattr(signal, "SIGHUP", None), signal.SIGTERM) if s is not None]
    previous = {s: signal.signal(s, on_hangup) for s in stop_signals}
    # Textual draws on stderr: a log record reaching Python's last-resort handler (WARNING and up, printed to
    # stderr) would be written across the screen. Unless logging was set up, records go nowhere meanwhile.
    ours = logging.getLogger("gpu_triage")
    quiet = logging.NullHandler() if not ours.handlers and not logging.getLogger().handlers else None
    if quiet is not None:
        ours.addHandler(quiet)
    try:
        # Mouse tracking off: nothing on the screen is a button, and with it on (Textual asks for every motion)
        # selecting a PID or a command line to copy needed Shift in most terminals; off, the terminal's own
        # selection and scroll-back work as under htop started with mouse support off, or watch
        result = app.run(mouse=False)
    finally:
        app.shutdown()
        if exporter is not None:
            exporter.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
        if quiet is not None:
            ours.removeHandler(quiet)
        for note in app.exit_notes:
            print(f"gpu-triage: {note}", file=sys.stderr)
    # Textual catches a crash inside the app, prints it and sets return_code 1 while run() returns None:
    # without this an internal error exited with status 0
    return int(app.return_code or result or 0)
