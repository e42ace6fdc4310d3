"""``gpu-triage compare BEFORE AFTER``: two recordings side by side, printed as text or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gpu_triage.commands.progress import progress_reporter
from gpu_triage.compare.runs import compare_traces
from gpu_triage.compare.text import render_text
from gpu_triage.config import Config
from gpu_triage.safetext import clean_tree
from gpu_triage.trace.reader import open_trace


def run_compare(args: argparse.Namespace, config: Config) -> int:
    from gpu_triage.fleet_history.summary import is_dataset_spec

    if is_dataset_spec(args.before) or is_dataset_spec(args.after):
        return _run_datasets(args, config)
    before = open_trace(args.before)
    after = open_trace(args.after)
    for t in (before, after):
        if t.notice:
            print(f"gpu-triage: {t.notice}", file=sys.stderr)
    force = getattr(args, "progress", False)
    result = compare_traces(before, after, config, lambda label: progress_reporter(label, force=force))
    return _print(args, result)


def _run_datasets(args: argparse.Namespace, config: Config) -> int:
    """Either side a directory or a glob: each side read as one recording (gpu_triage.fleet_history.compare)."""
    from gpu_triage.fleet_history.compare import compare_datasets

    force = getattr(args, "progress", False)
    result = compare_datasets(args.before, args.after, config, lambda label: progress_reporter(label, force=force))
    return _print(args, result)


def _print(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Each side's warnings on stderr, then the comparison (text or --json); both forms of compare end here.
    Every string in it was read from the recordings or names their files (a job's source, env variable names,
    host names, paths): each is made one visible line first."""
    result = clean_tree(result)
    for side in ("before", "after"):
        for w in result[side]["warnings"]:
            print(f"gpu-triage: {result[side]['path']}: {w}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, sort_keys=False))
    else:
        print(render_text(result, show_all=getattr(args, "all", False)))
    return 0
