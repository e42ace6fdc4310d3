"""``gpu-triage live``, also what ``gpu-triage`` with no subcommand runs: the dashboard on this machine."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options
from gpu_triage.cli.command import Command, always, on_dashboard


def _arguments(p: argparse.ArgumentParser) -> None:
    options.add_sampling(p)
    p.add_argument(
        "--record", metavar="FILE", default=argparse.SUPPRESS, help="record every tick to FILE (Parquet)"
    )
    options.add_job(p)
    options.add_stacks(p)
    options.add_metrics(p)


COMMAND = Command(
    name="live",
    order=10,
    help="the live dashboard (the default)",
    description="Watch this machine's GPUs, CPU cores and disks live.",
    arguments=_arguments,
    run=on_dashboard("live"),
    on_screen=always,
)
