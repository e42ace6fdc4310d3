"""What compaction's steps share (the run in ``compact``, one day in ``compact_day``, the expiry in
``retention``): its options and result, the names of the staging directories and the daily file's record, so
that the steps import these rather than each other."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.errors import UserError
from gpu_triage.openfiles import open_input
from gpu_triage.safetext import clean
from gpu_triage.storage import compact_fs as fs
from gpu_triage.storage.compact_fs import OLD_SUFFIX, STAGING_PREFIX

log = logging.getLogger("gpu_triage.storage.compact")

META_MERGED = b"gpu_triage.compacted_from"  # JSON: [[name, size], ...] of the files the daily file replaced
META_TOKEN = b"gpu_triage.compact_id"
META_RECOMPUTED = b"gpu_triage.verdicts_recomputed"


@dataclass(slots=True)
class Options:
    keep_days: int | None = None
    dry_run: bool = False
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    thresholds: Thresholds = field(default_factory=Thresholds)
    window_s: float = 300.0
    workers: int | None = None  # worker processes for the host-days; None: one per usable core


@dataclass(slots=True)
class Result:
    """What a run did (or, dry, would do): the figures of the summary line and one line per event."""

    days: int = 0  # host-days compacted
    files_merged: int = 0
    bytes_before: int = 0
    bytes_after: int = 0  # the daily files written
    ticks: int = 0
    duplicates: int = 0
    recomputed: int = 0  # verdicts computed by the engine for ticks recorded without one
    days_removed: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    lines: list[str] = field(default_factory=list)  # what was skipped or would be done, said once each
    failed: list[str] = field(default_factory=list)  # host-days that could not be compacted (left as they were)
    records: list[logging.LogRecord] = field(default_factory=list)  # a worker's log, for the run to log

    def say(self, line: str) -> None:
        """Add a line for the terminal: the names in it are the dataset's, which others choose, so its control
        characters are made visible here (gpu_triage.safetext); one said already is not repeated."""
        line = clean(line)
        if line not in self.lines:
            self.lines.append(line)

    def fail(self, line: str) -> None:
        """:meth:`say` for what could not be done (the run's exit status is 1)."""
        line = clean(line)
        if line not in self.failed:
            self.failed.append(line)

    def add(self, other: Result) -> None:
        """Count in what one host-day (done in a worker process, or here) did."""
        for name in ("days", "files_merged", "bytes_before", "bytes_after", "ticks", "duplicates", "recomputed",
                     "days_removed", "files_removed", "bytes_removed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for line in other.lines:
            self.say(line)
        for line in other.failed:
            self.fail(line)
        for record in other.records:  # through this process's handlers: the journal, --log-file, cleaned there
            logging.getLogger(record.name).handle(record)


@dataclass(slots=True)
class HostDay:
    host: str  # the partition's value (host=NAME)
    day: date
    files: list[fs.Entry]  # the partition's regular *.parquet files


def day_stamp(d: date) -> str:
    return d.isoformat()


def unreadable_line(shown: Path, exc: OSError | UserError) -> str:
    """The line for a partition that cannot be opened or listed: left as it is, the rest goes on."""
    why = f"cannot read {shown}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
    return f"{why}: left as it is (run compact as a user that can read it)"


def fs_bytes(n: int) -> str:
    from gpu_triage.units import fmt_bytes

    return fmt_bytes(n)


def read_manifest(path: Path) -> tuple[str | None, dict[str, int]]:
    """The token and merged files (name -> size) a daily file names in its metadata; (None, {}) if none."""
    import pyarrow.parquet as pq  # noqa: PLC0415

    if not path.is_file():
        return None, {}
    try:
        with open_input(path) as fh:  # never a FIFO waited on, nor a link followed
            meta = pq.read_schema(fh).metadata or {}
        merged = json.loads(meta.get(META_MERGED, b"[]"))
        token = meta.get(META_TOKEN)
        return (token.decode() if token else None), {str(n): int(s) for n, s in merged}
    except (OSError, ValueError, TypeError) as exc:
        log.warning("cannot read the compaction record of %s: %s", path, exc)
        return None, {}


def staging_name(day: date, token: str) -> str:
    return f"{STAGING_PREFIX}{day_stamp(day)}-{token}"


def parse_staging(name: str) -> tuple[date, str, bool] | None:
    """(day, token, is the old partition's name) of a staging directory's name, None for another name."""
    if not name.startswith(STAGING_PREFIX):
        return None
    rest = name[len(STAGING_PREFIX):]
    old = rest.endswith(OLD_SUFFIX)
    rest = rest.removesuffix(OLD_SUFFIX)
    day = fs.parse_date(rest[:10])
    if day is None or len(rest) < 12 or rest[10] != "-":
        return None
    return day, rest[11:], old


def new_token() -> str:
    return os.urandom(4).hex()


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share, not the host's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class KeptLog(logging.Handler):
    """A worker's log records, kept to go back to the run with the host-day's result: a spawned worker has
    none of the run's handlers, and Python's last resort would print the dataset's names (which others choose)
    raw on stderr. Arguments stay separate (each is cleaned by the run's formatter), made plain values."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if isinstance(record.args, tuple):
            record.args = tuple(a if isinstance(a, str | int | float | Path | None) else str(a) for a in record.args)
        elif record.args:
            record.msg, record.args = record.getMessage(), None
        self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        out, self.records = self.records, []
        return out


KEPT = KeptLog()


def worker_init(parent_pid: int, level: int) -> None:
    """A worker process's set-up: its log kept for the run (:class:`KeptLog`, at the run's level), SIGINT
    left to the run, and :func:`die_with_parent`."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(KEPT)
    root.setLevel(level)
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the whole group: the run decides
    die_with_parent(parent_pid)


def die_with_parent(parent_pid: int) -> None:
    """A worker's first step: be killed when the run that started it dies (Linux PR_SET_PDEATHSIG), so that
    no worker goes on writing once the run's lock on DIR is gone; exit at once if it is gone already."""
    import ctypes  # noqa: PLC0415
    import signal  # noqa: PLC0415

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError) as exc:  # not Linux: the worker ends when its task queue closes
        log.warning("cannot tie compact's worker to its run (%s): a killed run's workers finish their day", exc)
    if os.getppid() != parent_pid:
        os._exit(1)
