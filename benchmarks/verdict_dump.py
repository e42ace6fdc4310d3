"""Dump every verdict, every field, so that a change to the diagnosis can be checked to change none of them.

With ``--all`` (what a restructuring is checked with) it dumps, for every real recording in
app/gpu_triage/data/ and tests/data/ and for every simulated scenario (8 and 2 cards, 2 s ticks, plus two
schedules that change scenario mid-way, one long enough to be judged with a stride):

- ``live``: the dashboard's path, a RollingWindow fed tick by tick, the raw and the shown verdict per tick;
- ``stream``: the offline engine (``judge``), the raw verdict of every judged tick, streamed from Parquet;
- ``cli``: what ``gpu-triage diagnose FILE --json`` prints (and ``diagnose DIR --summary --json``).

    .venv/bin/python benchmarks/verdict_dump.py --all -o /tmp/before.jsonl   # on main
    .venv/bin/python benchmarks/verdict_dump.py --all -o /tmp/after.jsonl    # on the branch
    cmp /tmp/before.jsonl /tmp/after.jsonl

Given FILES instead, it dumps the streaming path for those (``--live``: the dashboard's path instead);
``--stride N`` judges every Nth tick (and each stretch's last) for long recordings (streaming path only).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.errors import UserError
from gpu_triage.offline.judge import judge, load_trace, verdicts
from gpu_triage.trace.batches import iter_batches

ROOT = Path(__file__).resolve().parent.parent
DATA_DIRS = (ROOT / "app" / "gpu_triage" / "data", ROOT / "tests" / "data")
SIM_TICKS = 200  # 400 s at 2 s: past the 300 s window, so the window fills and then rolls
SIM_PHASE_S = 120.0
LONG_PHASE_S = 300.0  # 16 scenarios x 300 s at 2 s = 2,400 ticks: past 1,500, so judged with a stride


def _stride(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give a whole number of ticks, 1 or more")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--all", action="store_true", help="every real recording and simulated scenario, every path")
    ap.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    ap.add_argument("--stride", type=_stride, default=1, help="judge every Nth tick (N >= 1)")
    ap.add_argument("--window-s", type=float, default=300.0)
    ap.add_argument("--live", action="store_true", help="the dashboard's path: raw and shown verdict per tick")
    args = ap.parse_args()
    if not args.all and not args.files:
        ap.error("give FILES or --all")
    th = Thresholds()
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        if args.all:
            dump_all(out, th, args.window_s)
        else:
            dump(out, args.files, th, args.window_s, args.live, args.stride)
    except UserError as err:  # a missing or damaged file: the CLI's one line, not a traceback
        print(f"verdict_dump: {err}", file=sys.stderr)
        return 2
    finally:
        if args.output:
            out.close()
    return 0


def _row(out: TextIO, obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj, sort_keys=True, default=repr) + "\n")


def dump_live(out: TextIO, name: str, path: Path, th: Thresholds, window_s: float) -> None:
    tr = load_trace(path)
    for i, (_tick, raw, shown) in enumerate(verdicts(tr.ticks, tr.interval_s, th, window_s, tr.host.cpu_count)):
        _row(out, {"path": "live", "file": name, "tick": i, "raw": dataclasses.asdict(raw),
                   "shown": dataclasses.asdict(shown)})


def dump_stream(out: TextIO, name: str, path: Path, th: Thresholds, window_s: float, stride: int | None) -> None:
    jd = judge(iter_batches(path), th, window_s, stride=stride)
    for p, v in zip(jd.points, jd.raws, strict=True):
        _row(out, {"path": "stream", "file": name, "tick": int(p), **dataclasses.asdict(v)})
    _row(out, {"path": "stream", "file": name, "warnings": jd.warnings, "stride": jd.stride})


def dump_cli(out: TextIO, name: str, argv: list[str], tmp: str) -> None:
    from gpu_triage.cli import main as cli_main

    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = cli_main(argv)
    text = buf.getvalue().replace(tmp, "TMP").replace(str(ROOT), "ROOT")
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    if isinstance(body, dict) and "recompute_s" in body:
        body["recompute_s"] = "(a timing)"  # the summary's seconds spent recomputing: not a result to compare
    _row(out, {"path": "cli", "file": name, "argv": argv[0], "rc": rc, "out": body,
               "err": err.getvalue().replace(tmp, "TMP").replace(str(ROOT), "ROOT")})


def dump(out: TextIO, files: Iterable[Path], th: Thresholds, window_s: float, live: bool, stride: int) -> None:
    for path in files:
        if live:
            dump_live(out, path.name, path, th, window_s)
        else:
            dump_stream(out, path.name, path, th, window_s, stride)


def _recordings() -> list[Path]:
    return sorted(p for d in DATA_DIRS for p in d.glob("*.parquet"))


def _write_sim(path: Path, src: Any, ticks: int) -> None:
    import pyarrow.parquet as pq

    from gpu_triage.trace.schema import schema_with_metadata, ticks_to_batch

    schema = schema_with_metadata(src.host_info(), src.interval_s)
    batch = ticks_to_batch([src.sample() for _ in range(ticks)])
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        writer.write_batch(batch.cast(schema), row_group_size=8192)


def _sims() -> list[tuple[str, Any, int]]:
    from gpu_triage.scenarios import REGISTRY
    from gpu_triage.sources.sim import SimulatedSource

    start = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[tuple[str, Any, int]] = []
    for gpus in (8, 2):
        for sc in REGISTRY:
            if gpus < 2 and sc in ("communication", "imbalanced", "single_card_busy"):
                continue
            out.append((f"sim-{sc}-{gpus}", SimulatedSource(sc, gpus=gpus, cores=32, seed=0, interval_s=2.0,
                                                            start=start), SIM_TICKS))
    names = list(REGISTRY)
    out.append(("sim-schedule-8", SimulatedSource.from_schedule([(n, SIM_PHASE_S) for n in names], gpus=8,
                                                                cores=32, seed=3, interval_s=2.0, start=start),
                int(len(names) * SIM_PHASE_S / 2.0)))
    out.append(("sim-long-2", SimulatedSource.from_schedule([(n, LONG_PHASE_S) for n in names], gpus=2, cores=16,
                                                            seed=5, interval_s=2.0, start=start),
                int(len(names) * LONG_PHASE_S / 2.0)))
    return out


def dump_all(out: TextIO, th: Thresholds, window_s: float) -> None:
    with tempfile.TemporaryDirectory(prefix="verdict-dump-") as tmp:
        os.environ["XDG_CONFIG_HOME"] = tmp  # no user config file changes the thresholds
        for path in _recordings():
            name = f"{path.parent.name}/{path.name}"
            dump_live(out, name, path, th, window_s)
            dump_stream(out, name, path, th, window_s, 1)
            dump_cli(out, name, ["diagnose", str(path), "--json"], tmp)
        for name, src, ticks in _sims():
            path = Path(tmp) / f"{name}.parquet"
            _write_sim(path, src, ticks)
            if ticks < 1500:  # the long one: through the command alone, judged with a stride
                dump_live(out, name, path, th, window_s)
                dump_stream(out, name, path, th, window_s, 1)
            dump_cli(out, name, ["diagnose", str(path), "--json"], tmp)
        dump_cli(out, "tests/data", ["diagnose", str(ROOT / "tests" / "data"), "--summary", "--json"], tmp)


if __name__ == "__main__":
    raise SystemExit(main())
