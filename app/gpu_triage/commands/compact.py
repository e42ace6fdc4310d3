"""``gpu-triage compact DIR [--keep-days N] [--dry-run]``: a line per host-day while it works (on a terminal,
or with ``--progress``), then one summary line; what was skipped or left is said on stderr, one line each."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.logs import SHOWN
from gpu_triage.safetext import clean
from gpu_triage.storage.compact import run
from gpu_triage.storage.compact_types import Options, Result, fs_bytes

log = logging.getLogger("gpu_triage.storage.compact")


def summary_line(root: Path, res: Result, dry_run: bool) -> str:
    if dry_run:
        return (f"{root}: dry run, nothing changed: would compact {res.days} host-days ({res.files_merged} files, "
                f"{fs_bytes(res.bytes_before)}) and remove {res.files_removed} files ({fs_bytes(res.bytes_removed)})")
    parts = [f"{res.days} host-days compacted: {res.files_merged} files merged, "
             f"{fs_bytes(res.bytes_before)} -> {fs_bytes(res.bytes_after)}, {res.ticks} ticks"]
    if res.duplicates:
        parts.append(f"{res.duplicates} repeated ticks dropped")
    parts.append(f"{res.recomputed} verdicts recomputed and kept")
    parts.append(f"{res.days_removed} host-days removed ({res.files_removed} files, {fs_bytes(res.bytes_removed)})")
    if res.failed:
        parts.append(f"{len(res.failed)} host-days failed (left as they were; said above)")
    return f"{root}: " + "; ".join(parts)


def run_compact(args: argparse.Namespace, config: Config) -> int:
    root = Path(args.dir)
    dry = bool(args.dry_run)
    err = sys.stderr
    show = dry or args.progress or getattr(err, "isatty", lambda: False)()

    def progress(done: int, total: int, line: str) -> None:
        if show:
            print(f"[{done}/{total}] {clean(line)}", file=sys.stdout if dry else err, flush=True)

    opts = Options(keep_days=args.keep_days, dry_run=dry, thresholds=config.thresholds, window_s=config.window_s,
                   workers=args.workers)
    res = run(root, opts, progress)
    # cleaned where they were made (they name the dataset's files, which others choose); again here, once more
    for line in map(clean, res.lines):
        if dry:
            print(line)
        else:
            log.warning("%s", line, extra=SHOWN)
            print(f"gpu-triage: {line}", file=err)
    for line in map(clean, res.failed):
        log.error("%s", line, extra=SHOWN)
        print(f"gpu-triage: {line}", file=err)
    print(clean(summary_line(root, res, dry)))
    return 1 if res.failed else 0
