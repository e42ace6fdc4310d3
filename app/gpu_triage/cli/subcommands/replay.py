"""``gpu-triage replay FILE``: a recording played back through the dashboard."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options, values
from gpu_triage.cli.command import Command, always, on_dashboard


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE")
    p.add_argument("--speed", type=values.speed, default=1.0, metavar="X",
                   help="playback speed, 0.01 to 1000 (default 1)")
    options.add_seconds(p, "--window", "seconds of history shown (default 300, from the config file if set)")


def _record(p: argparse.ArgumentParser) -> None:
    """--record is read after the command too, so that it is refused in words wherever it was typed (a replay
    is a recording already)."""
    p.add_argument("--record", metavar="FILE", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


COMMAND = Command(
    name="replay",
    order=40,
    help="play a recording back through the same dashboard",
    description="Replay FILE (Parquet, or a crash leftover .arrows stream) in the dashboard. A gap in the "
    "recording (no tick for more than 5 intervals) starts a fresh window, is said under the header and "
    "marked on the position bar.",
    arguments=_arguments,
    run=on_dashboard("replay"),
    on_screen=always,
    trailing_arguments=_record,
)
