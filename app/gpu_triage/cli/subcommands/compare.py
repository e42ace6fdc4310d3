"""``gpu-triage compare BEFORE AFTER``: two recordings (or datasets) side by side."""

from __future__ import annotations

import argparse

from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("before", metavar="BEFORE", help="a recording, a dataset directory, or a glob (quote it)")
    p.add_argument("after", metavar="AFTER", help="the same, for after the change")
    p.add_argument("--json", action="store_true",
                   help="print JSON for scripts: every figure, with its unit, whether it changed, and the headline")
    p.add_argument("--all", action="store_true",
                   help="show every figure, also those that did not change (below 1 pp, or 2 %% for the rest)")
    p.add_argument("--progress", action="store_true",
                   help="report the diagnosis's progress on stderr even when it is not a terminal")


def _run(call: Invocation) -> int:
    from gpu_triage.commands.compare import run_compare

    return run_compare(call.args, call.config)


COMMAND = Command(
    name="compare",
    order=70,
    help="compare two recordings (or datasets): before and after a tuning change",
    description=(
        "One line first, what changed (samples/s, or GPU-Util, and the bottleneck), then per card and "
        "overall, side by side with the change (percentages in points): the job's samples/s, the gain "
        "BEFORE's verdicts promised beside the gain measured (one above the bound said as a finding), utilisation, "
        "stalls, diagnoses, links, host; what did not change is left out unless --all. Either side may "
        "be a dataset directory (`record -o DIR/`, `export --record DIR`) or a quoted glob of its "
        "partitions or files, read as one recording; a side over several hosts gets a block per host. "
        "Unreadable files are left out and named."
    ),
    arguments=_arguments,
    run=_run,
)
