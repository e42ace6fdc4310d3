"""GPU-seconds lost per tick of one recording, on its columns: :func:`gpu_triage.diagnosis.lost.lost_gpu_seconds`
(the one definition, which the exporter's counter adds up tick by tick) over a file's Arrow table at once.

The table holds the cards' ``index`` and ``util_pct`` leaves (:mod:`gpu_triage.fleet.perfile` reads only those);
each row's verdict is given as its bottleneck, the cards it names and the tick's seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_triage.diagnosis.lost import MACHINE_WIDE, WHOLE_TICK
from gpu_triage.diagnosis.vocab import is_healthy

_KEY = 1 << 17  # a card index fits 16 bits (the trace's u16): row * _KEY + index is one key per (row, card)


def cards_of(table: Any) -> tuple[Any, Any, Any] | None:
    """(row, index, util_pct) of every card of every row, as numpy arrays; None when the table has no cards'
    ``index`` and ``util_pct``. GPU-Util outside 0-100 % is no reading (NaN), as the reader takes it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if "gpus" not in table.column_names:
        return None
    gpus = table.column("gpus").combine_chunks()
    if not pa.types.is_list(gpus.type) or not pa.types.is_struct(gpus.type.value_type):
        return None
    struct = gpus.type.value_type
    if struct.get_field_index("index") < 0 or struct.get_field_index("util_pct") < 0:
        return None
    rows = np.asarray(pc.list_parent_indices(gpus), dtype=np.int64)
    flat = pc.list_flatten(gpus)
    index = np.asarray(pc.fill_null(flat.field("index").cast(pa.int64()), -1), dtype=np.int64)
    util = np.asarray(pc.fill_null(flat.field("util_pct").cast(pa.float64()), float("nan")), dtype=np.float64)
    util = np.where((util >= 0.0) & (util <= 100.0), util, np.nan)
    return rows, index, util


def lost_per_row(table: Any, bottleneck: Sequence[str | None], named: Sequence[Sequence[int]],
                 seconds: Any) -> Any:
    """Each row's GPU-seconds lost (a float64 array of the table's length), from its verdict's ``bottleneck``,
    the cards it ``named`` and the tick's ``seconds``; zeros when the table has no cards' GPU-Util."""
    import numpy as np

    n = table.num_rows
    cards = cards_of(table)
    if cards is None or n == 0:
        return np.zeros(n)
    rows, index, util = cards
    words = np.asarray([b or "" for b in bottleneck], dtype=object)
    kinds = {w: (is_healthy(w), w in MACHINE_WIDE, w in WHOLE_TICK) for w in set(words.tolist())}
    healthy = np.fromiter((kinds[w][0] for w in words), dtype=bool, count=n)
    machine = np.fromiter((kinds[w][1] for w in words), dtype=bool, count=n)
    whole = np.fromiter((kinds[w][2] for w in words), dtype=bool, count=n)
    names_any = np.fromiter((bool(c) for c in named), dtype=bool, count=n)
    named_keys = np.fromiter((r * _KEY + c for r, cs in enumerate(named) for c in cs), dtype=np.int64)
    every = machine[rows] | ~names_any[rows]
    cover = every | np.isin(rows * _KEY + index, named_keys)
    share = np.where(whole[rows], 1.0, np.where(np.isnan(util), 0.0, 1.0 - util / 100.0))
    per_row = np.bincount(rows, weights=np.where(cover, share, 0.0), minlength=n)
    secs = np.asarray(seconds, dtype=np.float64)
    secs = np.where(np.isfinite(secs) & (secs > 0), secs, 0.0)
    return np.where(healthy, 0.0, per_row * secs)


def card_counts(table: Any) -> Any:
    """Each row's number of cards (an int array of the table's length; zeros without a ``gpus`` column)."""
    import numpy as np
    import pyarrow.compute as pc

    if "gpus" not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int64)
    return np.asarray(pc.fill_null(pc.list_value_length(table.column("gpus")), 0), dtype=np.int64)


def with_stored_lost(pl: Any, table: Any, ticks: Any) -> Any:
    """``ticks`` (one row per table row: the stored verdicts) with each tick's ``lost_s`` (GPU-seconds lost) and
    ``gpu_s`` (GPU-seconds recorded). A tick still collecting loses nothing: it has no verdict yet, as the
    exporter's counter counts it (its seconds count with the verdict after it)."""
    import numpy as np
    import pyarrow.compute as pc

    named: list[list[int]] = [[] for _ in range(table.num_rows)]
    bottleneck: list[str | None] = ticks["bottleneck"].to_list()
    if "verdict" in table.column_names:
        verdict = table.column("verdict").combine_chunks()
        if verdict.type.get_field_index("pattern") >= 0:
            collecting = pc.fill_null(pc.equal(verdict.field("pattern"), "collecting"), False).to_pylist()
            bottleneck = [None if c else b for c, b in zip(collecting, bottleneck, strict=True)]
        if verdict.type.get_field_index("gpus") >= 0:
            named = [[] if g is None else [int(i) for i in g if i is not None]
                     for g in verdict.field("gpus").to_pylist()]
    seconds = ticks["seconds"].to_numpy()
    lost = lost_per_row(table, bottleneck, named, seconds)
    gpu = card_counts(table) * np.where(np.isfinite(seconds), seconds, 0.0)
    return ticks.with_columns(pl.Series("lost_s", lost, dtype=pl.Float64), pl.Series("gpu_s", gpu, dtype=pl.Float64))


def with_span_lost(pl: Any, table: Any, ticks: Any, spans: Sequence[Any], meta: dict[bytes, bytes]) -> Any:
    """``ticks`` (one row per recomputed span) with each span's ``lost_s`` and ``gpu_s``: the ticks of the table
    inside it (after its start, up to its end), each judged by the span's verdict."""
    import numpy as np

    from gpu_triage.offline.judge import tick_seconds
    from gpu_triage.trace.batches import as_float, meta_interval

    n = len(spans)
    lost: Any = np.zeros(n)
    gpu: Any = np.zeros(n)
    us = _row_us(pl, table)
    if us is not None and n:
        ends = np.asarray([round(s.end.timestamp() * 1e6) for s in spans], dtype=np.int64)
        starts = np.asarray([round(s.start.timestamp() * 1e6) for s in spans], dtype=np.int64)
        at = np.searchsorted(ends, us, side="left")
        inside = (at < n) & (us > starts[np.minimum(at, n - 1)])
        iv = (as_float(table.column("interval_s").combine_chunks()) if "interval_s" in table.column_names
              else np.full(us.size, np.nan))
        secs = tick_seconds(us / 1e6, iv, meta_interval(meta)) if np.all(np.diff(us) > 0) else np.zeros(us.size)
        which = at.tolist()
        ok = inside.tolist()
        per_row = lost_per_row(table, [spans[i].bottleneck if k else None for i, k in zip(which, ok, strict=True)],
                               [spans[i].gpus if k else () for i, k in zip(which, ok, strict=True)], secs)
        lost = np.bincount(at[inside], weights=per_row[inside], minlength=n)[:n]
        gpu = np.bincount(at[inside], weights=(card_counts(table) * secs)[inside], minlength=n)[:n]
    return ticks.with_columns(pl.Series("lost_s", lost, dtype=pl.Float64), pl.Series("gpu_s", gpu, dtype=pl.Float64))


def _row_us(pl: Any, table: Any) -> Any:
    """The table's ``ts`` as UTC microseconds (numpy int64), or None (no timestamps, a null among them)."""
    if table is None or "ts" not in table.column_names or table.num_rows == 0:
        return None
    ts = pl.from_arrow(table.column("ts"))
    if not isinstance(ts, pl.Series) or not isinstance(ts.dtype, pl.Datetime) or ts.null_count():
        return None
    ts = ts.dt.replace_time_zone("UTC") if ts.dtype.time_zone is None else ts
    return ts.dt.convert_time_zone("UTC").dt.epoch("us").to_numpy()


def in_period(pl: Any, table: Any, ticks: Any, since: Any, until: Any, *, aligned: bool) -> tuple[Any, Any]:
    """The table's rows and the ticks (or spans) whose time lies in ``[since, until)`` (either None: open);
    ``aligned``: the ticks are the table's rows, filtered with the same mask."""
    import numpy as np
    import pyarrow as pa

    if since is None and until is None:
        return table, ticks
    end = pl.col("end")
    keep = pl.lit(True)
    if since is not None:
        keep = keep & (end >= since)
    if until is not None:
        keep = keep & (end < until)
    if aligned:
        mask = ticks.select(keep.alias("k"))["k"].to_numpy()
        return table.filter(pa.array(mask)), ticks.filter(pl.Series(mask))
    if table is not None:
        us = _row_us(pl, table)
        if us is not None:
            lo = -(1 << 62) if since is None else round(since.timestamp() * 1e6)
            hi = 1 << 62 if until is None else round(until.timestamp() * 1e6)
            table = table.filter(pa.array(np.asarray((us >= lo) & (us < hi))))
    return table, ticks.filter(keep)
