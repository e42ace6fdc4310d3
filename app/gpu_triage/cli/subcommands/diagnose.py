"""``gpu-triage diagnose FILE``: a recording diagnosed offline; a dataset summarised (``--summary``)."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options, values
from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", nargs="+",
                   help="a recording; or for --summary one or more dataset directories or globs, quoted globs and "
                   "brace globs ('host{1,2}/**/*.parquet') expanded by gpu-triage")
    p.add_argument("--json", action="store_true", help="print JSON ({'segments': [...], 'gaps': [...]}) for scripts; "
                   "its times are always ISO 8601 UTC")
    p.add_argument("--utc", action="store_true",
                   help="print the report's times in UTC (default: this machine's local time, the zone named)")
    options.add_seconds(p, "--window",
                        "seconds of history each verdict looks at (default 300, from the config file if set)")
    p.add_argument(
        "--resolution",
        type=values.resolution,
        metavar="S",
        help="judge the recording every S seconds (0: every tick). Default: every tick up to 1,500 ticks, "
        "beyond that 1,500 verdicts spread over the recording (a day at 2 s: one a minute); a verdict "
        "already holds 6 s before it shows, so finer only costs time (about 5 ms per verdict for 8 cards)",
    )
    p.add_argument("--progress", action="store_true",
                   help="report progress on stderr even when it is not a terminal (a log, a pipe)")
    p.add_argument(
        "--summary",
        action="store_true",
        help="for a dataset (a directory from `record -o DIR/` or `export --record DIR`, or a glob of its "
        "files): hosts and owners (Slurm job, pod, container, user; a job across hosts as one) ranked by "
        "GPU-hours lost with the bottleneck and its knob, then per host the share of time in each bottleneck "
        "and the worst episodes, from a verdict "
        "every 30 s of data (--resolution is for one recording); implied when FILE is a directory or a glob",
    )
    p.add_argument("--since", metavar="WHEN", help="--summary: only the ticks from WHEN on: a date (2026-01-05), a "
                   "date and time ('2026-01-05 09:00', local unless it names a zone or --utc), or an age (7d, 12h)")
    p.add_argument("--until", metavar="WHEN", help="--summary: only the ticks before WHEN (as --since)")
    p.add_argument("--top", type=values.positive_int, metavar="N",
                   help="--summary: rank and detail the N hosts and owners that lost the most GPU-hours (default "
                   "10; --json has them all)")


def _run(call: Invocation) -> int:
    from gpu_triage.fleet_history.summary import is_dataset_spec

    paths = call.args.file
    if call.args.summary or len(paths) > 1 or is_dataset_spec(paths[0]):
        from gpu_triage.commands.summary import run_summary

        return run_summary(call.args, call.config)
    for option in ("since", "until", "top"):
        if getattr(call.args, option) is not None:
            from gpu_triage.errors import UserError

            raise UserError(f"--{option} is for a dataset's summary: give a directory or a glob, or --summary")
    call.args.file = paths[0]
    from gpu_triage.commands.diagnose import run_diagnose

    return run_diagnose(call.args, call.config)


COMMAND = Command(
    name="diagnose",
    order=60,
    help="diagnose a recording offline, segment by segment",
    description="Run the two-minute method over FILE and print each segment's pattern, bottleneck and advice. "
    "A stretch with no tick for more than 5 intervals is shown as a gap; the interval is taken from the "
    "timestamps when the file's metadata contradicts them.",
    arguments=_arguments,
    run=_run,
)
