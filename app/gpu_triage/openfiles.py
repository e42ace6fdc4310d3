"""Opening the files gpu-triage writes (a recording's stream, the log) and reads (a recording, a list of
exporters) where others may have named things first.

gpu-triage often runs as root, and the path it is given may sit in a directory other users can write to (a
shared group directory, a dataset on shared storage): a link planted under the name would have root create or
append to the file it points at, a FIFO would block the open, and a hard link to a root-only file would have
root append to that file. So the last name is opened with ``O_NOFOLLOW`` (a link is refused, never followed)
and ``O_NONBLOCK`` (a FIFO nobody reads is ENXIO, not a hang), and what was opened is checked on its
descriptor: a regular file this user or root owns with no other link, or a character device (``/dev/null``);
a new file gets the mode asked for, never one others can write.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import BinaryIO


def open_output(path: str | os.PathLike[str], *, exclusive: bool, mode: int) -> int:
    """A descriptor open for writing at ``path``: created with ``mode`` (less the umask) where it does not
    exist; with ``exclusive`` an existing name (a link included) is EEXIST, else an existing file is appended
    to. Raises OSError whose ``strerror`` says what was refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_EXCL if exclusive else os.O_APPEND
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: not written through (someone may have planted it); "
                                       "give the file itself") from None
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "a FIFO that nothing reads: give a regular file") from None
        raise
    try:
        why = _refused(os.fstat(fd))
        if why is not None:
            raise OSError(errno.EPERM, why)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` open for reading, checked on its descriptor: read it through this file object only, never by
    its name again. A name in a directory others can write to may be swapped between two opens (a FIFO, whose
    open would wait for a writer forever; another file): ``O_NONBLOCK`` opens a FIFO at once, ``fstat`` then
    refuses anything but a regular file, and ``O_NOFOLLOW`` refuses a link. Raises OSError whose
    ``strerror`` says what was refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: not followed (someone may have planted it); give the "
                                       "file itself") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _refused(st: os.stat_result) -> str | None:
    if stat.S_ISCHR(st.st_mode):  # /dev/null, /dev/full, a terminal: only root makes device nodes
        return None
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, a socket, a directory): give a regular file"
    if st.st_uid not in (0, os.geteuid()):
        return f"it belongs to uid {st.st_uid}, neither root nor this user: give a file of your own"
    if st.st_nlink > 1:
        return "it has other hard links (one may be a file someone else chose): give a file of your own"
    return None
