"""One host-day compacted (:func:`compact_day`, or :func:`compact_one` in a worker process) and what a
killed run left finished (:func:`finish_staging`). The order of the steps and why it is safe: see
:mod:`gpu_triage.storage.compact`."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_triage.errors import UserError
from gpu_triage.storage import compact_fs as fs
from gpu_triage.storage.compact_fs import DAILY_NAME
from gpu_triage.storage.compact_types import (
    KEPT,
    META_MERGED,
    META_RECOMPUTED,
    META_TOKEN,
    HostDay,
    Options,
    Result,
    fs_bytes,
    new_token,
    parse_staging,
    read_manifest,
    staging_name,
)
from gpu_triage.trace.bounds import host_metadata
from gpu_triage.trace.layout import META_HOST
from gpu_triage.trace.target import describe_os_error, write_parquet_atomic
from gpu_triage.verdicts.settings import SETTINGS_KEY

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("gpu_triage.storage.compact")


def _read(root: Path, hd: HostDay, out: Result) -> tuple[list[pa.Table], list[fs.Entry], dict[bytes, bytes],
                                                           float, object, list[object]]:
    """Each readable file of the host-day through the project's reader; unreadable ones are named and stay.
    Also the settings each file's verdicts were judged with (its host metadata's ``verdicts``, None without
    the key), for each file that carries any verdict."""
    import pyarrow as pa  # noqa: PLC0415

    from gpu_triage.storage.flat import conform_table  # noqa: PLC0415
    from gpu_triage.trace.reader import open_trace  # noqa: PLC0415

    folder = root / f"host={hd.host}" / f"date={hd.day.isoformat()}"
    tables, merged, judged_with = [], [], []
    meta: dict[bytes, bytes] = {}
    interval, host = 2.0, None
    for e in hd.files:
        try:
            tf = open_trace(folder / e.name)
            table = conform_table(tf.table)  # a column the reader let through that cannot be the trace's type
        except UserError as exc:
            out.say(f"left out {folder / e.name}: {exc} (it stays where it is)")
            continue
        except (pa.ArrowException, ValueError, TypeError) as exc:
            out.say(f"left out {folder / e.name}: its columns do not fit the trace's types ({exc}) "
                    "(it stays where it is)")
            continue
        tables.append(table)
        merged.append(e)
        meta, interval, host = dict(tf.table.schema.metadata or {}), tf.interval_s, tf.host
        if table.column("verdict").null_count < table.num_rows:
            judged_with.append(_host_extra(meta).get(SETTINGS_KEY))
    return tables, merged, meta, interval, host, judged_with


def _host_extra(meta: dict[bytes, bytes]) -> dict[str, object]:
    return host_metadata(meta) or {}  # bounded: MAX_HOST_META_BYTES


def _with_judged_settings(meta: dict[bytes, bytes], judged_with: object) -> None:
    """The daily file's host metadata (the last file's) naming the settings of the verdicts it holds
    (:func:`~gpu_triage.verdicts.settings.merged_settings`): the key removed where they are unknown."""
    obj = _host_extra(meta)
    if judged_with is None:
        if SETTINGS_KEY not in obj:
            return
        del obj[SETTINGS_KEY]
    else:
        obj[SETTINGS_KEY] = judged_with
    meta[META_HOST] = json.dumps(obj, ensure_ascii=False, default=str).encode()


def _judged(table: pa.Table, host: object, interval_s: float, opts: Options) -> list:
    """The engine's raw verdict at every tick of the merged day, as ``diagnose FILE`` would give it there."""
    from gpu_triage.offline.judge import judge  # noqa: PLC0415
    from gpu_triage.trace.batches import batches_of  # noqa: PLC0415
    from gpu_triage.trace.reader import TraceFile  # noqa: PLC0415
    from gpu_triage.verdicts.judge import verdict_sample  # noqa: PLC0415 - the one the recorder stores

    tf = TraceFile(Path("merged"), table, host, interval_s)  # type: ignore[arg-type]
    jd = judge(batches_of(tf), opts.thresholds, opts.window_s, stride=1)
    return [verdict_sample(v) for v in jd.raws]


def compact_day(root: Path, hfd: int, hd: HostDay, opts: Options, out: Result) -> str:
    """Merge one host-day into its daily file; returns the line saying what it did."""
    from gpu_triage.model import SCHEMA_VERSION  # noqa: PLC0415
    from gpu_triage.storage.flat import (  # noqa: PLC0415
        fill_verdicts,
        merge,
    )
    from gpu_triage.trace.layout import META_SCHEMA  # noqa: PLC0415
    from gpu_triage.verdicts.settings import merged_settings, settings  # noqa: PLC0415

    partition = f"date={hd.day.isoformat()}"
    folder = root / f"host={hd.host}" / partition
    tables, merged, meta, interval, host, judged_with = _read(root, hd, out)
    if not merged:
        return "nothing readable: left as it is"
    table, dups = merge(tables)
    recomputed = 0
    if table.column("verdict").null_count:
        table, recomputed = fill_verdicts(table, _judged(table, host, interval, opts))
    if recomputed:
        judged_with.append(settings(opts.thresholds, opts.window_s))
    # every verdict carried is kept; the day names their settings where the files agree, else none fits a reader
    _with_judged_settings(meta, merged_settings(judged_with))
    token = new_token()
    meta.update({META_SCHEMA: SCHEMA_VERSION.encode(), META_TOKEN: token.encode(),
                 META_MERGED: json.dumps([[e.name, e.size] for e in merged]).encode(),
                 META_RECOMPUTED: str(recomputed).encode()})
    table = table.replace_schema_metadata(meta)
    ticks = table.num_rows
    staging = staging_name(hd.day, token)
    try:
        os.mkdir(staging, 0o755, dir_fd=hfd)
        write_parquet_atomic(table, root / f"host={hd.host}" / staging / DAILY_NAME)
        del table  # the day's largest object: not held while the old files are removed
        with fs.opened(staging, hfd, root / f"host={hd.host}" / staging) as sfd:
            fs.fsync_dir(sfd)
        done = fs.exchange(hfd, partition, staging)
    except OSError as exc:
        _drop_staging(folder.parent, hfd, staging)
        raise UserError(f"compacting {folder} failed ({describe_os_error(exc)}): its files are left as they were; "
                        "run compact again once that is fixed") from None
    for note in done.notes:
        out.say(note)
    try:
        _clear_old(folder.parent, hfd, partition, done.old, {e.name: e.size for e in merged})
    except OSError as exc:  # the day is in place: what is left are merged copies, which the next run removes
        raise UserError(f"{folder}: {DAILY_NAME} is in place, but removing the merged files from "
                        f"{folder.parent / done.old} failed ({describe_os_error(exc)}): run compact again") from None
    size = (folder / DAILY_NAME).stat().st_size
    before = sum(e.size for e in merged)
    out.days += 1
    out.files_merged += len(merged)
    out.bytes_before += before
    out.bytes_after += size
    out.ticks += ticks
    out.duplicates += dups
    out.recomputed += recomputed
    log.info("compacted %s: %d files (%d bytes) into %s (%d bytes), %d ticks, %d verdicts recomputed",
             folder, len(merged), before, DAILY_NAME, size, ticks, recomputed)
    said = f", {recomputed} verdicts recomputed" if recomputed else ""
    return f"{len(merged)} files ({fs_bytes(before)}) -> {DAILY_NAME} ({fs_bytes(size)}), {ticks} ticks{said}"


def compact_one(root: Path, hd: HostDay, opts: Options, quiet_arrow: bool = False) -> tuple[str, Result]:
    """One host-day, its host partition opened here (as :func:`gpu_triage.storage.compact.run` opens it:
    without following a link): the line saying what was done and what it adds to the run's result. A
    host-day that cannot be done (a partition of another user's, a full disk) is a line in ``failed`` and
    is left as it was. What a worker process runs; ``quiet_arrow`` (in a worker): Arrow on this thread only,
    as the workers are one per core already, and the worker's log records returned in the result."""
    if quiet_arrow:
        import pyarrow as pa  # noqa: PLC0415

        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)
    out = Result()
    host_dir = root / f"host={hd.host}"
    try:
        # DIR opened again, without following a link: one swapped for a link since the run checked it is refused
        with fs.opened(str(root), None, root) as rfd, fs.opened(f"host={hd.host}", rfd, host_dir) as hfd:
            line = compact_day(root, hfd, hd, opts, out)
    except (UserError, OSError) as exc:
        out.fail(str(exc) if isinstance(exc, UserError) else
                 f"compacting {host_dir / f'date={hd.day.isoformat()}'} failed ({describe_os_error(exc)}): "
                 "left as it was")
        line = "failed, left as it was"
    if quiet_arrow:
        out.records = KEPT.take()
    return line, out


def _clear_old(host_dir: Path, hfd: int, partition: str, old: str, merged: dict[str, int]) -> None:
    """Remove the merged files from the old partition's directory; anything else goes back into the
    partition (a file that arrived after the listing is never lost); then the directory itself.
    ``host_dir`` is the host partition ``hfd`` is open on, for the paths an error names."""
    with fs.opened(old, hfd, host_dir / old) as ofd, fs.opened(partition, hfd, host_dir / partition) as pfd:
        for e in fs.entries(ofd):
            if e.regular and merged.get(e.name) == e.size:
                fs.remove_file(ofd, e.name)
                continue
            target = e.name
            while _exists(pfd, target):
                target = f"{e.name}.kept-{new_token()}"
            os.rename(e.name, target, src_dir_fd=ofd, dst_dir_fd=pfd)
            log.warning("%s was not merged: moved back into %s as %s", host_dir / old / e.name, host_dir / partition,
                        target)
        fs.fsync_dir(ofd)
        fs.fsync_dir(pfd)
    fs.remove_dir_if_empty(hfd, old)
    fs.fsync_dir(hfd)


def _exists(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _drop_staging(host_dir: Path, hfd: int, staging: str) -> None:
    """Remove an unfinished staging directory of the host partition ``hfd`` (``host_dir``): only its regular
    files, then itself."""
    try:
        with fs.opened(staging, hfd, host_dir / staging) as sfd:
            for e in fs.entries(sfd):
                if e.regular:
                    os.unlink(e.name, dir_fd=sfd)
        fs.remove_dir_if_empty(hfd, staging)
    except (OSError, UserError) as exc:
        log.warning("cannot remove the unfinished %s: %s", host_dir / staging, exc)


def finish_staging(root: Path, hfd: int, hname: str, dry_run: bool, out: Result) -> None:
    """Finish what a killed run left in one host partition (see the module docstring of storage.compact)."""
    for e in fs.entries(hfd):
        got = parse_staging(e.name)
        if got is None or not stat.S_ISDIR(e.mode):
            continue
        day, token, is_old = got
        if is_old and _exists(hfd, e.name.removesuffix(fs.OLD_SUFFIX)):
            continue  # finished with the staging directory of its name
        partition = f"date={day.isoformat()}"
        name = e.name.removesuffix(fs.OLD_SUFFIX)
        old = name + fs.OLD_SUFFIX
        shown = root / hname / name
        if dry_run:
            out.say(f"would finish {shown}, left by an interrupted compact")
            continue
        if _exists(hfd, old) and not _exists(hfd, partition):  # killed between the two renames
            os.rename(name, partition, src_dir_fd=hfd, dst_dir_fd=hfd)
            fs.fsync_dir(hfd)
        live_token, merged = read_manifest(root / hname / partition / DAILY_NAME)
        if _exists(hfd, old):
            _clear_old(root / hname, hfd, partition, old, merged)
            out.say(f"finished {shown}, left by an interrupted compact")
        elif _exists(hfd, name) and live_token == token:  # exchanged: it holds the merged files
            _clear_old(root / hname, hfd, partition, name, merged)
            out.say(f"finished {shown}, left by an interrupted compact")
        elif _exists(hfd, name):  # never exchanged: an unfinished copy of the files still in place
            _drop_staging(root / hname, hfd, name)
            out.say(f"removed {shown}, an unfinished daily file of an interrupted compact")
