"""``gpu-triage compact DIR``: each host's finished UTC days of hourly files become one daily trace file and
a flat per-card table for queries; ``--keep-days N`` then removes what is older.

Layout after compaction (docs/recording.md)::

    DIR/host=gpu01/date=2026-11-30/day.parquet     # the day's ticks, in order, each once, each with its verdict
    DIR/flat/2026-11-30/gpu01.parquet               # one row per (host, ts, gpu), the card's figures

Crash safety: the daily file is written into a staging directory beside the partition (``.compact-D-TOKEN``,
which no ``date=*`` glob matches) and fsynced; the staging directory and the partition are then exchanged
in one step (:func:`gpu_triage.storage.compact_fs.exchange`), and only then are the merged hourly files
removed from where the partition used to be. The daily file names every file it merged (name and size, in
its metadata, with the run's token), so a run killed at any point is finished by the next one: a staging
directory whose token the partition's daily file carries holds merged files (removed; anything else in it
is moved back), any other staging directory is an unfinished daily file (removed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from gpu_triage.errors import UserError
from gpu_triage.safetext import clean
from gpu_triage.storage import compact_fs as fs
from gpu_triage.storage.compact_fs import DAILY_NAME, FLAT_DIR
from gpu_triage.storage.compact_types import (
    HostDay,
    day_stamp,
    fs_bytes,
    unreadable_line,
)
from gpu_triage.storage.compact_types import (
    Options as Options,
)
from gpu_triage.storage.compact_types import (
    Result as Result,
)
from gpu_triage.trace.stream import STREAM_SUFFIX, stream_holder

log = logging.getLogger(__name__)

GRACE = timedelta(minutes=15)  # a day's last hourly file is converted in seconds after midnight; leave it be


Progress = Callable[[int, int, str], None]


def scan(root: Path, out: Result) -> tuple[list[str], dict[str, list[str]]]:
    """Host partitions and their date partitions, refused with one line where anything in the dataset's
    tree is a link or DIR is no gpu-triage dataset; nothing is changed before this passed. A partition that
    cannot be read (another user's) is left out with a line in ``out.failed``: the rest is done."""
    try:
        st = root.lstat()
    except OSError as exc:
        raise UserError(f"{root}: {exc.strerror or exc}: give a dataset directory (`gpu-triage record -o DIR/`)"
                        ) from None
    if fs.stat.S_ISLNK(st.st_mode):
        raise UserError(f"{root} is a symbolic link: give the dataset directory itself (compact never follows links)")
    if not fs.stat.S_ISDIR(st.st_mode):
        raise UserError(f"{root} is not a directory: give a dataset directory (`gpu-triage record -o DIR/`)")
    hosts: dict[str, list[str]] = {}
    with fs.opened(str(root), None, root) as rfd:
        top = fs.entries(rfd)
        for e in top:
            if e.link and (e.name.startswith("host=") or e.name == FLAT_DIR):
                raise UserError(f"{root / e.name} is a symbolic link: compact never follows links in a dataset; "
                                "remove it (someone else may have planted it)")
        names = [e.name for e in top if e.directory and e.name.startswith("host=")]
        if not names and not any(e.name == FLAT_DIR and e.directory for e in top):
            raise UserError(f"{root} is not a gpu-triage dataset: no host=NAME partition in it (a dataset is what "
                            "`gpu-triage record -o DIR/` or `export --record DIR` writes)")
        for name in names:
            try:
                with fs.opened(name, rfd, root / name) as hfd:
                    hosts[name] = [e.name for e in _entries_no_links(hfd, root / name)
                                   if e.directory and e.name.startswith("date=") and fs.parse_date(e.name[5:])
                                   and _readable(hfd, e.name, root / name / e.name, out)]
            except (fs.Unreadable, OSError) as exc:
                out.fail(unreadable_line(root / name, exc))
        if any(e.name == FLAT_DIR for e in top):
            try:
                with fs.opened(FLAT_DIR, rfd, root / FLAT_DIR) as ffd:
                    for e in _entries_no_links(ffd, root / FLAT_DIR):
                        if e.directory:
                            _readable(ffd, e.name, root / FLAT_DIR / e.name, out)
            except (fs.Unreadable, OSError) as exc:
                out.fail(unreadable_line(root / FLAT_DIR, exc))
    return sorted(hosts), hosts


def _entries_no_links(fd: int, shown: Path) -> list[fs.Entry]:
    found = fs.entries(fd)
    for e in found:
        if e.link:
            raise UserError(f"{shown / e.name} is a symbolic link: compact never follows links in a dataset; "
                            "remove it (someone else may have planted it)")
    return found


def _readable(parent_fd: int, name: str, shown: Path, out: Result) -> bool:
    """Whether the partition ``name`` can be opened and listed (a link in it is refused); False, with a line
    in ``out.failed``, where it cannot: one partition of another user's does not stop the others."""
    try:
        with fs.opened(name, parent_fd, shown) as fd:
            _entries_no_links(fd, shown)
    except (fs.Unreadable, OSError) as exc:
        out.fail(unreadable_line(shown, exc))
        return False
    return True


def run(root: Path, opts: Options, progress: Progress | None = None) -> Result:
    """Compact every finished host-day of ``root``, then apply ``opts.keep_days``."""
    from gpu_triage.storage.compact_day import compact_day, finish_staging, write_flat

    if opts.keep_days is not None and opts.keep_days <= 0:
        raise UserError(f"--keep-days {opts.keep_days}: give 1 or more days (0 or fewer would remove today's data)")
    root = root.expanduser()
    out = Result()
    host_names, dates = scan(root, out)
    today = opts.now.astimezone(UTC).date()
    with fs.opened(str(root), None, root) as rfd:
        if not opts.dry_run:
            _one_run_at_a_time(rfd, root)
        todo: list[tuple[HostDay, bool]] = []  # (host-day, only its flat table is missing)
        for hname in host_names:
            with fs.opened(hname, rfd, root / hname) as hfd:
                finish_staging(root, hfd, hname, opts.dry_run, out)
                for dname in dates[hname]:
                    try:
                        item = _plan(root, rfd, hfd, hname, dname, opts, today, out)
                    except (fs.Unreadable, OSError) as exc:  # made unreadable since the scan
                        out.fail(unreadable_line(root / hname / dname, exc))
                        continue
                    if item is not None:
                        todo.append(item)
        for i, (hd, flat_only) in enumerate(todo, 1):
            where = f"host={hd.host} date={day_stamp(hd.day)}"
            if opts.dry_run:
                size = sum(e.size for e in hd.files)
                what = "would write its flat table" if flat_only else (
                    f"would merge {len(hd.files)} files ({fs_bytes(size)}) into {DAILY_NAME} and its flat table")
                if not flat_only:
                    out.days += 1
                    out.files_merged += len(hd.files)
                    out.bytes_before += size
                if progress is not None:
                    progress(i, len(todo), clean(f"{where}: {what}"))
                continue
            try:  # one host-day that cannot be done (a partition of another user's) does not stop the rest
                with fs.opened(f"host={hd.host}", rfd, root / f"host={hd.host}") as hfd:
                    line = (write_flat(root, rfd, hfd, hd, out) if flat_only
                            else compact_day(root, rfd, hfd, hd, opts, out))
            except UserError as exc:
                out.fail(str(exc))
                line = "failed, left as it was"
            if progress is not None:
                progress(i, len(todo), clean(f"{where}: {line}"))
        if opts.keep_days is not None:
            from gpu_triage.storage.retention import expire

            expire(root, rfd, host_names, dates, today - timedelta(days=opts.keep_days), opts.dry_run, out)
    return out


def _one_run_at_a_time(rfd: int, root: Path) -> None:
    """Hold an exclusive flock on DIR itself for the run (released when its descriptor closes, however the
    process ends): two runs exchanging one partition in turn would each keep the other's daily file."""
    import fcntl  # noqa: PLC0415

    try:
        fcntl.flock(rfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(f"another `gpu-triage compact` is running on {root}: wait for it to finish") from None
    except OSError as exc:  # a file system without flock on directories: go on, as the recorder does
        log.warning("cannot lock %s (%s): make sure no other compact runs on it at the same time", root, exc)


def _plan(root: Path, rfd: int, hfd: int, hname: str, dname: str, opts: Options, today: date,
          out: Result) -> tuple[HostDay, bool] | None:
    """The host-day to compact in ``dname``, or None (today's, too fresh, being recorded, already done)."""
    day = fs.parse_date(dname[5:])
    assert day is not None
    end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
    if day >= today or opts.now < end + GRACE:
        return None
    if opts.keep_days is not None and day < today - timedelta(days=opts.keep_days):
        return None  # removed below: not worth merging first
    host = hname[5:]
    shown = root / hname / dname
    with fs.opened(dname, hfd, shown) as dfd:
        found = fs.entries(dfd)
    streams = [e for e in found if e.regular and e.name.endswith(STREAM_SUFFIX)]
    if streams:
        held = stream_holder(shown / streams[0].name)
        why = (f"{held}" if held else f"{shown / streams[0].name} is left by a killed recorder: run `gpu-triage "
               f"recover {shown / streams[0].name}` first")
        out.say(f"skipped {shown}: {why}")
        return None
    files = [e for e in found if e.regular and e.name.endswith(".parquet") and not e.name.startswith(".")]
    if not files:
        return None
    hd = HostDay(host, day, files)
    if [e.name for e in files] == [DAILY_NAME]:
        flat = root / FLAT_DIR / day_stamp(day) / f"{host}.parquet"
        try:
            present = fs.stat.S_ISREG(flat.lstat().st_mode)
        except OSError:
            present = False
        return None if present else (hd, True)
    return hd, False


