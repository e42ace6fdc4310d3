"""``compact --keep-days N``: the date partitions older than N days removed (the recordings, and the days of
a ``DIR/flat/`` per-card table that an older layout left).

A partition's age is its name's UTC date: with N = 7 on 2026-12-02, every ``date=`` partition and flat
day before 2026-11-25 goes. Only regular files a gpu-triage dataset holds there are removed (``*.parquet``
and the temporary files of a killed conversion), by their directory's descriptor, and then the emptied
directory. A partition holding a recording's stream (being recorded, or left by a killed recorder for
``recover``) is left whole, and named. A partition holding anything else has its recordings removed; the
directory and those other entries stay, and it is named with the first of them. A dry run says the same
of each partition, changing nothing. A partition that cannot be opened (another user's) is named and left;
the others are still done.
"""

from __future__ import annotations

import logging
import os
from datetime import date
from pathlib import Path

from gpu_triage.storage import compact_fs as fs
from gpu_triage.storage.compact_fs import FLAT_DIR
from gpu_triage.storage.compact_types import Result, fs_bytes, unreadable_line
from gpu_triage.trace.stream import STREAM_SUFFIX

log = logging.getLogger("gpu_triage.storage.compact")


def _ours(name: str) -> bool:
    """A file of a dataset's partition: a recording or flat file, or a killed conversion's temporary."""
    return name.endswith(".parquet") and not name.startswith(".") or (name.startswith(".") and ".parquet.tmp-" in name)


def _expire_dir(parent_fd: int, name: str, shown: Path, dry_run: bool, out: Result) -> bool:
    """Remove one partition's files and the partition; False (and a line) where something must stay. A dry
    run counts and says the same, removing nothing."""
    with fs.opened(name, parent_fd, shown) as dfd:
        found = fs.entries(dfd)
        streams = [e for e in found if e.name.endswith(STREAM_SUFFIX)]
        if streams:
            out.say(f"kept {shown}: it holds {streams[0].name}, a recording not converted yet "
                    f"(`gpu-triage recover {shown / streams[0].name}`, or remove it by hand)")
            return False
        mine = [e for e in found if e.regular and _ours(e.name)]
        others = [e for e in found if e not in mine]
        size = sum(e.size for e in mine)
        if dry_run:
            out.files_removed += len(mine)
            out.bytes_removed += size
            if others:
                out.say(f"would keep {shown}: it holds {len(others)} other entries ({others[0].name} …); would "
                        f"remove its recordings ({len(mine)} files, {fs_bytes(size)})")
                return False
            out.say(f"would remove {shown} ({len(mine)} files, {fs_bytes(size)})")
            return True
        for e in mine:
            got = fs.remove_file(dfd, e.name)
            if got >= 0:
                out.files_removed += 1
                out.bytes_removed += got
        fs.fsync_dir(dfd)
    if others:
        out.say(f"kept {shown}: it holds {len(others)} other entries ({others[0].name} …); its recordings "
                "were removed")
        return False
    fs.remove_dir_if_empty(parent_fd, name)
    log.info("removed %s (%d files, %d bytes)", shown, len(mine), size)
    return True


def _expire_or_say(parent_fd: int, name: str, shown: Path, dry_run: bool, out: Result) -> bool:
    """:func:`_expire_dir`; False, with a line in ``out.failed``, where the partition cannot be opened."""
    try:
        return _expire_dir(parent_fd, name, shown, dry_run, out)
    except fs.Unreadable as exc:
        out.fail(unreadable_line(shown, exc))
        return False


def expire(root: Path, rfd: int, hosts: list[str], dates: dict[str, list[str]], cutoff: date, dry_run: bool,
           out: Result) -> None:
    """Remove every partition dated before ``cutoff`` (recordings per host, and an older layout's flat days)."""
    removed_days: set[tuple[str, str]] = set()
    for hname in hosts:
        with fs.opened(hname, rfd, root / hname) as hfd:
            for dname in dates[hname]:
                day = fs.parse_date(dname[5:])
                if day is None or day >= cutoff:
                    continue
                if _expire_or_say(hfd, dname, root / hname / dname, dry_run, out):
                    removed_days.add((hname, dname))
            if not dry_run:
                fs.fsync_dir(hfd)
    try:
        os.stat(FLAT_DIR, dir_fd=rfd, follow_symlinks=False)
    except FileNotFoundError:
        ffd = -1
    else:
        try:
            ffd = fs.open_dir(FLAT_DIR, rfd, root / FLAT_DIR)  # a link is refused here
        except fs.Unreadable as exc:
            out.fail(unreadable_line(root / FLAT_DIR, exc))
            ffd = -1
    if ffd >= 0:
        try:
            for e in fs.entries(ffd):
                day = fs.parse_date(e.name)
                if e.directory and day is not None and day < cutoff:
                    _expire_or_say(ffd, e.name, root / FLAT_DIR / e.name, dry_run, out)
            if not dry_run:
                fs.fsync_dir(ffd)
        finally:
            os.close(ffd)
    out.days_removed += len(removed_days)
