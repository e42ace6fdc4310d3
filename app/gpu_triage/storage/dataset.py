"""The rotating, Hive-partitioned recording: ``DIR/host=NAME/date=YYYY-MM-DD/HHMMSS-TOKEN.parquet``.

Each file is a complete trace-v1 recording written by :class:`~gpu_triage.trace.writer.TraceWriter`: its
own crash-safe stream while it is open (``….parquet.partial.arrows``, readable by ``replay``, ``diagnose``
and ``recover``), the host metadata in its schema, and Parquet once it is closed. Files end on the clock:
at every multiple of ``rotate_s`` since the epoch (hourly by default: 13:00, 14:00 …) and at UTC midnight,
so a file never straddles two date partitions. Memory stays flat however long it runs: only the open
file's stream is read back, once, when it is closed (an hour of 8 cards at 2 s is 1,800 rows).

The partition names are what polars (``hive_partitioning=True``), DuckDB (``hive_partitioning = true``),
pyarrow datasets and Spark read as columns ``host`` and ``date`` (DuckDB types ``date`` as DATE, polars and
pyarrow as a string). ``gpu-triage compact`` (:mod:`gpu_triage.storage.compact`) merges a finished day into
one file per host, the day's one stored copy.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import stat
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, Tick

if TYPE_CHECKING:  # pyarrow is loaded when the first file opens, not when the module is imported
    from gpu_triage.trace.writer import TraceWriter

log = logging.getLogger(__name__)

ROTATE_DEFAULT_S = 3600.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class PartitionRefused(UserError):
    """A partition that is a symbolic link or another user's: at a rotation the open file goes on instead."""


def is_dataset_target(output: str | Path) -> bool:
    """``-o DIR/`` (a trailing slash) or an existing directory: record a dataset, not one file."""
    text = str(output)
    return text.endswith(("/", os.sep)) or is_directory(text)


def is_directory(path: str | Path) -> bool:
    """``Path.is_dir`` that is False, not an OSError, for a name the file system cannot even look up (a
    component longer than 255 bytes): the file commands then say what is wrong with the name."""
    try:
        return Path(path).expanduser().is_dir()
    except OSError:
        return False


def host_partition(name: str | None) -> str:
    """The ``host=`` value: the host name with anything but letters, digits, ``.``, ``_``, ``-`` replaced
    (``/`` or ``=`` in a value would break the partition path)."""
    clean = _UNSAFE.sub("_", name or "").strip("._")
    return clean or "unknown"


#: DIR/flat/ holds per-card tables of an older layout of `gpu-triage compact` (a copy of the daily files' card
#: figures; compact writes none): Parquet, but no recording; walkers skip it, --keep-days expires it
FLAT_DIR = "flat"


def is_recording_path(path: Path, root: Path) -> bool:
    """Whether ``path``, a ``*.parquet`` found under the dataset directory ``root``, is a recording: not an
    older layout's flat table (``root/flat/…``), not inside a hidden directory (a compaction's staging
    ``.compact-…``), not a hidden temporary file. Walkers of a dataset (``diagnose DIR --summary``, ``compare
    DIR``) skip the rest."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return not path.name.startswith(".")
    if not parts or (len(parts) > 1 and parts[0] == FLAT_DIR):
        return False
    return not any(p.startswith(".") for p in parts)


def check_dataset_dir(path: str | Path) -> Path:
    """Create ``path`` if needed and prove it writable; UserError (exit 2) saying why not."""
    from gpu_triage.trace.target import describe_os_error

    root = Path(path).expanduser()
    if root.exists() and not root.is_dir():
        raise UserError(f"cannot record a dataset into {root}: it is a file; give a directory (DIR/)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".gpu-triage-probe-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"cannot record a dataset into {root}: {describe_os_error(exc)}") from None
    return root


def _identities(root: Path, folder: Path) -> list[tuple[int, int, int]] | None:
    """(device, inode, mode) of each level from below ``root`` down to ``folder``, by lstat (None: gone)."""
    out = []
    path = folder
    try:
        while path != root:
            st = path.lstat()
            out.append((st.st_dev, st.st_ino, st.st_mode))
            path = path.parent
    except OSError:
        return None
    return out


def _discard(writer: TraceWriter) -> None:
    """Remove a file just opened that holds no tick yet (its stream is the schema only)."""
    writer.abort()
    writer.stream_path.unlink(missing_ok=True)


def file_end(ts: datetime, rotate_s: float) -> datetime:
    """When the file holding a tick that ends at ``ts`` closes: the next multiple of ``rotate_s`` since
    the epoch, or the next UTC midnight if that comes first."""
    t = ts.timestamp()
    boundary = datetime.fromtimestamp((math.floor(t / rotate_s) + 1) * rotate_s, UTC)
    day = ts.astimezone(UTC)
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
    return min(boundary, midnight)


class DatasetWriter:
    """The :class:`~gpu_triage.trace.writer.TraceWriter` interface (``append``, ``ticks``,
    ``bytes_written``, ``close``, ``abort``, ``path``) over a rotating dataset. One thread at a time."""

    def __init__(
        self,
        root: str | Path,
        host: HostInfo,
        interval_s: float,
        *,
        rotate_s: float | None = None,
        hostname: str | None = None,
    ) -> None:
        self.root = check_dataset_dir(root)
        self.path = self.root
        self.host = host
        self.interval_s = float(interval_s)
        self.rotate_s = float(rotate_s or ROTATE_DEFAULT_S)
        if not self.rotate_s > 0:
            raise UserError("--rotate must be a positive number of seconds")
        self.partition = host_partition(hostname or host.hostname or socket.gethostname())
        self._refuse_a_second_recorder()
        self.ticks = 0
        self.files: list[Path] = []  # closed Parquet files, oldest first
        self.total_bytes = 0  # of the closed files
        # two recorders on one host in the same second never collide; os.urandom, not secrets: secrets
        # imports hashlib and with it OpenSSL's libcrypto, 3.3 MB of every recorder's RSS
        self._token = os.urandom(3).hex()
        self._writer: TraceWriter | None = None
        self._until: datetime | None = None
        self._refused: str | None = None  # the last partition refused at a rotation, said once

    def _refuse_a_second_recorder(self) -> None:
        """UserError when a live recorder is writing this host's partition already. Two recorders of one
        host record the same cards twice, and ``summary`` and ``compare`` would count every second twice;
        telling the two sets of files apart afterwards would mean picking one of two overlapping recordings,
        so the second is refused before it records anything. A leftover of a killed recorder (its lock gone
        with it) is no obstacle."""
        from gpu_triage.trace.stream import STREAM_SUFFIX, stream_holder  # noqa: PLC0415

        host_dir = self.root / f"host={self.partition}"
        try:
            if not host_dir.is_dir() or host_dir.is_symlink():
                return  # a link is refused with its own line when the first file opens
            streams = sorted(host_dir.glob(f"date=*/*{STREAM_SUFFIX}"))
        except OSError:
            return
        for stream in streams:
            held = stream_holder(stream)
            if held is not None:
                raise UserError(f"{held}: host {self.partition} is being recorded into {self.root} already; one "
                                "recorder per host in a dataset (a second counts every tick twice): stop that "
                                "one, or record elsewhere")

    @property
    def current(self) -> Path | None:
        """The file being written (its stream is beside it), or None between files."""
        return None if self._writer is None else self._writer.path

    @property
    def stream_path(self) -> Path:
        """The crash-safe stream of the file being written (what `recover` finishes after a stop)."""
        return self.root if self._writer is None else self._writer.stream_path

    @property
    def bytes_written(self) -> int:
        return self.total_bytes + (0 if self._writer is None else self._writer.bytes_written)

    def _partition(self, ts: datetime) -> Path:
        """The ``host=…/date=…`` folder of a tick, made here and checked; UserError when it is not ours.

        DIR may be shared storage that others write to: a partition planted as a symbolic link (to a
        directory only root may write) or made by another user would put this recording where they chose.
        Each level is made with mkdir, then looked at with lstat, never followed."""
        from gpu_triage.trace.target import describe_os_error

        day = ts.astimezone(UTC)
        folder = self.root
        for part in (f"host={self.partition}", f"date={day:%Y-%m-%d}"):
            folder = folder / part
            try:
                folder.mkdir(mode=0o755)
            except FileExistsError:
                pass
            except OSError as exc:
                raise UserError(f"cannot create {folder}: {describe_os_error(exc)}") from None
            try:
                st = folder.lstat()
            except OSError as exc:
                raise UserError(f"cannot create {folder}: {describe_os_error(exc)}") from None
            if stat.S_ISLNK(st.st_mode):
                raise PartitionRefused(f"{folder} is a symbolic link, not a partition: not recording through it; "
                                "remove it (someone else may have planted it)")
            if not stat.S_ISDIR(st.st_mode):
                raise UserError(f"{folder} is not a directory: remove it or record elsewhere")
            if st.st_uid != os.geteuid():
                raise PartitionRefused(f"{folder} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}): "
                                "not recording into it; remove it or record elsewhere")
        return folder

    def _new_writer(self, ts: datetime, folder: Path, boundary: datetime | None = None) -> TraceWriter:
        """The writer of the file a tick at ``ts`` opens in ``folder`` (checked by :meth:`_partition`); at a
        rotation, ``boundary`` is the one crossed: the file is named from it at the earliest, so a file opened
        within a second before it (a sub-second interval) never shares its name with the next."""
        from gpu_triage.trace.writer import TraceWriter

        day = ts.astimezone(UTC)
        checked = _identities(self.root, folder)
        start = day - timedelta(seconds=self.interval_s)  # the first tick's interval begins here
        begins = max(start, datetime(day.year, day.month, day.day, tzinfo=UTC), boundary or start)
        name = f"{begins:%H%M%S}-{self._token}.parquet"
        writer = TraceWriter(folder / name, self.host, self.interval_s)
        if _identities(self.root, folder) != checked:  # swapped for a link between the check and the open
            _discard(writer)
            raise PartitionRefused(f"{folder} changed while its first file was being made (replaced by a link?): "
                                   "not recording into it; record into a directory others cannot write to")
        return writer

    def _finish(self) -> None:
        writer = self._writer
        if writer is not None:
            path = writer.close()  # UserError with the way out (recover) if it cannot
            self._writer = None  # only now: a stop during the conversion still names this file's stream
            self.files.append(path)
            try:
                self.total_bytes += path.stat().st_size
            except OSError:
                pass  # only the progress figure misses it; the file was written and fsynced

    def opens_file(self, ts: datetime) -> bool:
        """Whether a tick at ``ts`` would begin a new file (the first one, or the next after a rotation or a
        write error): where the recorder's verdicts start their window afresh, as ``diagnose FILE`` does. A
        partition refused at the rotation keeps the tick in the open file; its verdicts are then judged on the
        new window all the same, for at most a window's length."""
        return self._writer is None or (self._until is not None and ts > self._until)

    def append(self, tick: Tick) -> None:
        """Append one tick to the file of its hour (opening and closing files as the clock says)."""
        if self._writer is not None and self._until is not None and tick.ts > self._until:
            try:  # the next file opens before this one closes: where it cannot, this one goes on
                new = self._new_writer(tick.ts, self._partition(tick.ts), self._until)
            except PartitionRefused as exc:
                # the ticks stay in the open file (its partition was ours): nothing is lost, and the next
                # boundary tries again
                if str(exc) != self._refused:
                    self._refused = str(exc)
                    log.error("%s; still recording into %s", exc, self._writer.path)
                self._until = file_end(tick.ts, self.rotate_s)
            except UserError:  # the next file cannot be made at all (a full disk): this one ends whole
                self._finish()
                raise
            else:
                self._refused = None
                try:
                    self._finish()
                except BaseException:
                    _discard(new)
                    raise
                self._writer, self._until = new, file_end(tick.ts, self.rotate_s)
        if self._writer is None:
            self._writer = self._new_writer(tick.ts, self._partition(tick.ts))
            self._until = file_end(tick.ts, self.rotate_s)
        assert self._writer is not None
        self._writer.append(tick)
        self.ticks += 1

    def close(self) -> Path:
        """Close the open file as Parquet; returns the dataset's root."""
        self._finish()
        if self.ticks == 0:
            raise UserError(f"no tick was recorded before the stop: nothing written to {self.root}", exit_code=1)
        return self.root

    def end_file(self) -> None:
        """End the open file early, after a write error: its ticks become Parquet if they still can (else
        UserError names the stream to ``recover``), a file without a tick leaves nothing; the next append
        opens a new file. The writer itself goes on (``export --record`` retries at the next tick)."""
        writer = self._writer
        if writer is not None and writer.ticks == 0:
            self.abort()
            writer.stream_path.unlink(missing_ok=True)
            return
        try:
            self._finish()
            if self.files and not self.files[-1].exists():  # its conversion had failed at the rotation
                self.files.pop()
        finally:
            self.abort()  # a file whose conversion failed is never appended to again

    def abort(self) -> None:
        """Stop without converting the open file: its stream stays for ``gpu-triage recover``."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.abort()

