"""``gpu-triage diagnose DIR --summary``: the fleet-wide ranking by GPU-hours lost (hosts, then jobs and owners
across hosts), then the top hosts' time in each bottleneck, owners and worst episodes."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_triage.commands.progress import progress_reporter
from gpu_triage.config import Config
from gpu_triage.fleet_history.summary import WINDOW_S, summarise
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


TOP = 10  # hosts and owners the text ranks, and hosts it details, unless --top says otherwise
OWNERS_PER_HOST = 3  # owners a host's detail names (--json has them all)


def _hours(hours: float | None) -> str:
    """GPU-hours lost, or n/a where there is no figure (no covered card read GPU-Util: docs/diagnosis.md)."""
    return "n/a" if hours is None else f"{hours:,.2f}"


def _gpu_h(hours: float | None) -> str:
    return f"{_hours(hours)} GPU-h"


def _duration(seconds: float) -> str:
    m = round(seconds / 60)
    return f"{m} min" if m < 120 else f"{m // 60} h {m % 60:02d} min"


def _share_of(part: float | None, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if part is not None and whole > 0 else "n/a"


def ranking_lines(result: dict[str, Any], top: int) -> list[str]:
    """The fleet-wide ranking first: hosts, then owners across hosts, most GPU-hours lost first (the top ``top``)."""
    hosts, owners = result["ranking"]["hosts"], result["ranking"]["owners"]
    lines = [f"what to fix first: hosts by GPU-hours lost (top {min(top, len(hosts))} of {len(hosts)})"]
    for n, r in enumerate(hosts[:top], start=1):
        share = f"{100 * r['share_of_lost']:3.0f} %" if r["gpu_hours_lost"] else "    "
        lines.append(f"  {n:>3}  {clean(r['host'][:30]):<30} {_gpu_h(r['gpu_hours_lost']):>13}  "
                     f"{clean(r['bottleneck'])[:18]:<18} {share}  {r['knob']}".rstrip())
    if owners:
        lines.append(f"jobs and owners by GPU-hours lost, each across its hosts (top {min(top, len(owners))} of "
                     f"{len(owners)})")
        for n, r in enumerate(owners[:top], start=1):
            where = f" ({len(r['hosts'])} hosts)" if len(r["hosts"]) > 1 else f" ({clean(r['hosts'][0][:20])})"
            name = clean(r["owner"][:40]) + where
            share = f"{100 * r['share_of_lost']:3.0f} %" if r["gpu_hours_lost"] else "    "
            lines.append(f"  {n:>3}  {name[:30]:<30} {_gpu_h(r['gpu_hours_lost']):>13}  "
                         f"{clean(r['bottleneck'])[:18]:<18} {share}  {r['knob']}".rstrip())
    return lines


def _owner_order(kv: tuple[str, dict[str, Any]]) -> tuple[bool, float, float]:
    """Most GPU-hours lost first, an owner of no figure after every figure, then the most time."""
    lost = kv[1].get("gpu_hours_lost", 0.0)
    return lost is None, -(lost or 0.0), -kv[1]["seconds"]


def host_lines(host: str, h: dict[str, Any], tz: Any) -> list[str]:
    """One host's detail, only what matters: its time in each bottleneck on one line, its top owners, its worst
    episodes."""
    lines = [f"{host}: {_hms(h['seconds'])} of data in {h['files']} files, {_gpu_h(h['gpu_hours_lost'])} lost of "
             f"{h['gpu_hours']:,.2f} recorded ({_share_of(h['gpu_hours_lost'], h['gpu_hours'])})"]
    lines.append("  time: " + ", ".join(f"{clean(b)} {100 * v:.1f} %" for b, v in h["bottlenecks"].items()))
    owners = sorted(h.get("owners", {}).items(), key=_owner_order)
    if owners:
        shown = ", ".join(f"{clean(o[:40])} {_hms(v['seconds'])} ({_gpu_h(v.get('gpu_hours_lost', 0.0))} lost)"
                          for o, v in owners[:OWNERS_PER_HOST])
        more = f" +{len(owners) - OWNERS_PER_HOST} more" if len(owners) > OWNERS_PER_HOST else ""
        lines.append(f"  whose time: {shown}{more}")
    if h["worst_windows"]:
        lines.append(f"  worst episodes ({WINDOW_S / 60:g}-minute windows of one bottleneck, merged; most lost first):")
        for w in h["worst_windows"]:
            # local time like the rest of diagnose (--utc: UTC); the JSON stays ISO 8601 UTC
            start = datetime.fromisoformat(w["start"]).astimezone(tz)
            zone = start.tzname() or start.strftime("%z")
            util = "n/a" if w["gpu_util_pct"] is None else f"{w['gpu_util_pct']:5.1f} %"
            lines.append(f"    {start:%Y-%m-%d %H:%M} {zone}  GPU-Util {util:>7}  for {_duration(w['seconds']):<10}"
                         f"{_gpu_h(w['gpu_hours_lost']):>13} lost  {clean(w['bottleneck'] or '-')}")
    return lines


def run_summary(args: argparse.Namespace, config: Config) -> int:
    from gpu_triage.commands.period import period

    specs = args.file if isinstance(args.file, list) else [args.file]
    since, until = period(getattr(args, "since", None), getattr(args, "until", None),
                          utc=getattr(args, "utc", False))
    top = getattr(args, "top", None) or TOP
    progress = progress_reporter("summarising", force=getattr(args, "progress", False), unit="files")
    # host names, bottlenecks, owners: from the files
    result = clean_tree(summarise(specs, config, progress, since=since, until=until))
    for p in result["leftovers"]:
        print(f"gpu-triage: not read: {unfinished_line(Path(p))}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, allow_nan=False))
        return 0
    tz = UTC if getattr(args, "utc", False) else None  # None: this machine's zone (TZ)
    hosts = result["hosts"]
    when = ""
    if since is not None or until is not None:
        def at(t: datetime) -> str:
            local = t.astimezone(tz)
            return f"{local:%Y-%m-%d %H:%M} {local.tzname() or local.strftime('%z')}"
        when = (f", {at(since)} to {at(until)}" if since and until else f", since {at(since)}" if since
                else f", before {at(until)}" if until else "")
    print(f"{result['source']}: {len(hosts)} host{'s' * (len(hosts) != 1)}, {result['files']} files{when}")
    print(f"  GPU-hours lost: {_hours(result['gpu_hours_lost'])} of {result['gpu_hours']:,.2f} recorded "
          f"({_share_of(result['gpu_hours_lost'], result['gpu_hours'])}; docs/diagnosis.md, \"GPU-hours lost\")")
    if result["recomputed_files"]:
        print(f"  {recomputed_line(result['recomputed_files'], result['files'], result['recompute_s'])}")
    for skip in result["skipped"]:
        print(f"  left out (unreadable): {skip['path']}: {skip['reason']}")
    print()
    print("\n".join(ranking_lines(result, top)))
    for entry in result["ranking"]["hosts"][:top]:
        print()
        print("\n".join(host_lines(entry["host"], hosts[entry["host"]], tz)))
    if len(hosts) > top:
        print()
        rest = len(hosts) - top
        print(f"{rest} more host{'s' * (rest != 1)} not detailed: --top {len(hosts)} for each, --json for all")
    return 0
