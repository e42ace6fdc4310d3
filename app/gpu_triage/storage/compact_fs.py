"""The file-system steps of ``gpu-triage compact``, none of which follows a link or leaves the dataset.

A dataset may sit on storage other users can write to, so every directory below DIR is opened relative to
its parent with ``O_NOFOLLOW | O_DIRECTORY`` and looked at with ``fstat``; files are looked at with
``lstat`` (``follow_symlinks=False``) and removed relative to their directory's descriptor, never by a path
that a planted link could redirect. Only regular files are removed, and only those the caller names.

The one step that makes a compacted day visible is :func:`exchange`: the partition ``date=D`` and the
staging directory beside it trade places in one ``renameat2(RENAME_EXCHANGE)``, so a reader of
``host=*/date=*/*.parquet`` sees either every hourly file or the daily file, never both and never neither.
Where the file system cannot exchange (EINVAL, ENOSYS: NFS, old kernels) two renames do it, and a crash
between them leaves names that :mod:`gpu_triage.storage.compact` finishes on its next run.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from gpu_triage.errors import UserError
from gpu_triage.storage.dataset import FLAT_DIR as FLAT_DIR  # re-exported: compact and retention take it from here

log = logging.getLogger(__name__)

DAILY_NAME = "day.parquet"
STAGING_PREFIX = ".compact-"  # .compact-YYYY-MM-DD-TOKEN beside date=YYYY-MM-DD (a dot: no `date=*` glob sees it)
OLD_SUFFIX = ".old"  # the old partition's name between the two renames where the file system cannot exchange
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_RENAME_EXCHANGE = 2
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parse_date(text: str) -> date | None:
    """``YYYY-MM-DD`` as a date, None for anything else (a partition someone else named)."""
    if not _DATE.fullmatch(text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


class Unreadable(UserError):
    """A directory that is there, and no link, but cannot be opened (another user's, mode 000)."""


def open_dir(name: str, parent_fd: int | None, shown: Path) -> int:
    """A directory's descriptor, opened without following a link; UserError saying what it is instead
    (:class:`Unreadable` where it is neither a link nor something else than a directory)."""
    try:
        return os.open(name, _OPEN_DIR, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a symbolic link" if _is_link(name, parent_fd) else "not a directory"
            raise UserError(f"{shown} is {what}: compact never follows links in a dataset; remove it "
                            "(someone else may have planted it)") from None
        raise Unreadable(f"cannot open {shown}: {exc.strerror or exc}") from None


def _is_link(name: str, parent_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


@contextmanager
def opened(name: str, parent_fd: int | None, shown: Path) -> Iterator[int]:
    fd = open_dir(name, parent_fd, shown)
    try:
        yield fd
    finally:
        os.close(fd)


@dataclass(slots=True)
class Entry:
    """One name in a directory, as lstat saw it."""

    name: str
    mode: int
    size: int

    @property
    def regular(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def link(self) -> bool:
        return stat.S_ISLNK(self.mode)

    @property
    def directory(self) -> bool:
        return stat.S_ISDIR(self.mode)


def entries(fd: int) -> list[Entry]:
    """Every name in the directory ``fd``, by lstat, sorted; a name gone meanwhile is left out."""
    out = []
    for name in sorted(os.listdir(fd)):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        out.append(Entry(name, st.st_mode, st.st_size))
    return out


def fsync_dir(fd: int) -> None:
    """Make the directory's renames and removals durable (a power cut after this keeps them)."""
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems refuse fsync on a directory; the data files were fsynced
        log.warning("fsync of a directory failed (%s): its last renames may not survive a power cut", exc)


def remove_file(fd: int, name: str) -> int:
    """Remove the regular file ``name`` of directory ``fd``; its size, or -1 when it was not one (kept)."""
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        log.warning("not removing %s: not a regular file", name)
        return -1
    os.unlink(name, dir_fd=fd)
    return st.st_size


def remove_dir_if_empty(parent_fd: int, name: str) -> bool:
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


_libc: ctypes.CDLL | None = None


def _renameat2(fd: int, a: str, b: str) -> int:
    """renameat2(fd, a, fd, b, RENAME_EXCHANGE): 0, or the errno."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(_libc, "renameat2", None)
    if fn is None:
        return errno.ENOSYS
    rc = fn(ctypes.c_int(fd), os.fsencode(a), ctypes.c_int(fd), os.fsencode(b), ctypes.c_uint(_RENAME_EXCHANGE))
    return 0 if rc == 0 else ctypes.get_errno()


@dataclass(slots=True)
class Exchanged:
    """What :func:`exchange` did: ``old`` names the directory now holding the partition's previous files."""

    old: str
    notes: list[str] = field(default_factory=list)


def exchange(host_fd: int, partition: str, staging: str) -> Exchanged:
    """Put ``staging`` in the place of ``partition`` (both in ``host_fd``); the old partition ends up under
    the staging name (exchanged) or under ``staging + OLD_SUFFIX`` (two renames)."""
    err = _renameat2(host_fd, partition, staging)
    if err == 0:
        fsync_dir(host_fd)
        return Exchanged(staging)
    if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        raise OSError(err, os.strerror(err))
    old = staging + OLD_SUFFIX
    os.rename(partition, old, src_dir_fd=host_fd, dst_dir_fd=host_fd)
    os.rename(staging, partition, src_dir_fd=host_fd, dst_dir_fd=host_fd)
    fsync_dir(host_fd)
    return Exchanged(old, ["this file system cannot exchange two directories at once (renameat2): "
                                  "the day was invisible for a moment between two renames"])
