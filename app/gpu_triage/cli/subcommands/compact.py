"""``gpu-triage compact DIR``: a dataset's finished days merged into daily files."""

from __future__ import annotations

import argparse

from gpu_triage.cli import values
from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="the dataset directory")
    p.add_argument("--keep-days", type=values.keep_days, metavar="N",
                   help="after compacting, remove the recordings dated more than N days before today (UTC): N=7 "
                   "on 2026-12-02 keeps 2026-11-25 onwards")
    p.add_argument("--dry-run", action="store_true", help="print what would be merged and removed; change nothing")
    p.add_argument("--workers", type=values.positive_int, metavar="N",
                   help="worker processes, each compacting one host-day at a time (default: one per usable core, at "
                   "most 4; each holds a day of one host in memory, a few hundred MB for 8 cards)")
    p.add_argument("--progress", action="store_true",
                   help="a line per host-day on stderr even when it is not a terminal (a log, a journal)")


def _run(call: Invocation) -> int:
    from gpu_triage.commands.compact import run_compact

    return run_compact(call.args, call.config)


COMMAND = Command(
    name="compact",
    order=110,
    help="merge a dataset's finished days into one daily file per host; --keep-days expires",
    description=(
        "For each host and each finished UTC day of DIR (`record -o DIR/`, `export --record DIR`): merge the "
        "hourly files into one daily trace file (DIR/host=H/date=D/day.parquet: ticks in order, each once, "
        "every tick with its verdict; verdicts a file lacks are computed once by the engine and kept), the "
        "day's one stored copy, which the summary, compare, replay, DuckDB and polars read (docs/recording.md). "
        "Today's partitions and any holding a stream (being recorded, or left for "
        "`recover`) are left alone. Crash-safe: a killed run leaves every tick readable once, and the next "
        "run finishes its work."
    ),
    arguments=_arguments,
    run=_run,
)
