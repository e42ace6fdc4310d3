"""``gpu-triage recover FILE``: the stream a killed recorder left, written to Parquet."""

from __future__ import annotations

import argparse
import logging
import sys

from gpu_triage.errors import UserError
from gpu_triage.logs import SHOWN
from gpu_triage.recording.headless import human_seconds
from gpu_triage.safetext import clean
from gpu_triage.trace.reader import read_leftover
from gpu_triage.trace.recover import find_stream
from gpu_triage.trace.stream import checked_name, holding_stream, target_for_stream
from gpu_triage.trace.target import describe_os_error, write_parquet_atomic
from gpu_triage.units import fmt_bytes

# the logger's name is in every log line: the recovery's own, whichever module runs it
log = logging.getLogger("gpu_triage.trace.recover")


def run_recover(args: argparse.Namespace) -> int:
    given = checked_name(
        args.file, what="cannot recover", hint="give the recording's name or its .partial.arrows stream"
    )
    stream = find_stream(given)
    output = getattr(args, "output", None)
    if output is not None:
        target = checked_name(output, what="cannot write", hint="give a file such as run.parquet")
    else:
        target = target_for_stream(stream)
    if target.exists():
        raise UserError(f"{target} already exists: pass -o NEW.parquet to write the recovered ticks elsewhere")
    if not target.parent.is_dir():
        raise UserError(f"cannot write {target}: directory {target.parent} does not exist")
    with holding_stream(stream) as fh:
        got, trace = read_leftover(stream, fh=fh)
        for line in trace.notices:
            if trace.damaged_at is None or "damaged at byte" not in line:
                log.warning("%s: %s", stream, line, extra=SHOWN)
                print(f"gpu-triage: {line}", file=sys.stderr)
        try:
            write_parquet_atomic(got.table, target)
        except OSError as exc:
            raise UserError(f"writing {target} failed ({describe_os_error(exc)}); {stream} is left as it was") from exc
        span = human_seconds(trace.duration_s + trace.interval_s)
        size = fmt_bytes(target.stat().st_size)
        if got.damaged_at is None:
            stream.unlink(missing_ok=True)
            log.info("recovered %d ticks from %s into %s; removed the stream", trace.n, stream, target)
            print(f"recovered {trace.n} ticks ({span}) from {clean(str(stream))} into {clean(str(target))} ({size}); "
                  "removed the stream")
        else:
            log.warning(
                "recovered %d ticks from %s into %s; the stream is damaged at byte %d and kept",
                trace.n,
                stream,
                target,
                got.damaged_at,
                extra=SHOWN,
            )
            print(
                f"recovered into {clean(str(target))} ({size}): kept {got.batches} batches ({trace.n} ticks, "
                f"{span}); stream "
                f"damaged at byte {got.damaged_at}: the rest ({got.size - got.damaged_at} bytes) is lost; "
                f"{clean(str(stream))} is left in place: remove it once {clean(target.name)} is checked"
            )
    return 0
