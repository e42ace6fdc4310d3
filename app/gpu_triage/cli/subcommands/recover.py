"""``gpu-triage recover FILE``: the stream a killed recorder left, turned into Parquet."""

from __future__ import annotations

import argparse

from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="the .arrows stream, or the Parquet path it was recording to")
    p.add_argument("-o", "--output", metavar="OUT", help="the Parquet file to write (default: the recording's name)")


def _run(call: Invocation) -> int:
    from gpu_triage.commands.recover import run_recover

    return run_recover(call.args)


COMMAND = Command(
    name="recover",
    order=50,
    help="turn the stream left by a killed recorder into a Parquet file",
    description=(
        "Read FILE.partial.arrows (what a killed recorder leaves) and write every complete tick to Parquet. "
        "A stream a running recorder holds is refused (stop that recorder: it writes FILE itself); a "
        "damaged one keeps every batch before the damage and says at which byte it stopped."
    ),
    arguments=_arguments,
    run=_run,
)
