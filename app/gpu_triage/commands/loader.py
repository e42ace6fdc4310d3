"""``gpu-triage loader MODULE:FACTORY``: the command. Measures each setting with
:mod:`gpu_triage.checkup.loader` (progress on a terminal), then prints the table and the recommendation (or
``--json``). Exit 0, 130 when Ctrl-C stopped it (the settings measured so far are still printed)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from gpu_triage.checkup.loader import (
    FactorySource,
    SettingRun,
    WorkerTree,
    load_factory,
    measure,
    recommend,
    render_table,
    settings_for,
)
from gpu_triage.checkup.torchreq import require_torch


def run_loader(args: argparse.Namespace) -> int:
    torch = require_torch("loader")
    factory = load_factory(args.factory)
    settings = settings_for(args.workers, args.pin_memory, args.prefetch)
    source = FactorySource(torch, factory, args.factory, args.batch_size, len(settings))
    tree = WorkerTree()
    tty = sys.stdout.isatty() and not args.json
    results: list[dict[str, Any]] = []
    interrupted = False

    def progress(run: SettingRun) -> None:
        rate = ""
        if run.t0 is not None and run.n:
            rate = f"  {run.n / max(time.perf_counter() - run.t0, 1e-9):,.1f} batches/s"
        state = "starting" if run.first_batch_s is None else f"{run.n}/{run.batches} batches"
        print(
            f"\r  [{len(results) + 1}/{len(settings)}] {run.setting.label()}: {state}{rate}\x1b[K", end="", flush=True
        )

    for setting in settings:
        result, interrupted = measure(source, setting, args.batches, args.timeout, tree, progress if tty else None)
        results.append(result)
        if interrupted:
            break
    if tty:
        print("\r\x1b[K", end="", flush=True)
    rec = recommend(results)
    cores = os.cpu_count() or 1
    if args.json:
        print(
            json.dumps(
                {
                    "factory": args.factory,
                    "kind": source.kind,
                    "batch_size_when_wrapped": args.batch_size,
                    "cpu_count": cores,
                    "results": results,
                    "recommendation": rec,
                    "interrupted": interrupted,
                },
                indent=2,
            )
        )
    else:
        print(render_table(results, rec, cores))
        if interrupted:
            print("stopped by Ctrl-C: the settings above are what was measured")
    return 130 if interrupted else 0
