"""``gpu-triage recover``: finish a recording whose recorder was killed.

A killed recorder leaves ``FILE.partial.arrows`` (every tick but at most the one being written) and no
``FILE``. Recover reads every complete tick, writes ``FILE`` (or ``-o OUT``) atomically, and removes the
stream once the Parquet is safely in place.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_triage.errors import UserError
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.record import human_seconds
from gpu_triage.trace.writer import (
    STREAM_SUFFIX,
    describe_os_error,
    stream_path_for,
    target_for_stream,
    write_parquet_atomic,
)
from gpu_triage.units import fmt_bytes


def find_stream(given: Path) -> Path:
    """The stream to recover from: the path itself, or the stream recorded beside a Parquet path."""
    if given.name.endswith(STREAM_SUFFIX) or given.suffix == ".arrows":
        if not given.exists():
            raise UserError(f"{given}: no such file: check the path")
        return given
    beside = stream_path_for(given)
    if beside.is_file():
        return beside
    if given.is_file():
        raise UserError(
            f"{given} is not a leftover stream and no {beside.name} is beside it: nothing to recover"
        )
    if given.is_dir():  # "no such file" misled when the path was a directory
        raise UserError(f"{given} is a directory: give the recording's file name (or its .partial.arrows stream)")
    raise UserError(f"{given}: no such file and no {beside.name} beside it: nothing to recover")


def run_recover(args: argparse.Namespace) -> int:
    stream = find_stream(Path(args.file).expanduser())
    target = Path(args.output).expanduser() if getattr(args, "output", None) else target_for_stream(stream)
    if target.exists():
        raise UserError(f"{target} already exists: pass -o NEW.parquet to write the recovered ticks elsewhere")
    if not target.parent.is_dir():
        raise UserError(f"cannot write {target}: directory {target.parent} does not exist")
    trace = open_trace(stream)
    if trace.notice:
        print(f"gpu-triage: {trace.notice}", file=sys.stderr)
    try:
        write_parquet_atomic(trace.table, target)
    except OSError as exc:
        raise UserError(f"writing {target} failed ({describe_os_error(exc)}); {stream} is left as it was") from exc
    stream.unlink(missing_ok=True)
    print(
        f"recovered {trace.n} ticks ({human_seconds(trace.duration_s + trace.interval_s)}) from {stream} "
        f"into {target} ({fmt_bytes(target.stat().st_size)}); removed the stream"
    )
    return 0
