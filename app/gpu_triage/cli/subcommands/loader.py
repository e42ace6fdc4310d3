"""``gpu-triage loader MODULE:FACTORY``: step 3 of the check-up, the DataLoader alone per setting (needs
PyTorch)."""

from __future__ import annotations

import argparse

from gpu_triage.cli import values
from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("factory", metavar="MODULE:FACTORY", help="e.g. mytrain.data:make_loader or ./data.py:make_dataset")
    p.add_argument(
        "--workers", type=values.int_list, default=[0, 2, 4, 8, 16], metavar="LIST",
        help="num_workers (default 0,2,4,8,16)"
    )
    p.add_argument(
        "--pin-memory", type=values.bool_list, default=[False], metavar="LIST", help="off, on, or on,off (default off)"
    )
    p.add_argument(
        "--prefetch", type=values.int_list, default=[2], metavar="LIST", help="prefetch_factor with workers (default 2)"
    )
    p.add_argument(
        "--batch-size", type=values.positive_int, default=32, metavar="B", help="when the factory gives a Dataset (32)"
    )
    p.add_argument(
        "--batches", type=values.positive_int, default=100, metavar="N", help="batches timed per setting (100)"
    )
    p.add_argument(
        "--timeout",
        type=values.positive_float,
        default=120.0,
        metavar="S",
        help="a setting that gives no batch for S seconds is a hang: stop, exit 2 (default 120)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


def _run(call: Invocation) -> int:
    from gpu_triage.commands.loader import run_loader

    return run_loader(call.args)


COMMAND = Command(
    name="loader",
    order=140,
    help="step 3 of the check-up: your DataLoader alone, per num_workers setting (needs PyTorch)",
    description=(
        "Import FACTORY from MODULE (importable from the current directory, or a path/to/file.py) and "
        "iterate what it gives with no model: a DataLoader when it accepts num_workers=, pin_memory=, "
        "prefetch_factor=, or a Dataset that is wrapped in a DataLoader with --batch-size. Per setting: "
        "samples/s, CPU use of the process and its workers, peak memory; the recommendation is the "
        "smallest num_workers within 5 % of the best. Needs PyTorch: pip install 'gpu-triage[torch]'."
    ),
    arguments=_arguments,
    run=_run,
)
