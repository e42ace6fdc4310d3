"""The crash-safe recorder: an Arrow IPC stream while recording, one Parquet file at the end.

Why two formats: a Parquet file is only readable once its footer is written, so a recorder killed with
``kill -9`` (OOM killer, node reboot, a scheduler's time limit) would lose the whole session. While
recording, every tick is therefore appended as one record batch to an Arrow IPC *stream* beside the
target, ``FILE.partial.arrows``, and flushed to the operating system at once: a killed process loses at most
the tick being written (a torn last batch, which the reader drops). The stream is also fsync'ed every
``FSYNC_EVERY_S`` seconds so that a power cut loses at most that much. The host metadata travels in the
stream schema's metadata, so the stream alone is a complete recording.

``close()`` reads the stream back, writes the Parquet (zstd) to a temporary name in the same directory,
fsyncs and renames it over the target (atomic: readers see no file or the whole file) and only then removes
the stream. If anything fails the stream stays and ``gpu-triage recover`` finishes the job.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, Tick
from gpu_triage.trace.schema import schema_with_metadata, ticks_to_batch
from gpu_triage.trace.stream import (
    META_RECORDER_PID,
    STREAM_SUFFIX,
    lock_stream,
    read_stream_table,
    record_target_name,
    stream_holder,
    stream_path_for,
    target_for_stream,
)

logger = logging.getLogger(__name__)

FSYNC_EVERY_S = 5.0
# 8192 rows is 4.5 hours at 2 s: a day of 8 cards is 6 row groups of a few MB each, big enough for zstd
# and column statistics to pay off, small enough that a reader could fetch one group for a seek.
ROW_GROUP_ROWS = 8192


def describe_os_error(exc: OSError) -> str:
    """A short reason for a failed write, with the fix where there is an obvious one."""
    if exc.errno == errno.ENOSPC:
        return "the disk is full: free some space"
    if exc.errno == errno.EDQUOT:
        return "the disk quota is exhausted: free some space"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied: choose a directory you can write to"
    if exc.errno == errno.EROFS:
        return "the file system is read-only: choose another directory"
    if exc.errno == errno.ENOENT:
        return "the directory does not exist: create it first"
    return exc.strerror or str(exc)


def write_parquet_atomic(table: pa.Table, target: Path) -> Path:
    """Write ``table`` to ``target`` as zstd Parquet via a temporary file and a rename.

    Raises OSError (left to the caller, which knows what to say about the data it still holds).
    """
    # Parquet only at the end: pyarrow.parquet (and the file systems it loads) is ~10 MB of a headless
    # recorder's RSS for the whole run otherwise (benchmarks/rss_stages.py)
    import pyarrow.parquet as pq  # noqa: PLC0415

    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    # A stream holds one batch per tick: 43,200 one-row chunks made the Parquet writer 100x slower.
    table = table.combine_chunks()
    leaves = list(_leaf_paths(table.schema))
    floats = [path for path, typ in leaves if pa.types.is_floating(typ)]
    others = [path for path, typ in leaves if not pa.types.is_floating(typ)]
    try:
        pq.write_table(
            table,
            tmp,
            compression="zstd",
            compression_level=3,
            row_group_size=ROW_GROUP_ROWS,
            # Noisy measurements do not repeat, so dictionaries do not help floats; splitting their bytes
            # into streams lets zstd find the shared exponents: a day of 8 cards 24.6 MB -> 19.8 MB.
            use_dictionary=others,
            use_byte_stream_split=floats,
        )
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _leaf_paths(schema: pa.Schema) -> Iterator[tuple[str, pa.DataType]]:
    """Parquet column paths of every leaf (``gpus.list.element.util_pct``) with its Arrow type."""

    def walk(prefix: str, typ: pa.DataType) -> Iterator[tuple[str, pa.DataType]]:
        if pa.types.is_list(typ) or pa.types.is_large_list(typ):
            yield from walk(f"{prefix}.list.element", typ.value_type)
        elif pa.types.is_struct(typ):
            for i in range(typ.num_fields):
                yield from walk(f"{prefix}.{typ.field(i).name}", typ.field(i).type)
        else:
            yield prefix, typ

    for f in schema:
        yield from walk(f.name, f.type)


def check_record_target(path: Path | str, *, overwrite: bool = False, parent_must_exist: bool = False) -> Path:
    """Raise UserError when ``path`` cannot become a new recording: an empty or too long name, a directory,
    an existing file, a stream another recorder is writing, or the leftover stream of an interrupted one.
    Returns the path (``~`` expanded). ``record`` and the dashboard call it before any sampling starts
    (the recordings directory itself the dashboard may still create)."""
    path = record_target_name(path)
    stream = stream_path_for(path)
    if path.is_dir():
        raise UserError(f"{path} is a directory: give a file name such as {path / 'run.parquet'}")
    if path.exists() and not overwrite:
        raise UserError(f"{path} already exists: choose another name or remove it first")
    if stream.exists():
        held = stream_holder(stream)
        if held is not None:
            raise UserError(f"{held}: choose another name, or wait for that recording to end")
        raise UserError(
            f"{stream} is left from an interrupted recording: run `gpu-triage recover {stream}` or remove it first"
        )
    if parent_must_exist and not path.parent.is_dir():
        raise UserError(f"cannot record to {path}: directory {path.parent} does not exist")
    return path


class TraceWriter:
    """Records ticks to ``path`` (Parquet) through a crash-safe stream; see the module docstring.

    Not thread-safe: call ``append`` from one thread at a time and ``close`` after the last append.
    """

    def __init__(
        self,
        path: Path | str,
        host: HostInfo,
        interval_s: float,
        *,
        overwrite: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = check_record_target(path, overwrite=overwrite, parent_must_exist=True)
        self.stream_path = stream_path_for(self.path)
        self.host = host
        self.interval_s = float(interval_s)
        self.ticks = 0
        self._clock = clock
        self._closed = False
        self._lock_fd: int | None = None
        schema = schema_with_metadata(host, self.interval_s)
        # The pid tells a second recorder or `recover` who holds the lock (read from the stream's schema).
        self._schema = schema.with_metadata({**schema.metadata, META_RECORDER_PID: str(os.getpid()).encode()})
        self._fd = -1
        try:
            self._fd = os.open(self.stream_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                lock_stream(self._fd)  # before the first byte: nobody sees this stream unlocked with data
            except OSError:
                logger.warning("no flock on %s: recover cannot tell this recording from a leftover", self.stream_path)
            # A second descriptor on the same open file keeps the lock through the final conversion, after
            # the writing one is closed, until the stream is removed (flock belongs to the open file).
            self._lock_fd = os.dup(self._fd)
            self._file = os.fdopen(self._fd, "wb", buffering=0)
            self._writer = pa.ipc.new_stream(self._file, self._schema)
        except OSError as exc:
            if self._fd >= 0:  # created but the schema could not be written: leave nothing behind
                self._unlock()
                if hasattr(self, "_file"):
                    self._file.close()
                else:
                    os.close(self._fd)
                self.stream_path.unlink(missing_ok=True)
            raise UserError(f"cannot record to {self.path}: {describe_os_error(exc)}") from exc
        self._last_sync = self._clock()

    @property
    def bytes_written(self) -> int:
        """Size of the stream so far (for progress lines)."""
        try:
            return self.stream_path.stat().st_size
        except OSError:
            return 0

    def append(self, tick: Tick) -> None:
        """Append one tick; on return it is in the operating system's hands (survives ``kill -9``)."""
        if self._closed:
            raise ValueError("append after close")
        batch = ticks_to_batch([tick])
        try:
            self._writer.write_batch(batch)
            # The file is unbuffered: the batch went to the kernel in write(). fsync now and then for power cuts.
            now = self._clock()
            if now - self._last_sync >= FSYNC_EVERY_S:
                os.fsync(self._fd)
                self._last_sync = now
        except (OSError, pa.ArrowIOError) as exc:
            reason = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
            raise UserError(
                f"writing {self.stream_path} failed after {self.ticks} ticks ({reason}); "
                f"the ticks so far are kept there: `gpu-triage recover {self.stream_path}`"
            ) from exc
        self.ticks += 1

    def close(self) -> Path:
        """Finish: write the Parquet atomically, remove the stream, return the Parquet path.

        With no tick recorded, the stream is removed and UserError (exit 1) says nothing was written.
        """
        if self._closed:
            return self.path
        self._closed = True
        try:
            self._writer.close()
            os.fsync(self._fd)
        except (OSError, pa.ArrowIOError):
            pass  # the batches already written are what counts; the end-of-stream marker is optional
        finally:
            self._file.close()
        try:
            if self.ticks == 0:
                self.stream_path.unlink(missing_ok=True)
                raise UserError(f"no tick was recorded before the stop: nothing written to {self.path}", exit_code=1)
            table, _complete = read_stream_table(self.stream_path)
            try:
                write_parquet_atomic(table, self.path)
            except OSError as exc:
                raise UserError(
                    f"writing {self.path} failed ({describe_os_error(exc)}); the {self.ticks} ticks are kept in "
                    f"{self.stream_path}: `gpu-triage recover {self.stream_path}`"
                ) from exc
            self.stream_path.unlink(missing_ok=True)
        finally:
            self._unlock()
        return self.path

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def abort(self) -> None:
        """Stop without converting: the stream stays for ``gpu-triage recover`` (used on fatal errors)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close()
        except (OSError, pa.ArrowIOError):
            pass
        finally:
            self._file.close()
            self._unlock()


__all__ = [
    "STREAM_SUFFIX",
    "TraceWriter",
    "check_record_target",
    "describe_os_error",
    "stream_path_for",
    "target_for_stream",
    "write_parquet_atomic",
]
