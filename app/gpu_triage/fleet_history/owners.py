"""Whose time it was: each owner's share of the time in each bottleneck (a Slurm job, a pod, a container, a
user; :meth:`gpu_triage.model.ProcSample.owner`), for ``diagnose FILE`` and the fleet's summary.

The owners come from the recording's process rows (the cards' processes, each with the owner the live source
attributed from /proc: docs/recording.md); a verdict's time is shared among the owners whose processes held
cards in it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, BinaryIO

from gpu_triage.openfiles import open_input

log = logging.getLogger(__name__)


OWNER_FIELDS = ("slurm_job", "pod_uid", "pod_name", "pod_namespace", "container", "user")


def owner_label(kind_id: tuple[str, str] | None) -> str | None:
    """How the summary names an owner: ``slurm 4242``, ``pod ml/train-0``, ``container docker://…``,
    ``user alice`` (ProcSample.owner() decides which one a process has)."""
    return None if kind_id is None else f"{kind_id[0]} {kind_id[1]}"


def owner_ticks(path: Path, host: str, lf: Any = None, file: BinaryIO | None = None) -> Any:
    """(host, ts, owner) per tick of one recording: the owners of its GPU processes, named as
    :func:`owner_label` does and joined with " + " when several jobs share the machine; None when the
    recording has no owner fields (made before they existed) or no process has an owner. Only ``ts`` and
    the processes' owner fields are read; the owner of each distinct combination of fields is decided once,
    by ProcSample.owner() (the metrics and the process table use the same). ``lf``: the file's columns
    already read (a LazyFrame of at least ``ts`` and ``procs``), else the file is scanned: ``file``, the
    recording already open, else ``path`` opened once and checked (openfiles.open_input: a FIFO swapped in
    under the name is refused, never waited on)."""
    import polars as pl

    from gpu_triage.model import ProcSample

    if lf is None:
        file = file if file is not None else open_input(path)
        file.seek(0)
        lf = pl.scan_parquet(file)
    schema = lf.collect_schema()
    procs, ts = schema.get("procs"), schema.get("ts")
    inner = getattr(procs, "inner", None)
    if not isinstance(ts, pl.Datetime) or not isinstance(inner, pl.Struct):
        return None
    have = {f.name for f in inner.fields}
    if not have & set(OWNER_FIELDS):
        return None
    stamp = pl.col("ts").dt.replace_time_zone("UTC") if ts.time_zone is None else pl.col("ts")
    rows = (
        lf.select(stamp.dt.convert_time_zone("UTC").dt.cast_time_unit("us").alias("ts"), pl.col("procs"))
        .explode("procs")
        .select(
            "ts",
            *(
                pl.col("procs").struct.field(f).cast(pl.String, strict=False).alias(f)
                if f in have
                else pl.lit(None, dtype=pl.String).alias(f)
                for f in OWNER_FIELDS
            ),
        )
        .collect()
    )
    combos = rows.select(OWNER_FIELDS).unique()
    labels = [
        owner_label(ProcSample(0, 0, **dict(zip(OWNER_FIELDS, values, strict=True))).owner())
        for values in combos.iter_rows()
    ]
    named = combos.with_columns(pl.Series("owner", labels, dtype=pl.String))
    per_tick = (
        rows.join(named, on=list(OWNER_FIELDS), how="left", nulls_equal=True)
        .filter(pl.col("owner").is_not_null())
        .group_by("ts")
        .agg(pl.col("owner").unique().sort().str.join(" + "))
        .with_columns(pl.lit(host, dtype=pl.String).alias("host"))
        .select("host", "ts", "owner")
        .sort("ts")
    )
    return per_tick if per_tick.height else None


def owner_shares(table: Any) -> dict[str, dict[str, Any]]:
    """host -> owner -> {"seconds", "gpu_hours_lost" (None: no figure), "bottlenecks": {bottleneck: share}} from
    the seconds (and GPU-seconds lost) each file's verdicts counted for the owners of their ticks (host, owner,
    bottleneck, seconds, lost_s: :mod:`gpu_triage.fleet_history.perfile`); ticks with no owner are not in it."""
    import polars as pl

    from gpu_triage.fleet_history.lost import lost_sum

    if table.height == 0:
        return {}
    if "lost_s" not in table.columns:
        table = table.with_columns(pl.lit(0.0).alias("lost_s"))
    table = table.group_by("host", "owner", "bottleneck").agg(pl.col("seconds").sum(), lost_sum(pl))
    totals = table.group_by("host", "owner").agg(pl.col("seconds").sum().alias("total"),
                                                 lost_sum(pl).alias("lost"))
    table = (
        table.join(totals, on=["host", "owner"])
        .sort(["host", "total", "seconds", "owner", "bottleneck"], descending=[False, True, True, False, False])
    )
    out: dict[str, dict[str, Any]] = {}
    for r in table.iter_rows(named=True):
        lost = None if r["lost"] is None else round(r["lost"] / 3600, 4)  # None: no figure ("n/a")
        entry = out.setdefault(r["host"], {}).setdefault(
            r["owner"], {"seconds": r["total"], "gpu_hours_lost": lost, "bottlenecks": {}})
        entry["bottlenecks"][r["bottleneck"]] = round(r["seconds"] / r["total"], 4) if r["total"] else 0.0
    return out


def owner_time(path: Path, segments: list[Any], interval_s: float, file: BinaryIO | None = None) -> dict[str, Any]:
    """``diagnose FILE``'s per-owner account: owner -> {"seconds", "bottlenecks": {bottleneck: share}}, each
    tick counted (one interval) for its owners in the segment it falls in; empty when the recording has no
    owners (older files, a crash leftover not yet recovered: only Parquet is scanned). ``file``: the
    recording as the diagnosis opened it."""
    import polars as pl

    if not segments or not path.name.endswith(".parquet"):
        return {}
    try:
        ticks = owner_ticks(path, "", file=file)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:  # the diagnosis read it; its owners cannot be
        log.warning("%s: owners left out (%s)", path, (str(exc).splitlines() or [type(exc).__name__])[0][:200])
        return {}
    if ticks is None:
        return {}
    segs = pl.DataFrame(
        {
            "start": [s.start for s in segments],
            "end": [s.end for s in segments],
            "bottleneck": [s.bottleneck for s in segments],
        },
        schema={"start": pl.Datetime("us", "UTC"), "end": pl.Datetime("us", "UTC"), "bottleneck": pl.String},
    ).sort("end")
    joined = (
        ticks.sort("ts")
        .join_asof(segs, left_on="ts", right_on="end", strategy="forward")
        .filter(pl.col("bottleneck").is_not_null() & (pl.col("ts") > pl.col("start")))
        .group_by("owner", "bottleneck")
        .agg((pl.len() * interval_s).alias("seconds"))
        .with_columns(pl.col("seconds").sum().over("owner").alias("total"))
        .sort(["total", "seconds"], descending=[True, True])
    )
    out: dict[str, Any] = {}
    for r in joined.iter_rows(named=True):
        entry = out.setdefault(r["owner"], {"seconds": float(r["total"]), "bottlenecks": {}})
        entry["bottlenecks"][r["bottleneck"]] = round(r["seconds"] / r["total"], 4) if r["total"] else 0.0
    return out


MAX_LABELS = 62  # owners in one file the bit sets below can hold; more: the general path (owner_ticks)


def tick_owners(pl: Any, table: Any) -> Any:
    """(ts, owner) per tick with an owner, as :func:`owner_ticks` names them; None:
    no owner at all; NotImplemented: a file :func:`owners_per_row` does not take."""
    per_row = owners_per_row(pl, table)
    if per_row is None or per_row is NotImplemented:
        return per_row
    return with_ts(pl, table, per_row)


def with_ts(pl: Any, table: Any, per_row: Any) -> Any:
    """(ts, owner) from a table's ``ts`` and each row's owners, the rows with none left out; None: none at all."""
    ts = pl.from_arrow(table.column("ts"))
    if not isinstance(ts, pl.Series) or not isinstance(ts.dtype, pl.Datetime):
        return None
    ts = ts.dt.replace_time_zone("UTC") if ts.dtype.time_zone is None else ts
    out = pl.DataFrame({"ts": ts.dt.convert_time_zone("UTC").dt.cast_time_unit("us"), "owner": per_row})
    out = out.filter(pl.col("owner").is_not_null())
    return out if out.height else None


def owners_per_row(pl: Any, table: Any) -> Any:
    """Each row's owners (a String Series, null where none), named as :func:`gpu_triage.fleet_history.owners.
    owner_ticks` names them (its GPU processes' owners, sorted, joined by " + "), computed on the processes'
    dictionary codes: each distinct combination of owner fields is named once by ProcSample.owner(), each
    tick's set of owners is a bit set OR-ed over its processes. None: no owner at all; NotImplemented: a file
    this path does not take (owner fields that are not strings, more than MAX_LABELS owners)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if "procs" not in table.column_names or "ts" not in table.column_names:
        return None
    procs = table.column("procs").combine_chunks()
    if not pa.types.is_list(procs.type) or not pa.types.is_struct(procs.type.value_type):
        return NotImplemented
    struct = procs.type.value_type
    have = [f for f in OWNER_FIELDS if struct.get_field_index(f) >= 0]
    if not have:
        return None
    values = procs.flatten()
    if any(not (pa.types.is_string(values.field(f).type) or pa.types.is_large_string(values.field(f).type))
           for f in have):
        return NotImplemented
    key, dictionaries = _process_keys(values, have)
    combos_enc = pc.dictionary_encode(pa.array(key))  # hashed: no sort of every process row
    combos, inverse = combos_enc.dictionary.to_pylist(), np.asarray(combos_enc.indices)
    labels, combo_bit = _combo_bits(combos, have, dictionaries)
    if not labels:
        return None
    if len(labels) > MAX_LABELS:
        return NotImplemented
    per_tick = _tick_masks(procs, combo_bit[inverse])
    masks_enc = pc.dictionary_encode(pa.array(per_tick))
    order = sorted(range(len(labels)), key=lambda i: labels[i])
    named = [None if m == 0 else " + ".join(labels[i] for i in order if m >> i & 1)
             for m in masks_enc.dictionary.to_pylist()]
    return pl.Series("owner", pa.DictionaryArray.from_arrays(masks_enc.indices, pa.array(named, pa.string()))
                     .cast(pa.string()), dtype=pl.String)


def _process_keys(values: Any, have: list[str]) -> tuple[Any, list[list[str]]]:
    """One int64 key per process row mixing its owner fields' dictionary codes (0: null), and each field's
    dictionary: the distinct combinations are then found by hashing the keys, not by comparing strings."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    key = np.zeros(len(values), dtype=np.int64)
    dictionaries = []
    for f in have:
        enc = pc.dictionary_encode(values.field(f))
        codes = np.asarray(pc.fill_null(pc.add(enc.indices.cast(pa.int64()), 1), 0))
        key = key * (len(enc.dictionary) + 1) + codes
        dictionaries.append(enc.dictionary.to_pylist())
    return key, dictionaries


def _combo_bits(combos: list[int], have: list[str], dictionaries: list[list[str]]) -> tuple[list[str], Any]:
    """The owners' labels, in order of first sight, and each combination's bit (0: no owner): each
    combination is decoded back to its fields and named once by ProcSample.owner(), as owner_ticks names it."""
    import numpy as np

    from gpu_triage.model import ProcSample

    labels: list[str] = []
    combo_bit = np.zeros(len(combos), dtype=np.int64)
    for c, k in enumerate(combos):
        fields: dict[str, str | None] = {}
        for f, words in zip(reversed(have), reversed(dictionaries), strict=True):
            k, code = divmod(k, len(words) + 1)
            fields[f] = words[code - 1] if code else None
        label = owner_label(ProcSample(0, 0, **fields).owner())  # type: ignore[arg-type]
        if label is None:
            continue
        if label not in labels:
            labels.append(label)
        combo_bit[c] = 1 << labels.index(label)
    return labels, combo_bit


def _tick_masks(procs: Any, proc_bits: Any) -> Any:
    """Each tick's owners as a bit set: its processes' bits OR-ed together (0 for a tick without processes)."""
    import numpy as np

    bits = np.append(proc_bits, 0)  # a trailing 0: an empty list at the end reduces over nothing
    offsets = np.asarray(procs.offsets)
    starts = np.minimum(offsets[:-1], len(bits) - 1)
    per_tick = np.bitwise_or.reduceat(bits, starts)
    per_tick[offsets[1:] == offsets[:-1]] = 0  # reduceat gives an empty list its next element: none here
    return per_tick
