"""``gpu-triage record``: the recorder's options checked and its source made; the recording is
:func:`gpu_triage.recorder.record_source`."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_triage.config import Config, inside_settings, stacks_wanted
from gpu_triage.errors import UserError
from gpu_triage.fleet.dataset import check_dataset_dir, is_dataset_target
from gpu_triage.recorder import QuietOnFailure, record_source
from gpu_triage.sources.spec import make_source
from gpu_triage.trace.target import check_record_target


def run_record(args: argparse.Namespace, config: Config) -> int:
    interval_s = float(getattr(args, "interval", None) or config.interval_s)
    duration_s: float | None = getattr(args, "duration", None)
    fast = bool(getattr(args, "fast", False))
    spec = args.source
    # The output first: a name that cannot be written is said before a source is opened (NVML start-up on a
    # live machine) or a single tick is sampled. DIR/ is a dataset, made now so that it stays one.
    if is_dataset_target(args.output):
        output = check_dataset_dir(args.output)
    else:
        output = check_record_target(args.output, parent_must_exist=True)
    if fast and not spec.startswith("sim:"):
        raise UserError("--fast works with sim:SCENARIO sources only: a live machine cannot be sampled faster")
    start = None
    if fast and duration_s:
        now = datetime.now(UTC)
        if duration_s > now.timestamp():  # 1e15 s was an OverflowError; before 1970 no recording holds a tick
            raise UserError(f"--duration {duration_s:g} with --fast: a simulated recording ends now, so it can go "
                            f"back at most to 1970 ({now.timestamp():.0f} s): give a shorter --duration")
        start = now - timedelta(seconds=duration_s)  # the fast trace ends about now
    job_log = getattr(args, "job_log", None)
    monitor = None
    if spec == "live" or job_log:  # the training's own pulse (pulse files, --job-log): checked before recording
        from gpu_triage.sources.job import monitor_for

        monitor = monitor_for(job_log, getattr(args, "batch_size", None), config, use_pulse=spec == "live")
    source = make_source(spec, gpus=args.gpus, seed=args.seed, interval_s=interval_s, start=start,
                         stacks=stacks_wanted(config, bool(getattr(args, "no_stacks", False))),
                         inside=inside_settings(config))
    if monitor is not None:
        from gpu_triage.sources.job import WithJob

        def tell(message: str) -> None:
            print(f"gpu-triage: {message}", file=QuietOnFailure(sys.stderr), flush=True)

        source = WithJob(source, monitor, interval_s, on_message=tell)
    record_source(
        source,
        output,
        interval_s,
        duration_s=duration_s,
        fast=fast,
        describe_machine=spec == "live",
        config=config,
        rotate_s=getattr(args, "rotate", None),
    )
    return 0


def live_source(args: argparse.Namespace, config: Config, interval_s: float) -> Any:
    """This machine as ``record`` samples it: the live source (its stacks as the config and --no-stacks say)
    with the job's pulse and ``--job-log`` beside it (``gpu-triage run --record``)."""
    from gpu_triage.sources.job import WithJob, monitor_for  # noqa: PLC0415

    monitor = monitor_for(getattr(args, "job_log", None), getattr(args, "batch_size", None), config)
    source = make_source("live", interval_s=interval_s, inside=inside_settings(config),
                         stacks=stacks_wanted(config, bool(getattr(args, "no_stacks", False))))
    if monitor is None:
        return source

    def tell(message: str) -> None:
        print(f"gpu-triage: {message}", file=QuietOnFailure(sys.stderr), flush=True)

    return WithJob(source, monitor, interval_s, on_message=tell)
