"""GPU-seconds lost per tick of one recording, on its columns: :func:`gpu_triage.diagnosis.lost.lost_gpu_seconds`
(the one definition, which the exporter's counter adds up tick by tick) over a file's Arrow table at once.

The table holds the cards' ``index`` and ``util_pct`` leaves (:mod:`gpu_triage.fleet_history.perfile` reads only those);
each row's verdict is given as its bottleneck, the cards it names and the tick's seconds. A tick of no figure
(the definition's None) is NaN in numpy and null in polars; :func:`lost_sum` adds them up as the definition's
``total`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpu_triage.diagnosis.lost import MACHINE_WIDE, WHOLE_TICK
from gpu_triage.diagnosis.vocab import Bottleneck, is_healthy

_HEALTHY = (str(Bottleneck.NONE),)  # vocab.is_healthy's words, as a column test
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


def lost_per_row(table: Any, bottleneck: Any, named: Named, seconds: Any) -> Any:
    """Each row's GPU-seconds lost (a float64 array of the table's length), from its verdict's ``bottleneck`` (one
    per row, None where there is no verdict), the cards it names (:class:`Named`) and the tick's ``seconds``; NaN
    where the verdict names a bottleneck and none of the cards it covers reads GPU-Util (the definition's None: a
    table without the cards' GPU-Util too). Vectorised: a day of 2 s ticks is 43,200 rows per file."""
    import numpy as np
    import polars as pl
    import pyarrow.compute as pc

    n = table.num_rows
    secs = np.asarray(seconds, dtype=np.float64)
    secs = np.where(np.isfinite(secs) & (secs > 0), secs, 0.0)
    # each distinct word judged once, then looked up by its dictionary code (a day's rows hold a handful)
    enc = pc.dictionary_encode(pl.Series("b", bottleneck, dtype=pl.String).to_arrow())
    code = np.asarray(pc.fill_null(enc.indices, -1), dtype=np.int64)
    words = [*enc.dictionary.to_pylist(), None]  # code -1: no verdict

    def flag(test: Any) -> Any:
        return np.asarray([test(w) for w in words], dtype=bool)[code]

    healthy = flag(lambda w: not w or w in _HEALTHY) | (secs == 0)  # nothing judged lost, or no time to lose
    cards = cards_of(table) if n else None
    if cards is None:
        return np.where(healthy, 0.0, np.nan)
    rows, index, util = cards
    machine = flag(lambda w: w in MACHINE_WIDE)
    whole = flag(lambda w: w in WHOLE_TICK)
    every = machine[rows] | ~named.any[rows]
    cover = every | _named_card(named, rows, index)
    reads = cover & (whole[rows] | ~np.isnan(util))  # a covered card whose share is known
    share = np.where(whole[rows], 1.0, np.where(np.isnan(util), 0.0, 1.0 - util / 100.0))
    per_row = np.bincount(rows, weights=np.where(reads, share, 0.0), minlength=n)
    read = np.bincount(rows, weights=reads, minlength=n) > 0
    return np.where(healthy, 0.0, np.where(read, per_row * secs, np.nan))


def _named_card(named: Named, rows: Any, index: Any) -> Any:
    """Whether each card (its row, its index) is one its row's verdict names. Where each stored verdict names
    exactly its row's cards, in order (a job on every card: most days), that is every card; else a bit set per
    verdict, OR-ed over its cards with reduceat (the ids come sorted), where every index fits 63 bits; else
    np.isin (which hashes every key: most of a day's cost when it was the only way)."""
    import numpy as np

    if named.ids.size == 0 or rows.size == 0:
        return np.zeros(rows.size, dtype=bool)
    if named.of_row is None and np.array_equal(named.ids, rows) and np.array_equal(named.cards, index):
        return np.ones(rows.size, dtype=bool)
    of_row = named.of_row if named.of_row is not None else np.arange(named.any.size, dtype=np.int64)
    ids, cards = named.ids, named.cards
    if cards.max() >= 63 or cards.min() < 0 or index.max() >= 63 or index.min() < 0 or np.any(np.diff(ids) < 0):
        return np.isin(of_row[rows] * _KEY + index, ids * _KEY + cards)
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    masks = np.zeros(int(max(ids[-1], of_row.max())) + 1, dtype=np.uint64)
    masks[ids[starts]] = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), cards.astype(np.uint64)), starts)
    return (np.right_shift(masks[of_row][rows], index.astype(np.uint64)) & np.uint64(1)).astype(bool)


@dataclass(frozen=True, slots=True)
class Named:
    """The cards each row's verdict names, as arrays: the row's verdict id (``of_row``: None for the row itself,
    as stored verdicts are; its span for recomputed ones), for each card a verdict names its verdict's id
    (``ids``, sorted) and the card (``cards``), and whether the row's verdict names any (``any``, per row)."""

    of_row: Any
    ids: Any
    cards: Any
    any: Any


def named_lists(lists: Sequence[Sequence[int]]) -> Named:
    """:class:`Named` from one list of cards per row (tests, small inputs)."""
    import numpy as np

    n = len(lists)
    return Named(None, np.fromiter((r for r, cs in enumerate(lists) for _ in cs), dtype=np.int64),
                 np.fromiter((c for cs in lists for c in cs), dtype=np.int64),
                 np.fromiter((bool(c) for c in lists), dtype=bool, count=n))


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
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    named = Named(None, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(n, dtype=bool))
    bottleneck = ticks["bottleneck"]
    if "verdict" in table.column_names:
        verdict = table.column("verdict").combine_chunks()
        if verdict.type.get_field_index("pattern") >= 0:
            collecting = pl.from_arrow(pc.fill_null(pc.equal(verdict.field("pattern"), "collecting"), False))
            bottleneck = bottleneck.zip_with(~collecting, pl.repeat(None, n, dtype=pl.String, eager=True))
        if verdict.type.get_field_index("gpus") >= 0:
            gpus = verdict.field("gpus")
            rows = np.asarray(pc.list_parent_indices(gpus), dtype=np.int64)
            flat = np.asarray(pc.fill_null(pc.list_flatten(gpus).cast(pa.int64()), -1), dtype=np.int64)
            count = np.asarray(pc.fill_null(pc.list_value_length(gpus), 0), dtype=np.int64)
            named = Named(None, rows, flat, count > 0)
    seconds = ticks["seconds"].to_numpy()
    lost = lost_per_row(table, bottleneck, named, seconds)
    gpu = card_counts(table) * np.where(np.isfinite(seconds), seconds, 0.0)
    return ticks.with_columns(pl.Series("lost_s", lost, dtype=pl.Float64, nan_to_null=True),
                              pl.Series("gpu_s", gpu, dtype=pl.Float64))


def with_span_lost(pl: Any, table: Any, ticks: Any, spans: Sequence[Any], meta: dict[bytes, bytes]) -> Any:
    """``ticks`` (one row per recomputed span) with each span's ``lost_s`` and ``gpu_s``: the ticks of the table
    inside it (after its start, up to its end), each judged by the span's verdict."""
    import numpy as np

    from gpu_triage.offline.judge import tick_seconds
    from gpu_triage.trace.batches import as_float, meta_interval

    n = len(spans)
    # no table (its GPU-Util unreadable): a span judged under a bottleneck has no figure
    lost: Any = np.asarray([0.0 if is_healthy(s.bottleneck) else np.nan for s in spans], dtype=np.float64)
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
        span = np.minimum(at, n - 1)
        words = np.asarray([s.bottleneck for s in spans], dtype=object)[span]
        ids = np.fromiter((i for i, s in enumerate(spans) for _ in s.gpus), dtype=np.int64)
        cards = np.fromiter((c for s in spans for c in s.gpus), dtype=np.int64)
        names = np.asarray([bool(s.gpus) for s in spans], dtype=bool)[span]
        per_row = lost_per_row(table, pl.Series(words, dtype=pl.String).scatter(np.flatnonzero(~inside), None),
                               Named(span, ids, cards, names), secs)
        known = inside & ~np.isnan(per_row)
        lost = np.bincount(at[known], weights=per_row[known], minlength=n)[:n]
        unknown = np.bincount(at[inside & np.isnan(per_row)], minlength=n)[:n] > 0
        lost = np.where(unknown & (lost <= 0), np.nan, lost)  # diagnosis.lost.total, per span
        gpu = np.bincount(at[inside], weights=(card_counts(table) * secs)[inside], minlength=n)[:n]
    return ticks.with_columns(pl.Series("lost_s", lost, dtype=pl.Float64, nan_to_null=True),
                              pl.Series("gpu_s", gpu, dtype=pl.Float64))


def lost_sum(pl: Any, col: str = "lost_s") -> Any:
    """The polars aggregation of GPU-seconds lost that :func:`gpu_triage.diagnosis.lost.total` is: the sum of
    the known figures (null: unknown), null where one is unknown and the known ones lost nothing. It composes:
    the sums of groups summed again give the sum over all."""
    lost = pl.col(col)
    return (pl.when(lost.is_null().any() & (lost.fill_null(0.0).sum() <= 0))
            .then(pl.lit(None, dtype=pl.Float64)).otherwise(lost.sum()).alias(col))


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
