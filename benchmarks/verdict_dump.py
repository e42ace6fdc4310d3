"""Dump every raw verdict, every field, of the streaming path (``offline.judge``, every tick) for every
recording given, as JSON lines, so that an engine speed-up can be checked to change no verdict (``--live``:
the dashboard's path instead, ``offline.verdicts``: a RollingWindow fed tick by tick, every raw and shown
verdict):

    .venv/bin/python benchmarks/verdict_dump.py tests/data/*.parquet > before.jsonl   # on main
    .venv/bin/python benchmarks/verdict_dump.py tests/data/*.parquet > after.jsonl    # on the branch
    cmp before.jsonl after.jsonl

``--stride N`` judges every Nth tick (and each stretch's last) for long recordings (streaming path only).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from gpu_triage.diagnosis.offline import judge, load_trace, open_source, verdicts
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.errors import UserError


def _stride(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give a whole number of ticks, 1 or more")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--stride", type=_stride, default=1, help="judge every Nth tick (N >= 1)")
    ap.add_argument("--window-s", type=float, default=300.0)
    ap.add_argument("--live", action="store_true", help="the dashboard's path: raw and shown verdict per tick")
    args = ap.parse_args()
    th = Thresholds()
    try:
        dump(args, th)
    except UserError as err:  # a missing or damaged file: the CLI's one line, not a traceback
        print(f"verdict_dump: {err}", file=sys.stderr)
        return 2
    return 0


def dump(args: argparse.Namespace, th: Thresholds) -> None:
    for path in args.files:
        if args.live:
            tr = load_trace(path)
            for i, (_tick, raw, shown) in enumerate(verdicts(tr.ticks, tr.interval_s, th, args.window_s,
                                                              tr.host.cpu_count)):
                row = {"file": path.name, "tick": i, "raw": dataclasses.asdict(raw),
                       "shown": dataclasses.asdict(shown)}
                sys.stdout.write(json.dumps(row, sort_keys=True, default=repr) + "\n")
            continue
        jd = judge(open_source(path), th, args.window_s, stride=args.stride)
        for p, v in zip(jd.points, jd.raws, strict=True):
            row = {"file": path.name, "tick": int(p), **dataclasses.asdict(v)}
            sys.stdout.write(json.dumps(row, sort_keys=True, default=repr) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
