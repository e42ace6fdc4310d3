"""``gpu-triage snapshot``: one reading of every card, the host, the processes and the verdict, no screen."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options, values
from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object (times ISO 8601 UTC)")
    p.add_argument("--seconds", type=values.positive_float, default=6.0, metavar="S",
                   help="the window sampled (default 6: before that the verdict is still collecting)")
    p.add_argument("--interval", dest="snapshot_interval", type=values.interval, default=1.0, metavar="S",
                   help="seconds between ticks (default 1)")
    options.add_source(p)
    options.add_stacks(p)


def _run(call: Invocation) -> int:
    from gpu_triage.commands.snapshot import run_snapshot

    return run_snapshot(call.args, call.config)


COMMAND = Command(
    name="snapshot",
    order=150,
    help="one reading, no screen: every card, the host, the processes and the verdict (--json for scripts)",
    description="Sample for a few seconds (the shortest window the diagnosis judges), print every card, the "
    "host, the processes and the verdict once, and exit, as gpustat or `nvtop -s` do. Without a GPU it says "
    "so and reads the host; exit 3 when its cards are faulty (a dead driver, a card lost or missing).",
    arguments=_arguments,
    run=_run,
)
