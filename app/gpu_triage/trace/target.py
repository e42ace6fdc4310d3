"""The file a recording ends as: its target checked before recording starts, the Parquet written there
atomically (a temporary name beside it, fsync, rename), the temporaries a killed writer leaves, and the
reason a write failed in the user's words.

Shared by the recorder's writer (:mod:`gpu_triage.trace.writer`), its converter in a child process
(:mod:`gpu_triage.trace.finish`) and ``gpu-triage recover``: pyarrow is imported inside the functions that
write, so checking a target costs no Arrow libraries.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_triage.errors import UserError
from gpu_triage.trace.stream import record_target_name, stream_holder, stream_path_for

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

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
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    # A random name made with O_CREAT|O_EXCL (mkstemp): a directory shared with other users (a fleet DIR
    # on shared storage) may hold a link planted under a predictable name, and writing through it would
    # put this Parquet into whatever file it points at.
    fd, tmp_name = tempfile.mkstemp(prefix=temporary_prefix(target), dir=target.parent)
    tmp = Path(tmp_name)
    # A stream holds one batch per tick: 43,200 one-row chunks made the Parquet writer 100x slower.
    table = table.combine_chunks()
    leaves = list(_leaf_paths(table.schema))
    floats = [path for path, typ in leaves if pa.types.is_floating(typ)]
    others = [path for path, typ in leaves if not pa.types.is_floating(typ)]
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o666 & ~_umask())  # as a plain open() makes it; mkstemp gives 600
            pq.write_table(
                table,
                out,
                compression="zstd",
                compression_level=3,
                row_group_size=ROW_GROUP_ROWS,
                # Noisy measurements do not repeat, so dictionaries do not help floats; splitting their bytes
                # into streams lets zstd find the shared exponents: a day of 8 cards 24.6 MB -> 19.8 MB.
                use_dictionary=others,
                use_byte_stream_split=floats,
            )
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)  # rename replaces a link at ``target`` itself, never writes through it
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def temporary_prefix(target: Path) -> str:
    """The start of the temporary names a Parquet is written under beside ``target`` (``.run.parquet.tmp-``,
    then 8 random characters)."""
    return f".{target.name}.tmp-"


def remove_temporaries(target: Path) -> None:
    """Remove the temporary files a killed converter left beside ``target``: this user's regular files only
    (``lstat``: a link or someone else's file is not ours to remove)."""
    prefix = temporary_prefix(target)
    try:
        names = [n for n in os.listdir(target.parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        path = target.parent / name
        try:
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                path.unlink()
        except OSError as exc:
            logger.warning("cannot remove the converter's temporary file %s: %s", path, exc)


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would change it for every thread a moment)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _leaf_paths(schema: pa.Schema) -> Iterator[tuple[str, pa.DataType]]:
    """Parquet column paths of every leaf (``gpus.list.element.util_pct``) with its Arrow type."""
    import pyarrow as pa  # noqa: PLC0415

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
