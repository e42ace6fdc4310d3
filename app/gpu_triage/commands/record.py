"""``gpu-triage record``: the recorder's options checked and its source made; the recording is
:func:`gpu_triage.recording.headless.record_source`."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta

from gpu_triage.config import Config, stacks_wanted
from gpu_triage.errors import UserError
from gpu_triage.recording.headless import QuietOnFailure, record_source
from gpu_triage.recording.source import job_monitor, recorded_source
from gpu_triage.sources.base import Source
from gpu_triage.storage.dataset import check_dataset_dir, is_dataset_target
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
    source = source_of(args, spec, config, interval_s, gpus=args.gpus, seed=args.seed, start=start)
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


def source_of(args: argparse.Namespace, spec: str, config: Config, interval_s: float, *, gpus: int = 8,
              seed: int = 0, start: datetime | None = None) -> Source:
    """What ``record`` samples (``gpu-triage run --record`` too, with ``spec`` "live"): the source, its stacks as
    the config and ``--no-stacks`` say, the job's pulse and ``--job-log`` beside it (checked first)."""
    monitor = job_monitor(spec, config, getattr(args, "job_log", None), getattr(args, "batch_size", None))
    return recorded_source(spec, config, interval_s, monitor=monitor, gpus=gpus, seed=seed, start=start,
                           stacks=stacks_wanted(config, bool(getattr(args, "no_stacks", False))), tell=_tell)


def _tell(message: str) -> None:
    print(f"gpu-triage: {message}", file=QuietOnFailure(sys.stderr), flush=True)
