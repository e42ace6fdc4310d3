"""``gpu-triage baseline``: the command. Starts the runs of :mod:`gpu_triage.checkup.baseline` (1 rank, then N),
with the ordinary recorder beside them when ``--record`` is given, stops them on Ctrl-C/SIGTERM/SIGHUP with
what was measured, and prints the report (text or ``--json``). Exit 0, 1 when scaling is flagged, 130 when
stopped."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from gpu_triage.checkup.baseline import INIT_TIMEOUT_S, WARMUP_STEPS, BaselineReport, render, run_once
from gpu_triage.checkup.torchreq import check_torch_installed, require_torch
from gpu_triage.config import Config
from gpu_triage.errors import UserError

log = logging.getLogger(__name__)


class _Recorder:
    """The ordinary recorder (live source, crash-safe stream → Parquet) in a thread beside the runs."""

    def __init__(self, path: Path, interval_s: float, checkup: dict[str, Any], config: Config) -> None:
        from gpu_triage.hostmeta import recorder_extra
        from gpu_triage.recording.session import Recording
        from gpu_triage.recording.source import job_monitor, recorded_source
        from gpu_triage.sampler import Sampler

        # the live source, with the job's own pulse beside it: every rank calls pulse.step, so the recording
        # carries the baseline's samples/s on the cards' time axis (the job column), as a real run's would
        self.source = recorded_source("live", config, interval_s, stacks=False, monitor=job_monitor("live", config))
        host = self.source.host_info()
        host.extra.update(recorder_extra(self.source.name, interval_s))
        host.extra["checkup"] = checkup
        # the ticks are stored as sampled, without verdicts: the baseline's report is the judgement
        self.writer = Recording(path, host, interval_s, dataset=False)
        self.failure: list[BaseException] = []

        def on_tick(tick: Any) -> None:
            if not self.failure:
                try:
                    self.writer.append(tick)
                except Exception as exc:  # a disk error ends the recording; reported at close
                    self.failure.append(exc)

        def on_error(exc: BaseException) -> None:
            log.warning("sampling failed during the baseline: %s", exc)

        self.sampler = Sampler(self.source, interval_s, on_tick, on_error)
        self.sampler.start()

    def close(self) -> Path:
        self.sampler.stop()
        self.source.close()
        if self.failure:
            self.writer.abort()
            raise UserError(f"the recording failed ({self.failure[0]}); what was written is kept for `recover`")
        return self.writer.close()


def _raise_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _stop_on_term() -> dict[int, Any]:
    """SIGTERM and SIGHUP (a `timeout`, a scheduler, a closed terminal) stop the baseline as Ctrl-C does:
    the ranks are ended and what was measured is reported. Returns the handlers to restore."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                previous[sig] = signal.signal(sig, _raise_interrupt)
    return previous


def _device_and_gpus(args: argparse.Namespace) -> tuple[str, int]:
    """The device the runs use and how many cards (ranks on the CPU) the wide run takes; a request this
    machine cannot meet is the user's error. Only a question about CUDA imports torch here: with --device cpu
    the ranks import it and this process does not (2-3 s of CPU and ~300 MB saved before the first rank)."""
    if args.device == "cpu":
        check_torch_installed("baseline")
        return "cpu", args.gpus if args.gpus is not None else 2
    torch = require_torch("baseline")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: PyTorch sees no CUDA device here (a CPU build, or no driver); use --device cpu")
    available = torch.cuda.device_count() if device == "cuda" else (os.cpu_count() or 1)
    gpus = args.gpus if args.gpus is not None else (available if device == "cuda" else 2)
    if device == "cuda" and gpus > available:
        raise UserError(f"--gpus {gpus}: PyTorch sees {available} card(s) here (CUDA_VISIBLE_DEVICES?)")
    return device, gpus


def _run_all(report: BaselineReport, cfg: dict[str, Any], tty: bool, stopping: threading.Event) -> None:
    """One run on one card, then (with more than one) one on all of them, into ``report``; an interrupted run
    ends the series."""
    with tempfile.TemporaryDirectory(prefix="gpu-triage-baseline-") as tmp:
        for world in [1, report.gpus] if report.gpus > 1 else [1]:
            if stopping.is_set():
                break
            if tty:
                print(f"  running on {world} {'card' if report.device == 'cuda' else 'rank'}(s) ...", flush=True)
            result = run_once(world, cfg, Path(tmp), stopping)
            if result is not None:
                report.runs.append(result)
            if stopping.is_set() or (result is not None and result.get("interrupted")):
                report.interrupted = True
                break


def run_baseline(args: argparse.Namespace, config: Config) -> int:
    device, gpus = _device_and_gpus(args)
    size = args.model_size or ("small" if device == "cuda" else "tiny")
    cfg = {
        "device": device,
        "model_size": size,
        "amp": bool(args.amp),
        "seconds": float(args.seconds),
        "warmup_steps": WARMUP_STEPS,
        "init_timeout_s": INIT_TIMEOUT_S,
        "threads": max(1, (os.cpu_count() or 1) // gpus),  # CPU: every rank gets the same share, in both runs
    }
    report = BaselineReport(device=device, gpus=gpus, model_size=size, amp=bool(args.amp), seconds=args.seconds)
    recorder = None
    if args.record:
        from gpu_triage.trace.target import check_record_target

        check_record_target(Path(args.record))
        interval = float(getattr(args, "interval", None) or config.interval_s)
        recorder = _Recorder(Path(args.record), interval, {"step": "baseline", **report.to_json()}, config)
    stopping = threading.Event()
    tty = sys.stdout.isatty() and not args.json
    previous = _stop_on_term()
    try:
        _run_all(report, cfg, tty, stopping)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if recorder is not None:
            path = recorder.close()
            report.recording = str(path)
            Path(f"{path}.baseline.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    print(json.dumps(report.to_json(), indent=2) if args.json else render(report), flush=True)
    if report.interrupted:
        return 130
    return 1 if report.flagged else 0
