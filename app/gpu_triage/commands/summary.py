"""``gpu-triage diagnose DIR --summary``: per host, the time in each bottleneck and the worst windows."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_triage.commands.progress import progress_reporter
from gpu_triage.config import Config
from gpu_triage.fleet.summary import WINDOW_S, summarise
from gpu_triage.safetext import clean, clean_tree
from gpu_triage.trace.stream import unfinished_line


def _hms(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def owner_lines(owners: dict[str, Any], indent: str) -> list[str]:
    """The "whose time" block of the summary and of ``diagnose FILE``: per owner, its time and the share of
    it in each bottleneck."""
    lines = [f"{indent}whose time (the owners of its GPU processes):"]
    for owner, o in owners.items():
        # an owner and a stored bottleneck are read from a recording (anyone's file)
        shares = ", ".join(f"{clean(b)} {100 * v:.1f} %" for b, v in o["bottlenecks"].items())
        lines.append(f"{indent}  {clean(owner[:60]):<30} {_hms(o['seconds'])}  {shares}")
    return lines


def recomputed_line(recomputed: int, files: int, seconds: float, compact: bool | None = None) -> str:
    """The summary's word on the files it had to diagnose again: "3 of 25 files have no stored verdicts, or
    verdicts judged with other settings: recomputed (41.2 s)", and how to store them: `gpu-triage compact`
    where this version has it (``compact`` None: look for its handler), else what records them."""
    if compact is None:
        import importlib.util  # noqa: PLC0415

        compact = importlib.util.find_spec("gpu_triage.commands.compact") is not None
    which = "its file has" if files == 1 else f"{recomputed} of {files} files {'has' if recomputed == 1 else 'have'}"
    line = f"{which} no stored verdicts, or verdicts judged with other settings: recomputed ({seconds:.1f} s)"
    if compact:
        return line + "; `gpu-triage compact DIR` stores them for finished days"
    return line + "; `gpu-triage record` stores them in recordings made from now on (trace v3)"


def run_summary(args: argparse.Namespace, config: Config) -> int:
    spec = args.file
    progress = progress_reporter("summarising", force=getattr(args, "progress", False), unit="files")
    result = clean_tree(summarise(spec, config, progress))  # host names, bottlenecks, owners: from the files
    for p in result["leftovers"]:
        print(f"gpu-triage: not read: {unfinished_line(Path(p))}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, allow_nan=False))
        return 0
    tz = UTC if getattr(args, "utc", False) else None  # None: this machine's zone (TZ)
    hosts = result["hosts"]
    print(f"{result['source']}: {len(hosts)} host{'s' * (len(hosts) != 1)}, {result['files']} files")
    if result["recomputed_files"]:
        print(f"  {recomputed_line(result['recomputed_files'], result['files'], result['recompute_s'])}")
    for skip in result["skipped"]:
        print(f"  left out (unreadable): {skip['path']}: {skip['reason']}")
    for host, h in hosts.items():
        print()
        print(f"{host}: {_hms(h['seconds'])} of data in {h['files']} files")
        for bottleneck, share in h["bottlenecks"].items():
            print(f"  {bottleneck:<18} {100 * share:5.1f} %")
        if h.get("owners"):
            print("\n".join(owner_lines(h["owners"], indent="  ")))
        if h["worst_windows"]:
            print(f"  worst {WINDOW_S / 60:g}-minute windows (lowest GPU-Util while a job held the cards):")
            for w in h["worst_windows"]:
                # local time like the rest of diagnose (--utc: UTC); the JSON stays ISO 8601 UTC
                start = datetime.fromisoformat(w["start"]).astimezone(tz)
                zone = start.tzname() or start.strftime("%z")
                util, bottleneck = w["gpu_util_pct"], w["bottleneck"] or "-"
                print(f"    {start:%Y-%m-%d %H:%M} {zone}  GPU-Util {util:5.1f} %  {bottleneck}")
    return 0
