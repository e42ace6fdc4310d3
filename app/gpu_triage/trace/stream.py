"""The crash-safe stream a recorder writes beside its target, and the checks on the paths it is given.

What the writer, the reader and ``recover`` all need lives here, so that none of them imports another:

- naming: ``run.parquet`` records through ``run.parquet.partial.arrows``;
- reading a stream that may be cut short or damaged: every batch before the first bad byte is kept, and
  where the damage starts is reported (:func:`read_stream`);
- the recorder's lock: a live recorder holds ``flock`` on its stream and writes its pid into the stream's
  schema metadata. The kernel drops the lock when the process dies, so a stream whose lock can be taken is
  a leftover (whatever pid it names), and one whose lock is held is being recorded right now;
- paths: empty names, names longer than the file system takes (``.partial.arrows`` included), and inputs
  that are not regular files (a FIFO would block ``open()`` forever) are one-line :class:`UserError` s,
  found with ``stat`` only, before anything is opened.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from gpu_triage.errors import UserError
from gpu_triage.openfiles import open_input
from gpu_triage.safetext import clean

if TYPE_CHECKING:  # pyarrow loads when a stream is read: the recorder writes its own without it
    import pyarrow as pa

STREAM_SUFFIX = ".partial.arrows"
# The recorder's pid, in the stream's schema metadata (dropped from the Parquet: it means nothing later).
META_RECORDER_PID = b"gpu_triage.recorder_pid"
# The longest temporary name the writer makes beside a target: ".NAME.tmp-" and mkstemp's 8 random characters.
_TMP_EXTRA = len(".") + len(".tmp-") + 8


def stream_path_for(target: Path | str) -> Path:
    """The crash-safe stream recorded beside ``target``: ``run.parquet`` -> ``run.parquet.partial.arrows``."""
    target = Path(target)
    return target.with_name(target.name + STREAM_SUFFIX)


def target_for_stream(stream: Path | str) -> Path:
    """The Parquet file a stream was recording to (inverse of :func:`stream_path_for`)."""
    stream = Path(stream)
    name = stream.name
    if name.endswith(STREAM_SUFFIX):
        return stream.with_name(name[: -len(STREAM_SUFFIX)])
    return stream.with_suffix(".parquet")


# --- paths -------------------------------------------------------------------------------------------


def shown(path: Path | str) -> str:
    """A path as an error line shows it: whole when short, its start and end when absurdly long."""
    text = clean(str(path))  # a file in a shared directory is named by whoever made it
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


def _name_max(path: Path) -> int:
    """The longest file name the file system under ``path`` takes (255 on ext4, xfs, btrfs, tmpfs)."""
    for parent in (path.parent, *path.parent.parents):
        try:
            return int(os.pathconf(parent if str(parent) else ".", "PC_NAME_MAX"))
        except (OSError, ValueError):
            continue
    return 255


def checked_name(text: Path | str, *, what: str, extra: int = 0, hint: str = "give a file name") -> Path:
    """``text`` as a Path, or UserError when it is empty or a name in it is too long for the file system.

    ``extra`` is what the caller will add to the last name (``.partial.arrows``): a target that fits but
    whose stream does not is refused before anything is created.
    """
    if not str(text).strip():
        raise UserError(f"{what}: the file name is empty: {hint}")
    path = Path(text).expanduser()
    limit = _name_max(path)
    for part in path.parts[:-1]:
        if len(os.fsencode(part)) > limit:
            raise UserError(f"{what} {shown(path)}: a directory name is longer than {limit} bytes: shorten it")
    size = len(os.fsencode(path.name))
    if size > limit:
        raise UserError(f"{what} {shown(path)}: the file name is {size} bytes, longer than {limit}: shorten it")
    if size + extra > limit:
        raise UserError(
            f"{what} {shown(path)}: the file name is {size} bytes; with the {extra} that recording adds "
            f"({STREAM_SUFFIX}) it is longer than {limit}: use a name of at most {limit - extra} bytes"
        )
    if len(os.fsencode(str(path))) >= 4096:
        raise UserError(f"{what} {shown(path)}: the path is longer than 4095 bytes: shorten it")
    return path


def record_target_name(text: Path | str) -> Path:
    """The path for a new recording, refused when it or its stream or temporary name cannot exist."""
    return checked_name(text, what="cannot record to", extra=max(len(STREAM_SUFFIX), _TMP_EXTRA),
                        hint="give a file such as run.parquet")


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def regular_file(path: Path) -> bool:
    """Whether ``path`` exists as a regular file (``stat`` only: nothing is opened). UserError when it
    exists but is something else, or when its name is too long to look up; False when it does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UserError(f"{shown(path)}: the name is too long for the file system: check the path") from exc
        raise UserError(f"{shown(path)}: cannot read ({exc.strerror or exc})") from exc
    if stat.S_ISREG(st.st_mode):
        return True
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    raise UserError(f"{shown(path)} is {kind}, not a recording: give a .parquet file (or its .partial.arrows stream)")


# --- reading -----------------------------------------------------------------------------------------


def checked_open(path: Path) -> BinaryIO:
    """A recording open for reading, checked on its descriptor (:func:`gpu_triage.openfiles.open_input`: no
    link followed, a FIFO swapped in refused at once, not waited on); UserError saying what it is otherwise.
    Read it through this file only: its name may be another file's a moment later."""
    try:
        return open_input(path)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UserError(f"{shown(path)}: the name is too long for the file system: check the path") from exc
        if exc.errno == errno.ENOENT:
            raise UserError(f"{shown(path)}: no such file: check the path") from exc
        raise UserError(f"{shown(path)}: cannot read ({exc.strerror or exc})") from exc


@dataclass(slots=True)
class StreamRead:
    """What could be read of a stream: ``table`` holds every good batch (one per tick)."""

    table: pa.Table
    batches: int
    size: int  # bytes in the file
    complete: bool  # the stream ended cleanly (end-of-stream marker or end of file after a whole batch)
    damaged_at: int | None = None  # where unreadable bytes begin, when they are more than a torn last tick

    def damage_line(self, path: Path) -> str | None:
        """One line about what was not read, or None when everything was."""
        if self.damaged_at is not None:
            return (
                f"{shown(path)}: kept {self.batches} batches ({self.table.num_rows} ticks); stream damaged at "
                f"byte {self.damaged_at}: the rest ({self.size - self.damaged_at} bytes) is lost"
            )
        if not self.complete:
            return f"{shown(path)}: the last tick was cut short (recorder stopped mid-write) and is skipped"
        return None


def read_stream(path: Path, fh: BinaryIO | None = None) -> StreamRead:
    """Every batch of an Arrow IPC stream up to the first one that cannot be read or fails validation.

    A torn last batch (the recorder was killed while writing it) is dropped quietly; bytes that do not
    parse further back (a damaged disk block, a bad copy) end the reading there and ``damaged_at`` says
    where. Each batch is fully validated: a damaged length or offset that Arrow would accept at read time
    made ``concat`` or the conversion to ticks fail later, losing the good batches with it.
    Raises UserError when not even the schema can be read. ``fh``: the file already opened
    (:func:`gpu_triage.openfiles.open_input`), read from its start; else ``path`` is opened so.
    """
    import pyarrow as pa  # noqa: PLC0415

    batches: list[pa.RecordBatch] = []
    complete = True
    largest = 0
    if fh is None:
        fh = checked_open(path)
    fh.seek(0)
    size = os.fstat(fh.fileno()).st_size
    try:
        with pa.PythonFile(fh, mode="r") as source:
            reader = pa.ipc.open_stream(source)
            schema = reader.schema
            good = source.tell()
            while True:
                try:
                    batch = reader.read_next_batch()
                    batch.validate(full=True)
                    if not batch.schema.equals(schema):
                        raise pa.ArrowInvalid("batch schema differs from the stream's")
                except StopIteration:
                    break
                except (pa.ArrowException, OSError, EOFError, ValueError):
                    complete = False
                    break
                batches.append(batch)
                end = source.tell()
                largest = max(largest, end - good)
                good = end
    except UserError:
        raise
    except Exception as exc:  # pyarrow raises many types for a file that is no stream at all
        raise UserError(
            f"{shown(path)}: not a gpu-triage recording (neither Parquet nor an Arrow stream: {_short(exc)})"
        ) from exc
    damaged_at = None
    # A torn last tick leaves less than one batch after the last good one; anything more is damage.
    if not complete and (size - good > max(largest, 1) or not batches):
        damaged_at = good
    metadata = {k: v for k, v in (schema.metadata or {}).items() if k != META_RECORDER_PID}
    schema = schema.with_metadata(metadata)
    if not batches:
        table = pa.Table.from_batches([], schema=schema)
    else:
        # One batch per tick: combine so that slicing (seek) does not walk tens of thousands of chunks.
        # concat_batches measured 2.5x faster than Table.combine_chunks on 10,000 one-tick batches.
        table = pa.Table.from_batches([pa.concat_batches(batches)]).replace_schema_metadata(metadata)
    return StreamRead(table, len(batches), size, complete and damaged_at is None, damaged_at)


def read_stream_table(path: Path) -> tuple[pa.Table, bool]:
    """Every good batch of a stream and whether it ended cleanly (see :func:`read_stream`)."""
    got = read_stream(path)
    return got.table, got.complete


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


# --- the recorder's lock -----------------------------------------------------------------------------


def lock_stream(fd: int) -> None:
    """Take the recorder's lock on an open stream (exclusive, never waits). The kernel releases it when
    the process dies, however it dies: that is how a leftover is told from a live recording."""
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def recorder_pid(fd: int) -> int | None:
    """The pid a stream's recorder wrote into its schema metadata, read from the open stream ``fd`` (left open),
    or None when it cannot be read."""
    import pyarrow as pa  # noqa: PLC0415

    try:
        with os.fdopen(os.dup(fd), "rb") as fh:
            fh.seek(0)
            meta = pa.ipc.open_stream(pa.PythonFile(fh, mode="r")).schema.metadata or {}
        return int(meta[META_RECORDER_PID])
    except (pa.ArrowException, OSError, EOFError, KeyError, ValueError):
        return None


def _held_line(path: Path, fd: int) -> str:
    pid = recorder_pid(fd)
    who = f"pid {pid}" if pid is not None else "another process"
    return f"{shown(path)} is being recorded by {who}"


def _open_stream_fd(path: Path) -> int:
    """The stream at ``path`` opened once for its lock and its pid (O_NOFOLLOW, O_NONBLOCK: never a link
    followed nor a FIFO waited on), OSError unless it is a regular file."""
    fh = open_input(path)
    try:
        return os.dup(fh.fileno())  # the descriptor alone, with its own lifetime
    finally:
        fh.close()


def stream_holder(path: Path) -> str | None:
    """None when nobody holds the stream's lock (a leftover, or no stream); else a line naming the holder."""
    try:
        fd = _open_stream_fd(path)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _held_line(path, fd)
        except OSError:
            return None  # a file system without flock: nothing to learn from it
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def unfinished_line(path: Path) -> str:
    """What to tell about a stream found where a finished recording was looked for: a recorder writing it
    now (``recover`` would refuse it: wait for that recorder) or a leftover of a killed one (recover it)."""
    held = stream_holder(path)
    if held is not None:
        return (f"{held} now: not finished yet; it becomes {target_for_stream(path).name} when that recorder "
                "stops")
    return f"{shown(path)} is left from an interrupted recording: `gpu-triage recover {path}` makes the Parquet"


@contextmanager
def holding_stream(path: Path) -> Iterator[BinaryIO]:
    """Hold a leftover stream's lock while it is converted and removed; UserError if a recorder holds it.
    Gives the stream open (read it through that, not by its name again)."""
    try:
        fd = _open_stream_fd(path)
    except OSError as exc:
        raise UserError(f"{shown(path)}: cannot read ({exc.strerror or exc})") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{_held_line(path, fd)}: it is not a leftover; stop that recorder (Ctrl-C or kill PID) and it "
                "writes the Parquet itself"
            ) from None
        except OSError:
            pass  # no flock on this file system: proceed as before the lock existed
        with os.fdopen(os.dup(fd), "rb") as fh:
            yield fh
    finally:
        os.close(fd)
