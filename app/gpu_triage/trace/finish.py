"""The recorder's stream-to-Parquet conversion, in a short-lived process of its own.

A recorder writes its crash-safe stream without pyarrow (:mod:`gpu_triage.trace.arrow_ipc`) and so stays
small for hours; the Parquet it owes at the end needs pyarrow and libparquet (about 37 MB mapped, and the
whole table in memory). Loaded into the recorder, they would stay there for the rest of its life: after the
first hourly rotation of a dataset, for days. So :class:`~gpu_triage.trace.writer.TraceWriter` runs this
module as a child (``python -m gpu_triage.trace.finish STREAM TARGET``) and removes the stream only when the
child says the Parquet is whole. The recorder keeps the stream's lock meanwhile, so no ``recover`` races it.

Exit status 0: TARGET is written (atomically, see ``write_parquet_atomic``). Anything else: TARGET is
untouched, its temporary file removed, and the last line on stderr says why (the recorder quotes it).
SIGTERM and SIGHUP stop it the same clean way, SIGINT too (the recorder starts it in a session of its own,
so a Ctrl-C at the terminal reaches the recorder, which decides).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType


def _stop(signum: int, _frame: FrameType | None) -> None:
    print(f"stopped by {signal.Signals(signum).name}", file=sys.stderr)
    raise SystemExit(128 + signum)  # unwinds through write_parquet_atomic, which removes its temporary file


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m gpu_triage.trace.finish STREAM TARGET", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _stop)
    from gpu_triage.errors import UserError  # noqa: PLC0415
    from gpu_triage.heavy_imports import import_pyarrow_lean  # noqa: PLC0415

    import_pyarrow_lean()
    from gpu_triage.trace.stream import read_stream_table  # noqa: PLC0415
    from gpu_triage.trace.writer import describe_os_error, write_parquet_atomic  # noqa: PLC0415

    stream, target = Path(argv[0]), Path(argv[1])
    try:
        table, _complete = read_stream_table(stream)
        write_parquet_atomic(table, target)
    except OSError as exc:
        print(describe_os_error(exc), file=sys.stderr)
        return 1
    except UserError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except MemoryError:
        print("out of memory while converting", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
