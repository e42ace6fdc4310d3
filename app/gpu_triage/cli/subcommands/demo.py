"""``gpu-triage demo [SCENARIO]``: the dashboard on the bundled H200 recording or a simulated server."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options, values
from gpu_triage.cli.command import Command, always, on_dashboard
from gpu_triage.scenarios import SCENARIOS


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", nargs="?", choices=SCENARIOS, metavar="SCENARIO", help=", ".join(SCENARIOS))
    p.add_argument("--gpus", type=values.gpu_count, default=8, metavar="N", help="simulated cards, 1-16 (default 8)")
    p.add_argument("--cores", type=int, default=32, metavar="M", help="simulated CPU cores, 1-4096 (default 32)")
    p.add_argument("--seed", type=values.seed, default=0, help="random seed of the simulation, 0 or more (default 0)")
    p.add_argument(
        "--speed",
        type=values.speed,
        default=1.0,
        metavar="X",
        help="play X times faster than real time, 0.01 to 1000 (default 1; the recording also takes + and - keys)",
    )
    options.add_sampling(p)
    options.add_metrics(p)


def _record(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", metavar="FILE", default=argparse.SUPPRESS,
                   help="record every tick of the simulated session to FILE (Parquet)")


COMMAND = Command(
    name="demo",
    order=20,
    help="the dashboard on a recorded H200 session or a simulated server",
    description=(
        "With no SCENARIO: replay the real H200 recording bundled with gpu-triage, on a loop. "
        "With a SCENARIO: a simulated server (deterministic from --seed) that reproduces one case "
        "of the method."
    ),
    arguments=_arguments,
    run=on_dashboard("demo"),
    on_screen=always,
    trailing_arguments=_record,
)
