"""``gpu-triage baseline``: step 2 of the check-up, samples/s on one card and on N with DDP (needs PyTorch)."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options, values
from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpus", type=values.positive_int, metavar="N",
        help="cards (CPU: ranks) of the second run (default: all; CPU 2)"
    )
    p.add_argument(
        "--seconds", type=values.positive_float, default=20.0, metavar="S", help="timed seconds per run (default 20)"
    )
    p.add_argument(
        "--model-size",
        choices=("tiny", "small", "medium"),
        help="MLP size: small (default on GPUs), medium (~540M parameters), tiny (default on CPU)",
    )
    p.add_argument("--amp", action="store_true", help="bf16 autocast (default: fp32, TF32 matmuls on GPUs)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when PyTorch sees a card, else cpu")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument(
        "--record",
        metavar="FILE",
        help="record the machine beside both runs (Parquet, like `record`), for `compare` with a real run",
    )
    options.add_seconds(p, "--interval", "seconds between recorded ticks (default 2, from the config file if set)")


def _run(call: Invocation) -> int:
    from gpu_triage.commands.baseline import run_baseline

    return run_baseline(call.args, call.config)


COMMAND = Command(
    name="baseline",
    order=130,
    help="step 2 of the check-up: samples/s on one card and on N with DDP, no input pipeline (needs PyTorch)",
    description=(
        "A small model on fixed random tensors already on the device: forward, backward, optimizer step, "
        "timed after a warm-up, on one card and then on N cards with DDP (NCCL; gloo on CPU). Prints "
        "samples/s for each and the scaling efficiency; under 50 % it is flagged (exit 1) and points to "
        "the doctor's topology and NCCL checks. Needs PyTorch: pip install 'gpu-triage[torch]'."
    ),
    arguments=_arguments,
    run=_run,
)
