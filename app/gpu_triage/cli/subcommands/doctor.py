"""``gpu-triage doctor``: the machine checked before the first training step."""

from __future__ import annotations

import argparse

from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--params", type=float, metavar="N", help="model parameters (e.g. 7e9): estimate gradient traffic")
    p.add_argument(
        "--python",
        metavar="PATH",
        help="the Python of your training environment, to read its torch and NCCL versions (default: this one)",
    )


def _run(call: Invocation) -> int:
    from gpu_triage.commands.doctor import run_doctor

    return run_doctor(call.args, call.config)


COMMAND = Command(
    name="doctor",
    order=80,
    help="check the machine before the first training step",
    description=(
        "GPUs, topology, host and software, each ok / warn / fail with what to do (skip: nothing to check "
        "here, e.g. no GPU). Exit 1 if a check fails."
    ),
    arguments=_arguments,
    run=_run,
)
