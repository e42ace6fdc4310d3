"""One file's share of ``diagnose DIR --summary``: its verdicts' seconds per bottleneck, per 5-minute window
and per owner, and its GPU-Util per window, as small frames that add up across files (and across processes).

The verdicts come from the file itself where the recorder stored them (trace v3's ``verdict`` column on
every tick: :mod:`gpu_triage.verdicts.judge`): a columnar read of ``ts``, ``interval_s``,
``verdict.pattern`` and ``verdict.bottleneck`` only, each tick standing for the seconds since the tick before
(after a gap, its own interval), as the recomputation counts them. A tick judged while the window was still
filling (pattern ``collecting``: the first ``warmup_s`` of each file and after a gap) has no verdict yet and
counts for the first verdict after it, as it does in the recomputation, whose first verdict comes 30 s in.
The stored verdicts are taken only when the file says they were judged with the reader's settings (its host
metadata's ``verdicts``: the window and a digest of the thresholds, :func:`gpu_triage.verdicts.settings.
settings_fit`; a file recorded before that key existed: only under the default settings), so that
``--window`` and ``--config`` change every file's reading, not only the recomputed ones'.
A file without them on every tick (v1/v2, a writer that does not diagnose, a tick whose diagnosis failed),
or with verdicts judged with other settings, is recomputed as before (:func:`gpu_triage.fleet_history.summary.
file_verdicts`: a verdict every 30 s of data). GPU-Util and the owners are read in the same pass, only the
Parquet leaves they need (``gpus``' ``util_pct``, ``mem_used_bytes``, ``mem_total_bytes``; ``procs``' owner
fields), not whole list columns.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.openfiles import open_input
from gpu_triage.trace.bounds import bound_column, check_footer, host_metadata

log = logging.getLogger(__name__)

WINDOW = "300s"  # the worst windows' length (summary.WINDOW_S), as polars names it
GPU_LEAVES = ("index", "util_pct", "mem_used_bytes", "mem_total_bytes")  # index: the cards a verdict names
MEM_HELD_FRAC = 0.10  # a job holds the cards: the diagnosis' own mem_held_frac
COLLECTING = "collecting"  # diagnosis.vocab.Pattern.COLLECTING: the window is too short for a verdict yet


@dataclass(slots=True)
class FilePart:
    """What one readable file adds to the summary (frames with no host column: :func:`combine` adds it)."""

    path: str
    host: str
    stored: bool  # its verdicts were read, not recomputed
    seconds: float  # wall time this file took (the recomputation's cost is said in the summary)
    # (bottleneck, seconds, lost_s, gpu_s): lost_s GPU-seconds lost (fleet_history.lost; null: no figure), gpu_s
    # recorded
    bottlenecks: Any
    modes: Any  # (ts: the window's start, bottleneck, seconds, lost_s)
    owners: Any  # (owner, bottleneck, seconds, lost_s) or None
    util: Any  # (ts: the window's start, util_sum, ticks) or None
    warnings: list[str] = field(default_factory=list)  # logged by the caller (a worker's log goes nowhere)


@dataclass(slots=True)
class Skipped:
    path: str
    reason: str  # the reader's line for it (the path it starts with removed by the caller)


def has_stored_verdicts(path: Path, config: Config, pf: Any = None) -> bool:
    """Whether a file's footer says it holds a verdict on every tick, judged with ``config``'s window and
    thresholds: trace v3 or later, host metadata whose ``verdicts`` settings fit ``config``
    (:func:`~gpu_triage.verdicts.settings.settings_fit`), a ``verdict`` struct with its ``bottleneck``, and no
    null among them in any row group's statistics. Only the footer is read; anything unusual (no statistics,
    a foreign or damaged file) says False: the file is then read by the recomputation, whose reader says
    what is wrong with it. ``pf``: the file already opened."""
    import pyarrow.parquet as pq

    from gpu_triage.verdicts.settings import settings_fit

    try:
        pf = pf or pq.ParquetFile(open_input(path), pre_buffer=False)
        meta = pf.schema_arrow.metadata or {}
        version = meta.get(b"gpu_triage.schema", b"").decode("ascii", "replace")
        paths = [pf.schema.column(i).path for i in range(len(pf.schema))]
        if (not version.isdigit() or int(version) < 3 or pf.metadata.num_rows == 0 or "verdict.bottleneck" not in paths
                or not settings_fit(host_metadata(meta) or {}, config.thresholds, config.window_s)):
            return False
        j = paths.index("verdict.bottleneck")
        for g in range(pf.metadata.num_row_groups):
            stats = pf.metadata.row_group(g).column(j).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                return False
        return True
    except Exception as exc:  # pyarrow raises many types for a damaged footer; the recomputation names it
        log.debug("%s: no stored verdicts read (%s)", path, exc)
        return False


def _leaves(pf: Any, column: str, names: tuple[str, ...] | frozenset[str], *, skip_empty: bool = False) -> list[str]:
    """The Parquet leaf paths of ``column``'s struct fields named ``names`` (``gpus.list.element.util_pct``):
    reading them alone skips the rest of a list column (the cards' other 20 fields). ``skip_empty``: leave
    out a leaf whose statistics say it holds no value in any row group (an owner field nobody set: decoding
    its nulls cost more than reading the filled ones)."""
    out = []
    for i in range(len(pf.schema)):
        parts = pf.schema.column(i).path.split(".")
        if len(parts) >= 2 and parts[0] == column and parts[-1] in names:
            if skip_empty and _holds_nothing(pf, i):
                continue
            out.append(".".join(parts))
    return out


def _has_leaf(pf: Any, prefix: str) -> bool:
    return any(pf.schema.column(i).path.startswith(prefix) for i in range(len(pf.schema)))


def _holds_nothing(pf: Any, leaf: int) -> bool:
    for g in range(pf.metadata.num_row_groups):
        stats = pf.metadata.row_group(g).column(leaf).statistics
        if stats is None or stats.has_min_max or not stats.has_null_count:
            return False
    return True


def _projected(path: Path, with_verdicts: bool, pf: Any = None) -> tuple[Any, dict[bytes, bytes]]:
    """The columns the summary reads of a file, as one Arrow table, and the file's metadata. ``pf``: the
    file already opened (its footer parsed once: a few milliseconds for the trace's 86 leaves)."""
    import pyarrow.parquet as pq

    from gpu_triage.fleet_history.owners import OWNER_FIELDS

    pf = pf or pq.ParquetFile(open_input(path), pre_buffer=False)
    check_footer(pf, str(path))  # lists past the contract's limits: refused before anything is decoded
    names = set(pf.schema_arrow.names)
    cols = [c for c in ("ts", "interval_s") if c in names]
    owners = _leaves(pf, "procs", OWNER_FIELDS, skip_empty=True) or _leaves(pf, "procs", ("pid",))
    cols += _leaves(pf, "gpus", GPU_LEAVES) + owners
    if with_verdicts:
        cols += ["verdict.pattern", "verdict.bottleneck"] + (["verdict.gpus"] if _has_leaf(pf, "verdict.gpus.") else [])
    table = pf.read(columns=cols, use_threads=False)
    for i, name in enumerate(table.column_names):  # strings and lists cut to the contract's limits, in Arrow
        table = table.set_column(i, name, bound_column(name, table.column(i)))
    return table, (pf.schema_arrow.metadata or {})


def _hostname(meta: dict[bytes, bytes]) -> str | None:
    from gpu_triage.trace.row_codec import host_from_json

    obj = host_metadata(meta)  # bounded: MAX_HOST_META_BYTES
    try:
        return host_from_json(obj).hostname if obj is not None else None
    except (ValueError, TypeError, AttributeError):
        return None


def _stored_ticks(pl: Any, table: Any, meta: dict[bytes, bytes]) -> Any:
    """(end, bottleneck, seconds) per tick from the stored verdicts, or None when the file must be read by the
    recomputation instead (timestamps out of order or out of range, a tick without a verdict: the reader's
    cleaning decides there)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpu_triage.offline.judge import tick_seconds
    from gpu_triage.trace.batches import as_float, meta_interval
    from gpu_triage.trace.schema import TS_RANGE_US

    ts = table.column("ts")
    if not pa.types.is_timestamp(ts.type) or ts.type.unit != "us" or ts.null_count:
        return None
    us = pc.cast(ts, pa.int64()).to_numpy()
    if us.size == 0 or us[0] < TS_RANGE_US[0] or us[-1] >= TS_RANGE_US[1] or not np.all(np.diff(us) > 0):
        return None
    verdict = table.column("verdict").combine_chunks()
    bottleneck, pattern = verdict.field("bottleneck"), verdict.field("pattern")
    if bottleneck.null_count:
        return None
    # "collecting" is no verdict yet: its ticks go to the verdict that follows (none if none follows)
    waiting = pc.fill_null(pc.equal(pattern, COLLECTING), False)
    counted = (pl.from_arrow(pc.if_else(waiting, pa.scalar(None, bottleneck.type), bottleneck))
               .backward_fill().fill_null("none"))
    iv = (as_float(table.column("interval_s").combine_chunks()) if "interval_s" in table.column_names
          else np.full(us.size, np.nan))
    seconds = tick_seconds(us / 1e6, iv, meta_interval(meta))
    return pl.DataFrame({
        "end": pl.Series(us, dtype=pl.Int64).cast(pl.Datetime("us", "UTC")),
        "bottleneck": counted,
        "seconds": seconds,
    })


def _span_ticks(pl: Any, spans: list[Any]) -> Any:
    """The recomputation's spans as the same (end, bottleneck, seconds) rows."""
    return pl.DataFrame(
        {"start": [s.start for s in spans], "end": [s.end for s in spans],
         "bottleneck": [s.bottleneck for s in spans]},
        schema={"start": pl.Datetime("us", "UTC"), "end": pl.Datetime("us", "UTC"), "bottleneck": pl.String},
    ).select("end", "bottleneck",  # whole milliseconds: a recomputed span's length as the summary reports it
             ((pl.col("end") - pl.col("start")).dt.total_milliseconds() / 1000).alias("seconds"))


def file_part(path: Path, config: Config, use_stored: bool = True,
              period: tuple[datetime | None, datetime | None] = (None, None)) -> FilePart | Skipped:
    """One file's part of the summary: from its stored verdicts where it has them, judged with ``config``'s
    settings (``use_stored``), else recomputed; Skipped (with the reader's reason) when the file cannot be
    read at all. ``period``: only the ticks in ``[since, until)`` count (a recomputed span by its end)."""
    import polars as pl
    import pyarrow.parquet as pq

    from gpu_triage.fleet_history.lost import in_period, lost_sum, with_span_lost, with_stored_lost
    from gpu_triage.fleet_history.onefile import file_verdicts, host_of, skip_reason

    began = time.perf_counter()
    pf = None
    if use_stored:
        try:
            pf = pq.ParquetFile(open_input(path), pre_buffer=False)
        except Exception as exc:  # the recomputation's reader names what is wrong with it
            log.debug("%s: not opened for its stored verdicts (%s)", path, exc)
    stored = pf is not None and has_stored_verdicts(path, config, pf)
    warnings: list[str] = []
    ticks = None
    table: Any = None
    meta: dict[bytes, bytes] = {}
    host = ""
    if stored:
        try:
            table, meta = _projected(path, True, pf)
            ticks = _stored_ticks(pl, table, meta)
            ticks = None if ticks is None else with_stored_lost(pl, table, ticks)
        except Exception as exc:  # read as the recomputation reads it, which names what is wrong
            log.debug("%s: stored verdicts not read (%s)", path, exc)
            ticks = None
        host = host_of(path, _hostname(meta))
    if ticks is None:
        stored = False
        try:
            host, spans = file_verdicts(path, config)
        except UserError as exc:
            return Skipped(str(path), skip_reason(path, str(exc)))
        ticks = _span_ticks(pl, spans)
        try:
            table, meta = _projected(path, with_verdicts=False)
        except Exception as exc:  # its verdicts were read; its GPU-Util and owners cannot be
            warnings.append(f"{path}: GPU-Util and owners left out of the summary ({_first_line(exc)})")
            table = None
        ticks = with_span_lost(pl, table, ticks, spans, meta)
    table, ticks = in_period(pl, table, ticks, *period, aligned=stored)
    # what polars reads: the cards' leaves for GPU-Util (the processes stay Arrow for owners_per_row)
    frame = pl.from_arrow(table.select([c for c in ("ts", "gpus") if c in table.column_names])) if (
        table is not None) else None
    return FilePart(
        str(path), host, stored, time.perf_counter() - began,
        bottlenecks=ticks.group_by("bottleneck").agg(pl.col("seconds", "gpu_s").sum(), lost_sum(pl)),
        modes=_by_window(pl, ticks),
        owners=_owners(pl, path, table, ticks, warnings, aligned=stored),
        util=_util(pl, path, frame, warnings),
        warnings=warnings,
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _by_window(pl: Any, ticks: Any) -> Any:
    """Seconds per bottleneck in each window, keyed by the window its verdict's tick falls in."""
    from gpu_triage.fleet_history.lost import lost_sum

    return (ticks.group_by(pl.col("end").dt.truncate(WINDOW).alias("ts"), "bottleneck")
            .agg(pl.col("seconds").sum(), lost_sum(pl)))


def _owners(pl: Any, path: Path, table: Any, ticks: Any, warnings: list[str], *,
            aligned: bool = False) -> Any:
    """Seconds per (owner, bottleneck): each verdict's seconds counted for the owners of its tick.
    ``aligned``: ``ticks`` are the table's rows in order (stored verdicts), so no join is needed."""
    from gpu_triage.fleet_history.lost import lost_sum
    from gpu_triage.fleet_history.owners import owner_ticks, owners_per_row, with_ts

    if table is None:
        return None
    try:
        per_row = owners_per_row(pl, table)
        if per_row is NotImplemented:
            owners = owner_ticks(path, "", pl.from_arrow(table.select(["ts", "procs"])).lazy())
        elif per_row is None:
            return None
        elif aligned:
            return (ticks.with_columns(per_row.alias("owner")).filter(pl.col("owner").is_not_null())
                    .group_by("owner", "bottleneck").agg(pl.col("seconds").sum(), lost_sum(pl)))
        else:
            owners = with_ts(pl, table, per_row)
    except pl.exceptions.PolarsError as exc:
        warnings.append(f"{path}: owners left out of the summary ({_first_line(exc)})")
        return None
    if owners is None:
        return None
    return (
        ticks.sort("end")
        .join_asof(owners.select("ts", "owner"), left_on="end", right_on="ts", strategy="nearest",
                   tolerance="1ms", check_sortedness=False)
        .filter(pl.col("owner").is_not_null())
        .group_by("owner", "bottleneck")
        .agg(pl.col("seconds").sum(), lost_sum(pl))
    )


def _util(pl: Any, path: Path, frame: Any, warnings: list[str]) -> Any:
    """GPU-Util summed per window over the ticks where a job held the cards, and their count."""
    from gpu_triage.fleet_history.onefile import util_rows

    if frame is None:
        return None
    lo, hi = _ts_bounds()
    try:
        rows = util_rows(pl, frame.lazy(), "", lo, hi)
    except pl.exceptions.PolarsError as exc:
        warnings.append(f"{path}: GPU-Util left out of the worst windows ({_first_line(exc)})")
        return None
    if rows is None:
        return None
    return (
        rows.filter((pl.col("mem_frac") >= MEM_HELD_FRAC) & pl.col("util").is_not_null())
        .group_by(pl.col("ts").dt.truncate(WINDOW))
        .agg(pl.col("util").sum().alias("util_sum"), pl.len().alias("ticks"))
    )


def _ts_bounds() -> tuple[datetime, datetime]:
    from gpu_triage.trace.schema import TS_RANGE_US

    lo, hi = TS_RANGE_US[0], TS_RANGE_US[1] - 1e6
    return datetime.fromtimestamp(lo / 1e6, UTC), datetime.fromtimestamp(hi / 1e6, UTC)


POOL_MIN_FILES = 64  # this many files or more: read in worker processes whatever they hold
#: fewer files than that, but this many ticks to diagnose again: workers too. A worker's start costs ~1 CPU s
#: (the interpreter, polars, pyarrow, numpy and the engine imported again): 7,200 ticks of 8 cards recomputed
#: took longer with two workers than in one process, even in wall time; 28,800 less wall time, more CPU
#: (benchmarks/bench_summary_workers.py, docs/performance.md "Stored verdicts")
POOL_MIN_RECOMPUTED_TICKS = 20_000


def _ticks_to_recompute(files: list[Path], config: Config, use_stored: bool) -> int:
    """The rows (footers only) of the files whose verdicts are not read as stored; an unreadable file counts
    none (its reader fails at once)."""
    import pyarrow.parquet as pq

    total = 0
    for f in files:
        try:
            with open_input(f) as fh:  # one descriptor a file, closed here: a glob may name thousands
                pf = pq.ParquetFile(fh, pre_buffer=False)
                if not (use_stored and has_stored_verdicts(f, config, pf)):
                    total += pf.metadata.num_rows
        except Exception as exc:  # pyarrow raises many types for a damaged footer; the file's own read names it
            log.debug("%s: no row count read (%s)", f, exc)
    return total


def all_parts(files: list[Path], config: Config, progress: Any = None, use_stored: bool = True,
              workers: int | None = None,
              period: tuple[datetime | None, datetime | None] = (None, None)) -> list[FilePart | Skipped]:
    """Every file's part, in the files' order; ``progress(done, total)`` after each file.

    The files are read by worker processes (one per core, ``workers`` to choose) when that is worth their
    start: many files, or many ticks to recompute. A worker is spawned, never forked from this process, whose
    polars and Arrow thread pools a fork would copy mid-use."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = min(workers or cores, len(files))
    if (workers is None and n > 1 and len(files) < POOL_MIN_FILES
            and _ticks_to_recompute(files, config, use_stored) < POOL_MIN_RECOMPUTED_TICKS):
        n = 1
    if n <= 1:
        out: list[FilePart | Skipped] = []
        for i, f in enumerate(files, start=1):
            out.append(file_part(f, config, use_stored, period))
            if progress is not None:
                progress(i, len(files))
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list[FilePart | Skipped | None] = [None] * len(files)
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(file_part, f, config, use_stored, period): i for i, f in enumerate(files)}
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            if progress is not None:
                progress(done, len(files))
    return [r for r in results if r is not None]
