"""``gpu-triage diagnose FILE``: the offline diagnosis of one recording, printed as text or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC
from pathlib import Path
from typing import Any

from gpu_triage.commands.progress import progress_reporter
from gpu_triage.errors import UserError
from gpu_triage.offline.render import render_timeline
from gpu_triage.offline.timeline import diagnose_trace
from gpu_triage.safetext import clean, clean_tree
from gpu_triage.trace.batches import iter_batches


def run_diagnose(args: argparse.Namespace, config: Any) -> int:
    path = Path(args.file).expanduser()
    src = iter_batches(path)
    if src.notice:  # stderr: --json output stays parseable; compare and recover say it the same way
        print(f"gpu-triage: {src.notice}", file=sys.stderr)
    if src.n == 0:
        raise UserError(f"{path}: the recording holds no ticks: record for a few seconds at least")
    progress = progress_reporter(f"diagnosing {path.name}", force=getattr(args, "progress", False))
    tl = diagnose_trace(src, config.thresholds, config.window_s, progress, getattr(args, "resolution", None))
    for w in tl.warnings:
        print(f"gpu-triage: {clean(str(path))}: {clean(w)}", file=sys.stderr)
    from gpu_triage.fleet_history.owners import owner_time

    owners = owner_time(path, tl.segments, tl.interval_s, src.file)  # whose time each bottleneck was, where recorded
    if getattr(args, "json", False):
        obj = {
            "file": clean(str(path)),
            "interval_s": tl.interval_s,
            "ticks": tl.ticks,
            "judged_every_ticks": tl.stride,
            "segments": [s.to_json_obj() for s in tl.segments],
            "gaps": [g.to_json_obj() for g in tl.gaps],
            "owners": owners,
        }
        print(json.dumps(clean_tree(obj), indent=2, allow_nan=False, default=str))
        return 0
    print(render_timeline(path, tl, tz=UTC if getattr(args, "utc", False) else None))
    if owners:
        from gpu_triage.commands.summary import owner_lines

        print()
        print("\n".join(owner_lines(owners, indent="")))
    return 0
