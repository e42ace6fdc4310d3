"""``gpu-triage record -o FILE|DIR/``: ticks recorded to Parquet with no screen."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options, values
from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE|DIR/",
        help="the Parquet file to write; or DIR/ (or an existing directory): a Hive-partitioned dataset "
        "DIR/host=NAME/date=YYYY-MM-DD/HHMMSS-….parquet, a new file every --rotate seconds",
    )
    options.add_rotate(p)
    p.add_argument(
        "--duration",
        type=values.positive_float,
        metavar="S",
        help=(
            "stop after S seconds: S / interval ticks, the first one interval after the start "
            "(--duration 10 at 2 s: 5 ticks, at 2, 4, 6, 8, 10 s); default: until stopped"
        ),
    )
    options.add_source(p)
    options.add_seconds(p, "--interval", "seconds between ticks (default 2, from the config file if set)")
    p.add_argument(
        "--fast",
        action="store_true",
        help="sim sources only: write simulated ticks as fast as they are made (--duration counts simulated time)",
    )
    options.add_job(p)
    options.add_stacks(p)


def _run(call: Invocation) -> int:
    from gpu_triage.commands.record import run_record

    return run_record(call.args, call.config)


COMMAND = Command(
    name="record",
    order=30,
    help="record ticks to a Parquet file, headless (tmux, nohup, systemd)",
    description=(
        "Record without a screen. Each tick is appended to a crash-safe stream beside FILE "
        "(FILE.partial.arrows, locked while this recorder runs); a clean stop (--duration reached, Ctrl-C, "
        "SIGTERM) turns it into FILE. After a crash, `gpu-triage recover`."
    ),
    arguments=_arguments,
    run=_run,
)
