"""The recorder's stream-to-Parquet conversion, in a short-lived process of its own.

A recorder writes its crash-safe stream without pyarrow (:mod:`gpu_triage.trace.arrow_ipc`) and so stays
small for hours; the Parquet it owes at the end needs pyarrow and libparquet (about 37 MB mapped, and the
whole table in memory). Loaded into the recorder, they would stay there for the rest of its life: after the
first hourly rotation of a dataset, for days. So :class:`~gpu_triage.trace.writer.TraceWriter` runs this
module as a child (``main(STREAM, TARGET, RECORDER_PID)`` through ``python -P -c``, see
``writer._converter_command``) and removes the stream only when the child says the Parquet is whole. The
recorder keeps the stream's lock meanwhile, so no ``recover`` races it.

Exit status 0: TARGET is written (atomically, see ``write_parquet_atomic``). Anything else: TARGET is
untouched, its temporary file removed, and the last line on stderr says why (the recorder quotes it).

Signals: the recorder decides when a conversion stops, so SIGTERM, SIGHUP and SIGINT are ignored here (a
systemd or Slurm stop signals every process of the unit at once; the hour being converted is finished and
the recorder then stops cleanly). The recorder stops it with SIGUSR1, which unwinds through
``write_parquet_atomic`` and removes the temporary file. If the recorder dies meanwhile (SIGKILL), the
child still finishes, and then removes the stream itself: the recorder had closed it before starting the
child, so every tick is in the Parquet, and a stream left beside it would make ``recover`` refuse.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType


def _stop(signum: int, _frame: FrameType | None) -> None:
    print("stopped by the recorder", file=sys.stderr)
    raise SystemExit(128 + signum)  # unwinds through write_parquet_atomic, which removes its temporary file


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        print("usage: python -m gpu_triage.trace.finish STREAM TARGET RECORDER_PID", file=sys.stderr)
        return 2
    stops = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    for sig in stops:  # the recorder started us with them blocked: ignored first, then unblocked
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    parent = int(argv[2])  # passed, not read: the recorder may be gone before this line runs
    from gpu_triage.trace.writer import STOP_CONVERTER  # noqa: PLC0415

    signal.signal(STOP_CONVERTER, _stop)
    from gpu_triage.errors import UserError  # noqa: PLC0415
    from gpu_triage.heavy_imports import import_pyarrow_lean  # noqa: PLC0415

    import_pyarrow_lean()
    from gpu_triage.trace.stream import read_stream_table  # noqa: PLC0415
    from gpu_triage.trace.target import describe_os_error, write_parquet_atomic  # noqa: PLC0415

    stream, target = Path(argv[0]), Path(argv[1])
    try:
        table, _complete = read_stream_table(stream)
        write_parquet_atomic(table, target)
        if os.getppid() != parent:  # the recorder died meanwhile: nobody else will remove the stream
            stream.unlink(missing_ok=True)
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
