"""``gpu-triage compact DIR``: each host's finished UTC days of hourly files become one daily trace file;
``--keep-days N`` then removes what is older.

Layout after compaction (docs/recording.md)::

    DIR/host=gpu01/date=2026-11-30/day.parquet     # the day's ticks, in order, each once, each with its verdict

The daily file is the day's one stored copy: every reader (``diagnose DIR --summary``, ``compare DIR``,
``replay``, DuckDB and polars over ``host=*/date=*/*.parquet``) reads it, and nothing is kept beside it. A
``DIR/flat/`` an older layout left (a per-card copy of the same figures) is read by nothing; ``--keep-days``
expires its days with the rest, and the run says once how to remove it at once.

Host-days are independent (each its own partition and staging directory), so a run hands them to one worker
process per core; DIR's lock is the run's, held by this process until every worker is done.

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
import os
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
    usable_cores,
    worker_init,
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
    _check_root(root)
    hosts: dict[str, list[str]] = {}
    with fs.opened(str(root), None, root) as rfd:
        top = fs.entries(rfd)
        for name in _host_partitions(root, top):
            try:
                hosts[name] = _date_partitions(root, rfd, name, out)
            except (fs.Unreadable, OSError) as exc:
                out.fail(unreadable_line(root / name, exc))
        if any(e.name == FLAT_DIR for e in top):
            try:
                _check_flat(root, rfd, out)
            except (fs.Unreadable, OSError) as exc:
                out.fail(unreadable_line(root / FLAT_DIR, exc))
    return sorted(hosts), hosts


def _check_root(root: Path) -> None:
    """DIR itself must be a real directory (not a link): one clear line otherwise, before anything is opened."""
    try:
        st = root.lstat()
    except OSError as exc:
        raise UserError(f"{root}: {exc.strerror or exc}: give a dataset directory (`gpu-triage record -o DIR/`)"
                        ) from None
    if fs.stat.S_ISLNK(st.st_mode):
        raise UserError(f"{root} is a symbolic link: give the dataset directory itself (compact never follows links)")
    if not fs.stat.S_ISDIR(st.st_mode):
        raise UserError(f"{root} is not a directory: give a dataset directory (`gpu-triage record -o DIR/`)")


def _host_partitions(root: Path, top: list[fs.Entry]) -> list[str]:
    """The host=NAME partitions among DIR's entries; a link where a partition would be, or a DIR without any
    partition (not a dataset), is refused with one line."""
    for e in top:
        if e.link and (e.name.startswith("host=") or e.name == FLAT_DIR):
            raise UserError(f"{root / e.name} is a symbolic link: compact never follows links in a dataset; "
                            "remove it (someone else may have planted it)")
    names = [e.name for e in top if e.directory and e.name.startswith("host=")]
    if not names and not any(e.name == FLAT_DIR and e.directory for e in top):
        raise UserError(f"{root} is not a gpu-triage dataset: no host=NAME partition in it (a dataset is what "
                        "`gpu-triage record -o DIR/` or `export --record DIR` writes)")
    return names


def _date_partitions(root: Path, rfd: int, name: str, out: Result) -> list[str]:
    """A host partition's readable date=YYYY-MM-DD partitions (a link in it is refused; an unreadable date
    partition is left out with a line in ``out.failed``)."""
    with fs.opened(name, rfd, root / name) as hfd:
        return [e.name for e in _entries_no_links(hfd, root / name)
                if e.directory and e.name.startswith("date=") and fs.parse_date(e.name[5:])
                and _readable(hfd, e.name, root / name / e.name, out)]


def _check_flat(root: Path, rfd: int, out: Result) -> None:
    """The older layout's per-card tables are not compacted, but a link in them is refused as anywhere else in
    the dataset, and an unreadable one is said in ``out.failed``."""
    with fs.opened(FLAT_DIR, rfd, root / FLAT_DIR) as ffd:
        for e in _entries_no_links(ffd, root / FLAT_DIR):
            if e.directory:
                _readable(ffd, e.name, root / FLAT_DIR / e.name, out)


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
    from gpu_triage.storage.compact_day import finish_staging

    if opts.keep_days is not None and opts.keep_days <= 0:
        raise UserError(f"--keep-days {opts.keep_days}: give 1 or more days (0 or fewer would remove today's data)")
    root = root.expanduser()
    out = Result()
    host_names, dates = scan(root, out)
    today = opts.now.astimezone(UTC).date()
    with fs.opened(str(root), None, root) as rfd:
        if not opts.dry_run:
            _one_run_at_a_time(rfd, root)
        if any(e.name == FLAT_DIR and e.directory for e in fs.entries(rfd)):
            out.say(f"{root / FLAT_DIR} holds per-card tables of an older layout, which nothing reads (the daily "
                    f"files hold the same figures): `rm -r {root / FLAT_DIR}` frees their space, or let "
                    "--keep-days expire them")
        todo: list[HostDay] = []
        for hname in host_names:
            with fs.opened(hname, rfd, root / hname) as hfd:
                finish_staging(root, hfd, hname, opts.dry_run, out)
                for dname in dates[hname]:
                    try:
                        item = _plan(root, hfd, hname, dname, opts, today, out)
                    except (fs.Unreadable, OSError) as exc:  # made unreadable since the scan
                        out.fail(unreadable_line(root / hname / dname, exc))
                        continue
                    if item is not None:
                        todo.append(item)
        if opts.dry_run:
            for i, hd in enumerate(todo, 1):
                size = sum(e.size for e in hd.files)
                out.days += 1
                out.files_merged += len(hd.files)
                out.bytes_before += size
                if progress is not None:
                    progress(i, len(todo), clean(f"{_where(hd)}: would merge {len(hd.files)} files "
                                                 f"({fs_bytes(size)}) into {DAILY_NAME}"))
        else:
            _compact_all(root, todo, opts, out, progress)
        if opts.keep_days is not None:
            from gpu_triage.storage.retention import expire

            expire(root, rfd, host_names, dates, today - timedelta(days=opts.keep_days), opts.dry_run, out)
    return out


def _where(hd: HostDay) -> str:
    return f"host={hd.host} date={day_stamp(hd.day)}"


#: below this many host-days one process does them: a worker costs about a second to start (the interpreter,
#: pyarrow and the engine imported again), a host-day about one CPU second
POOL_MIN_DAYS = 4
#: workers when --workers is not given, at most: each holds a host-day in memory (a few hundred MB for 8
#: cards), and past a few the disk, not the cores, sets the pace
DEFAULT_WORKERS_MAX = 4


def _compact_all(root: Path, todo: list[HostDay], opts: Options, out: Result, progress: Progress | None) -> None:
    """Every host-day of ``todo``, in ``opts.workers`` worker processes (default: one per usable core, at most
    DEFAULT_WORKERS_MAX) when there are enough of them, else here; ``progress`` after each, in the order they
    finish."""
    from gpu_triage.storage.compact_day import compact_one

    n = min(opts.workers or min(usable_cores(), DEFAULT_WORKERS_MAX), len(todo))
    if n <= 1 or len(todo) < POOL_MIN_DAYS:
        for i, hd in enumerate(todo, 1):
            line, got = compact_one(root, hd, opts)
            out.add(got)
            if progress is not None:
                progress(i, len(todo), clean(f"{_where(hd)}: {line}"))
        return
    import multiprocessing  # noqa: PLC0415
    from concurrent.futures import Future, ProcessPoolExecutor, as_completed  # noqa: PLC0415

    # spawned, never forked from this process, whose Arrow thread pools a fork would copy mid-use; each worker
    # dies with this process (compact_types.die_with_parent): DIR's lock goes with it, and no orphan may go on
    # writing while a next run holds it; its log comes back with each result, to this process's handlers
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"), initializer=worker_init,
                               initargs=(os.getpid(), logging.getLogger().getEffectiveLevel()))
    futures: dict[Future[tuple[str, Result]], HostDay] = {}
    try:
        futures = {pool.submit(compact_one, root, hd, opts, True): hd for hd in todo}
        for i, future in enumerate(as_completed(futures), 1):
            hd = futures[future]
            try:
                line, got = future.result()
            except Exception as exc:  # a worker killed (for memory): that host-day is left as it was
                log.exception("compacting %s failed in its worker", _where(hd))
                got = Result()
                got.fail(f"{root / f'host={hd.host}' / f'date={day_stamp(hd.day)}'}: its worker process failed "
                         f"({type(exc).__name__}: {exc}): left as it was; run compact again (--workers 1 needs "
                         "less memory)")
                line = "failed, left as it was"
            out.add(got)
            if progress is not None:
                progress(i, len(todo), clean(f"{_where(hd)}: {line}"))
    except BaseException:
        # Ctrl-C (the workers ignore it: the run decides): no new host-day starts; those in hand are finished
        # (a few seconds each), whole, never half, before DIR's lock goes with this frame. Each future is
        # cancelled here: shutdown's cancel_futures does nothing once the pool is collected
        for future in futures:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


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


def _plan(root: Path, hfd: int, hname: str, dname: str, opts: Options, today: date,
          out: Result) -> HostDay | None:
    """The host-day to compact in ``dname``, or None (today's, too fresh, being recorded, already done)."""
    day = fs.parse_date(dname[5:])
    assert day is not None
    end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
    if day >= today or opts.now < end + GRACE:
        return None
    if opts.keep_days is not None and day < today - timedelta(days=opts.keep_days):
        return None  # removed below: not worth merging first
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
    if not files or [e.name for e in files] == [DAILY_NAME]:
        return None  # nothing, or compacted already
    return HostDay(hname[5:], day, files)
