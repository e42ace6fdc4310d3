"""Follow a training job's log (``--job-log PATH``): the lines appended since the last poll.

:class:`LogFollower` reads what was appended since the last poll, as ``tail -F`` does: a file that
appears later is picked up, a rotated file (a new inode at the path) is read from its start after the
rest of the old one, a truncated file is read again from the top. Lines end at ``\\n`` *or* ``\\r``
(tqdm redraws its bar with ``\\r``). Memory and CPU are bounded whatever the writer does: reads go in
chunks, a poll reads at most ``budget`` bytes and jumps to the tail when the writer got further ahead
(only the latest progress matters), a line longer than ``max_line`` is dropped without being kept (a
1 GB line costs a scan, not a gigabyte), and binary data is skipped. What the lines say is read by
:mod:`gpu_triage.sources.joblog`.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

log = logging.getLogger(__name__)

MAX_LINE = 64 * 1024  # longer lines are progress lines of nobody we know: dropped
CHUNK = 1024 * 1024
BUDGET = 1024 * 1024  # bytes read per poll at most; further behind, skip to the last TAIL_START bytes
TAIL_START = 64 * 1024  # on the first open of an existing log, start this far before its end


_SPLIT = re.compile(rb"[\r\n]")


class LogFollower:
    """``tail -F`` on one path, polled: ``poll()`` returns the complete lines appended since the last poll."""

    def __init__(self, path: Path | str, *, max_line: int = MAX_LINE, chunk: int = CHUNK, budget: int = BUDGET,
                 tail_start: int = TAIL_START) -> None:
        self.path = Path(path)
        self.max_line = max_line
        self.chunk = chunk
        self.budget = budget
        self.tail_start = tail_start
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._pos = 0
        self._partial = bytearray()
        self._dropping = False  # inside a line longer than max_line: drop bytes up to its end
        self._first_open = True
        self.missing = False  # the path does not exist now
        self.long_lines = 0
        self.binary_lines = 0
        self.skipped_bytes = 0  # jumped over to keep up with the writer
        self.lines = 0

    def check_start(self) -> None:
        """At start: the path must be a readable file (or not exist yet, in a directory that does)."""
        p = self.path
        if p.exists():
            if p.is_dir():
                raise OSError(f"{p} is a directory, not a log file")
            if not p.is_file():  # opening a FIFO waits for a writer: the recorder or the screen froze there
                raise OSError(f"{p} is not a regular file (a FIFO or a device?), not a log file")
            with open(p, "rb"):
                pass
        elif not p.parent.is_dir():
            raise FileNotFoundError(f"{p}: neither the file nor its directory {p.parent} exists")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def partial(self) -> str:
        """The line being written now (a tqdm bar between two redraws), decoded; '' if none."""
        if self._dropping or not self._partial:
            return ""
        return self._decode(bytes(self._partial)) or ""

    def poll(self) -> list[str]:
        out: list[str] = []
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.missing = True
            if self._fd is not None:  # the old file may still get its last lines (tail -F keeps reading it)
                self._read(out, None)
            return out
        except OSError:
            self.missing = True
            return out
        self.missing = False
        ident = (st.st_dev, st.st_ino)
        if self._fd is not None and ident != self._ident:  # rotated: finish the old file, then the new one
            self._read(out, None)
            self.close()
            self._partial.clear()
            self._dropping = False
        if self._fd is None:
            try:  # O_NONBLOCK: a FIFO put in the log's place must not block the sampler on open
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                return out
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                log.debug("%s is not a regular file: not read", self.path)
                return out
            self._fd = fd
            self._ident = ident
            self._pos = 0
            if self._first_open and st.st_size > self.tail_start:
                self._pos = st.st_size - self.tail_start
                self._dropping = True  # we start mid-line: the first piece is not a whole line
            self._first_open = False
        elif st.st_size < self._pos:  # truncated (logrotate copytruncate, `> log`): start again at the top
            self._pos = 0
            self._partial.clear()
            self._dropping = False
        self._read(out, st.st_size)
        return out

    def _read(self, out: list[str], size: int | None) -> None:
        assert self._fd is not None
        if size is not None and size - self._pos > self.budget and size - self.tail_start > self._pos:
            new_pos = size - self.tail_start
            self.skipped_bytes += new_pos - self._pos
            self._pos = new_pos
            self._partial.clear()
            self._dropping = True
        left = self.budget
        while left > 0:
            try:
                data = os.pread(self._fd, min(self.chunk, left), self._pos)
            except OSError as exc:
                log.debug("reading %s failed: %s", self.path, exc)
                return
            if not data:
                return
            self._pos += len(data)
            left -= len(data)
            self._feed(data, out)

    def _feed(self, data: bytes, out: list[str]) -> None:
        pieces = _SPLIT.split(data)
        last = pieces.pop()  # after the last separator: the start of a line still being written
        for piece in pieces:
            if self._dropping:
                self._dropping = False
                self._partial.clear()
                continue
            if self._partial:
                self._partial += piece
                piece = bytes(self._partial)
                self._partial.clear()
            if len(piece) > self.max_line:
                self.long_lines += 1
                continue
            if piece:
                text = self._decode(piece)
                if text is not None:
                    self.lines += 1
                    out.append(text)
        if self._dropping:
            return
        if len(self._partial) + len(last) > self.max_line:
            self.long_lines += 1
            self._partial.clear()
            self._dropping = True
        else:
            self._partial += last

    def _decode(self, raw: bytes) -> str | None:
        if b"\x00" in raw:
            self.binary_lines += 1
            return None
        text = raw.decode("utf-8", errors="replace")
        if text.count("\ufffd") > max(2, len(text) // 10):
            self.binary_lines += 1
            return None
        return text
