"""``gpu-triage recover``: finish a recording whose recorder was killed.

A killed recorder leaves ``FILE.partial.arrows`` (every tick but at most the one being written) and no
``FILE``. Recover reads every good batch, writes ``FILE`` (or ``-o OUT``) atomically, and removes the
stream once the Parquet is safely in place.

It holds the stream's lock while it works: a stream whose lock a live recorder holds is refused, naming
the recorder's pid (recovering it would remove the stream under the recorder, losing every later
tick). A stream damaged in the middle keeps every batch before the damage; the stream is then left in
place (the bytes after the damage are not ours to throw away) and the report says where it stopped.
"""

from __future__ import annotations

from pathlib import Path

from gpu_triage.errors import UserError
from gpu_triage.trace.stream import (
    STREAM_SUFFIX,
    regular_file,
    shown,
    stream_path_for,
)


def find_stream(given: Path) -> Path:
    """The stream to recover from: the path itself, or the stream recorded beside a Parquet path.

    Only ``stat`` looks at the paths here: a FIFO, a device or a directory is refused without being opened.
    """
    if given.name.endswith(STREAM_SUFFIX) or given.suffix == ".arrows":
        if not regular_file(given):
            raise UserError(f"{shown(given)}: no such file: check the path")
        return given
    beside = stream_path_for(given)
    if len(given.name) + len(STREAM_SUFFIX) <= 255 and regular_file(beside):
        return beside
    if regular_file(given):
        raise UserError(
            f"{shown(given)} is not a leftover stream and no {beside.name} is beside it: nothing to recover"
        )
    raise UserError(f"{shown(given)}: no such file and no {shown(beside.name)} beside it: nothing to recover")
