"""``gpu-triage compare BEFORE AFTER`` where a side is a dataset: a directory written by ``record -o DIR/`` or
``export --record DIR`` (``host=NAME/date=YYYY-MM-DD/…parquet``), a glob of its files or folders
(``'fleet/host=a/date=2026-11-2*'``), or several recordings in one directory.

Each side is read as one recording: the same figures ``compare`` gives for two files (samples/s first when
a job source recorded it, per-card GPU-Util and SM activity, stalls, links, host, the share of time in each
diagnosis), computed over all of the side's ticks, not averaged from per-file figures (a p95 of p95s is not
a p95). A side that spans several hosts names its cards ``host:index`` and gets one block per host.

One pass per file, streamed a batch at a time (:func:`~gpu_triage.trace.batches.iter_batches`, the
reader's own normalisation and range checks, so a one-file side gives exactly the two-file figures): each
batch is diagnosed and projected to the few columns the figures read (:func:`~gpu_triage.compare.runs.
project`); only those rows are kept (about 30 MB for a day of 8 cards). The diagnosis spreads the
``diagnose`` budget of engine calls (:data:`~gpu_triage.offline.judge.MAX_POINTS`) over the whole side,
as if it were one file.

A file that cannot be read (damaged, not a recording, holding no tick) is left out with a warning that
names it, and the report lists it; a side with no readable file at all is an error (exit 2).

What a file costs, past its rows: a dataset written with a short ``--rotate``, or many short runs, is
thousands of files of a few ticks. A small file (at most :data:`WHOLE_BYTES`, while the side holds
fewer than :data:`WHOLE_BUDGET_ROWS` such rows) is read whole once, through the project's reader, instead
of three partial reads (head, timestamps, batches), each of which decodes the whole file when it is
small; and the projection runs over :data:`PROJECT_ROWS` rows gathered across files (of one host and one
schema) rather than once per file, where polars' fixed cost per call was most of the work
(``benchmarks/bench_compare_files.py``; figures in docs/performance.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from gpu_triage.compare.changes import describe
from gpu_triage.compare.jobs import compare_job_summaries, slim_job, summarise_jobs
from gpu_triage.compare.runs import (
    CARD_METRICS,
    COLUMNS,
    HOST_METRICS,
    Parts,
    aggregate,
    change_of,
    concat_parts,
    differences,
    project,
    run_metadata,
    segment_shares,
)
from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.fleet_history.onefile import host_of, skip_reason
from gpu_triage.fleet_history.summary import dataset_files, leftovers, none_of
from gpu_triage.offline.judge import MAX_POINTS
from gpu_triage.offline.timeline import Timeline, diagnose_trace
from gpu_triage.safetext import clean
from gpu_triage.trace.batches import TraceSource, batches_of, iter_batches

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None] | None

WHOLE_BYTES = 256 << 10  # a file this small is read whole, once (a few hundred ticks of 8 cards)
WHOLE_BUDGET_ROWS = 200_000  # rows of small files held at once (all are opened before any is diagnosed)
PROJECT_ROWS = 4096  # rows projected at a time, gathered across files


@dataclass(slots=True)
class Side:
    """One side of the comparison, read."""

    spec: str
    files: list[Path]  # the files read, in time order
    skipped: list[tuple[Path, str]]  # (file, why) left out
    hosts: list[str]
    parts: Parts
    jobs: list[dict[str, Any] | None]  # per tick in time order (slim_job), None: no job at that tick
    timelines: list[Timeline]
    stride: int
    leftovers: list[Path] = field(default_factory=list)
    first_run: dict[str, Any] = field(default_factory=dict)  # the first file's run (compare.runs' metadata)
    repeated: int = 0  # ticks left out because another file of the same host already gave them

    @property
    def ticks(self) -> int:
        return sum(t.ticks for t in self.timelines)


def _skip(path: Path, why: str, skipped: list[tuple[Path, str]]) -> None:
    reason = skip_reason(path, why)
    skipped.append((path, reason))
    log.warning("%s left out of the comparison: %s", path, reason)


def read_side(spec: str, config: Config, progress: Progress = None) -> Side:
    """Diagnose and project every readable recording of ``spec``; UserError if none can be read."""
    files = dataset_files(spec)  # UserError (one line) for an empty directory or a glob matching nothing
    skipped: list[tuple[Path, str]] = []
    sources: list[TraceSource] = []
    held = 0  # rows of the small files read whole so far
    parsed: dict[bytes, Any] = {}  # digest of a small file's bytes -> its TraceFile, read once for all its copies
    for f in files:
        try:
            src, whole = _open(f, whole=held < WHOLE_BUDGET_ROWS, parsed=parsed)
        except UserError as exc:
            _skip(f, str(exc), skipped)
            continue
        held += src.n if whole else 0
        if src.n == 0:
            _skip(f, "holds no ticks", skipped)
            continue
        sources.append(src)
    if not sources:
        why = f" ({skipped[0][0].name}: {skipped[0][1]})" if skipped else ""
        raise UserError(f"{spec}: {none_of(len(files))}{why}; "
                        "give a dataset directory or a glob of gpu-triage recordings")
    sources.sort(key=lambda s: (float(s.t[0]), str(s.path)))
    host_names = {s.path: host_of(s.path, s.host.hostname) for s in sources}
    sources, repeated, copies = _once_each(sources, host_names)
    if repeated:
        log.warning("%s: %d of its files repeat ticks already read (%d ticks): each tick is counted once",
                    spec, copies, repeated)
    total = sum(s.n for s in sources)
    stride = max(1, math.ceil(total / MAX_POINTS))  # diagnose's budget, spread over the whole side
    used: list[Path] = []
    projector = _Projector()
    jobs: list[dict[str, Any] | None] = []
    timelines: list[Timeline] = []
    done = 0
    for src in sources:
        file_rows: list[pa.Table] = []
        file_jobs: list[dict[str, Any] | None] = []
        host = host_names[src.path]

        def tee(src: TraceSource = src, file_rows: list[pa.Table] = file_rows,
                file_jobs: list[dict[str, Any] | None] = file_jobs) -> Iterator[pa.RecordBatch]:
            for batch in src.batches():
                file_rows.append(pa.Table.from_batches([batch]).select(COLUMNS))
                job = batch.column("job") if "job" in batch.schema.names else None
                if job is None or job.null_count == len(job):
                    file_jobs.extend([None] * batch.num_rows)
                else:
                    file_jobs.extend(slim_job(j) for j in job.to_pylist())
                yield batch

        offset = done
        step = None if progress is None else (lambda d, n, o=offset: progress(min(o + d, total), total))
        try:
            tl = diagnose_trace(dataclasses.replace(src, batches=tee), config.thresholds, config.window_s,
                                step, stride=stride)
        except UserError as exc:  # damage found past the first rows: nothing of this file counts
            _skip(src.path, str(exc), skipped)
            continue
        finally:
            done += src.n
        used.append(src.path)
        for rows in file_rows:  # after its diagnosis succeeded: a file left out above adds no row
            projector.add(rows, host)
        jobs.extend(file_jobs)
        timelines.append(tl)
    if not used:
        raise UserError(f"{spec}: {none_of(len(files))} ({skipped[0][0].name}: "
                        f"{skipped[0][1]})")
    if progress is not None and done < total:
        progress(total, total)
    first = next(s for s in sources if s.path == used[0])
    return Side(spec, used, skipped, sorted(set(host_names[p] for p in used)), projector.parts(), jobs,
                timelines, stride, leftovers(spec), run_metadata(first.head), repeated)


def _once_each(sources: list[TraceSource], hosts: dict[Path, str]) -> tuple[list[TraceSource], int, int]:
    """Each host's ticks once: a file's ticks that a file read before it (in time order) already gave are
    left out of it, and a file all of whose ticks were given is left out whole (a copy). Returns the sources
    kept, the ticks left out and the files that repeated any. Only the files a new one overlaps in time are
    compared with it, so a thousand copies of one file cost a thousand comparisons with one file."""
    kept: list[TraceSource] = []
    seen: dict[str, list[np.ndarray]] = {}  # host -> the timestamps kept of each of its files so far
    repeated = copies = 0
    for src in sources:
        earlier = [t for t in seen.get(hosts[src.path], []) if t[-1] >= src.t[0] and t[0] <= src.t[-1]]
        new = ~np.isin(src.t, np.concatenate(earlier)) if earlier else None
        if new is not None and not new.all():
            repeated += int(src.n - new.sum())
            copies += 1
            if not new.any():
                continue
            src = _only(src, new)
        seen.setdefault(hosts[src.path], []).append(src.t)
        kept.append(src)
    return kept, repeated, copies


def _only(src: TraceSource, keep: np.ndarray) -> TraceSource:
    """``src`` with only the rows where ``keep`` is True (its batches' rows line up with its timestamps)."""

    def batches() -> Iterator[pa.RecordBatch]:
        at = 0
        for batch in src.batches():
            mask = keep[at:at + batch.num_rows]
            at += batch.num_rows
            if mask.all():
                yield batch
            elif mask.any():
                yield batch.filter(pa.array(mask))

    return dataclasses.replace(src, n=int(keep.sum()), t=src.t[keep], interval=src.interval[keep], batches=batches)


def _open(path: Path, *, whole: bool, parsed: dict[bytes, Any]) -> tuple[TraceSource, bool]:
    """A file to stream, and whether it was read whole: a small one (``whole`` allowed, a regular file of
    at most WHOLE_BYTES) is, through the reader, which sorts it and applies the checks and normalisation
    that :func:`iter_batches` applies batch by batch."""
    if whole:
        try:
            st = path.stat()  # a FIFO named *.parquet is not opened here (it would block): the reader refuses it
        except OSError:
            st = None  # iter_batches says what is wrong, in one line
        if st is not None and stat.S_ISREG(st.st_mode) and 0 < st.st_size <= WHOLE_BYTES:
            return _small(path, parsed), True
    return iter_batches(path), False


def _small(path: Path, parsed: dict[bytes, Any]) -> TraceSource:
    """A small file read whole. One whose bytes are those of a file read before (``parsed``: digest ->
    TraceFile) is not parsed again: the same bytes give the same rows, so the copies of one file (a copy tool
    run twice, a hostile user filling a shared dataset) cost a read and a digest each and share one table;
    each keeps its own path (its host partition, its name in what is said of it)."""
    from gpu_triage.trace.reader import open_trace
    from gpu_triage.trace.stream import checked_open, shown

    fh = checked_open(path)  # no link followed, a FIFO swapped in meanwhile refused: the reader's own checks
    try:
        head = fh.read(WHOLE_BYTES + 1)
        # a file grown past the small size since it was sized is read on, not known by its first bytes
        key = hashlib.blake2b(head, digest_size=20).digest() if len(head) <= WHOLE_BYTES else None
        known = parsed.get(key) if key is not None else None
        if known is not None:
            fh.close()
            return dataclasses.replace(batches_of(known), path=path, file=None)
        tf = open_trace(path, fh)  # read again from its start, through the same descriptor
    except OSError as exc:
        fh.close()
        raise UserError(f"{shown(path)}: cannot read ({exc.strerror or exc})") from exc
    except BaseException:
        fh.close()
        raise
    if key is not None:
        parsed[key] = tf
    return batches_of(tf)


class _Projector:
    """Projects the rows the figures read (:func:`~gpu_triage.compare.runs.project`) in runs of about
    PROJECT_ROWS rows of one host and one schema, however the rows arrive (a file's batches, or files of
    a few rows each): one polars pass per run instead of one per file."""

    def __init__(self) -> None:
        self._parts: list[Parts] = []
        self._pending: list[pa.Table] = []
        self._rows = 0
        self._host: str | None = None
        self._schema: pa.Schema | None = None

    def add(self, rows: pa.Table, host: str) -> None:
        if self._pending and (
            host != self._host or self._schema is None or not rows.schema.equals(self._schema, check_metadata=False)
        ):
            self._flush()
        self._pending.append(rows)
        self._host, self._schema = host, rows.schema
        self._rows += rows.num_rows
        if self._rows >= PROJECT_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        df = pl.from_arrow(pa.concat_tables(self._pending))
        assert isinstance(df, pl.DataFrame)
        self._parts.append(project(df, self._host))
        self._pending, self._rows = [], 0

    def parts(self) -> Parts:
        self._flush()
        return concat_parts(self._parts)


def _busy_cards(parts: Parts, idle_util_pct: float) -> int | None:
    """Cards (per host) whose mean GPU-Util was above the idle threshold: the job's cards when it names no
    ranks (as for one file)."""
    if not parts.gpus.height:
        return None
    means = parts.gpus.group_by("host", "index").agg(pl.col("util_pct").mean())
    return int((means["util_pct"] > idle_util_pct).sum()) or None


def _digest(side: Side, config: Config) -> tuple[dict[bool, dict[str, Any]], dict[str, Any] | None]:
    """The side's figures (cards by index, and by host — which one is shown depends on the other side)
    and its job summary; then its rows are dropped, so that two sides never hold their rows at once."""
    th = config.thresholds
    busy = _busy_cards(side.parts, th.idle_util_pct)
    figures = {False: aggregate(side.parts, th, False), True: aggregate(side.parts, th, True)}
    job = summarise_jobs(side.jobs, lambda: busy)
    empty = pl.DataFrame()
    side.parts, side.jobs = Parts(empty, empty, empty), []
    return figures, job


def _shares_of(side: Side) -> dict[str, float]:
    """Share of the side's recorded time per pattern/bottleneck, over all its files (gaps count for none)."""
    return segment_shares(s for tl in side.timelines for s in tl.segments)


def _side_info(side: Side) -> dict[str, Any]:
    intervals = sorted(tl.interval_s for tl in side.timelines)
    return {
        "path": clean(side.spec),
        "files": len(side.files),
        "hosts": side.hosts,
        "skipped": [{"path": clean(str(p)), "reason": clean(why)} for p, why in side.skipped],
        "repeated_ticks": side.repeated,  # ticks another file of the same host already gave: counted once
        "leftovers": [clean(str(p)) for p in side.leftovers],
        "ticks": side.ticks,
        "duration_s": sum(tl.recorded_s for tl in side.timelines),
        "gaps": sum(len(tl.gaps) for tl in side.timelines),
        "gap_s": sum(g.seconds for tl in side.timelines for g in tl.gaps),
        "interval_s": intervals[len(intervals) // 2],
        "judged_every_ticks": side.stride,
        "recovered": False,
        "warnings": [f"{p.name}: {w}" for p, tl in zip(side.files, side.timelines, strict=True) for w in tl.warnings],
    }


def _side_metadata(side: Side) -> dict[str, Any]:
    meta = dict(side.first_run)  # the first file's run, from the rows the side's reading began with
    meta["hostname"] = side.hosts[0] if len(side.hosts) == 1 else ", ".join(side.hosts)
    return meta


def compare_datasets(before: str, after: str, config: Config,
                     progress: Callable[[str], Progress] | None = None) -> dict[str, Any]:
    """The comparison of two datasets (or a dataset and a file) with the keys of
    :func:`~gpu_triage.compare.runs.compare_traces`, and per side ``files``, ``hosts``, ``skipped``;
    ``hosts`` (each host's figures) when a side spans several hosts."""
    a = read_side(before, config, progress(f"diagnosing {before}") if progress else None)
    fig_a, job_a = _digest(a, config)  # its rows are let go before the other side is read
    b = read_side(after, config, progress(f"diagnosing {after}") if progress else None)
    fig_b, job_b = _digest(b, config)
    by_host = len(a.hosts) > 1 or len(b.hosts) > 1
    sa, sb = fig_a[by_host], fig_b[by_host]
    job = compare_job_summaries(job_a, job_b)
    empty: dict[str, float | None] = {}

    def changes(x: dict[str, Any], y: dict[str, Any], keys: tuple[tuple[str, str], ...]) -> dict[str, Any]:
        return {k: change_of(x.get(k), y.get(k)) for k, _ in keys}

    da, db = _shares_of(a), _shares_of(b)
    ma, mb = _side_metadata(a), _side_metadata(b)
    result: dict[str, Any] = {
        "before": _side_info(a),
        "after": _side_info(b),
        "job": job,
        "overall": changes(sa["overall"], sb["overall"], CARD_METRICS),
        "cards": {c: changes(sa["cards"].get(c, empty), sb["cards"].get(c, empty), CARD_METRICS)
                  for c in _card_order(set(sa["cards"]) | set(sb["cards"]))},
        "host": changes(sa["host"], sb["host"], HOST_METRICS),
        "diagnosis": {k: change_of(da.get(k, 0.0), db.get(k, 0.0)) for k in sorted(set(da) | set(db))},
        "metadata_differences": differences(ma, mb),
    }
    if by_host:
        result["hosts"] = {h: changes(sa["hosts"].get(h, empty), sb["hosts"].get(h, empty), CARD_METRICS)
                           for h in sorted(set(sa["hosts"]) | set(sb["hosts"]))}
    return describe(result)  # units, what changed, the headline: as for two files


def _card_order(cards: set[str]) -> list[str]:
    """``0, 1, … 10`` by number; ``host:index`` by host, then number."""
    def key(c: str) -> tuple[str, int]:
        host, _, idx = c.rpartition(":")
        return (host, int(idx)) if idx.lstrip("-").isdigit() else (c, 0)

    return sorted(cards, key=key)
