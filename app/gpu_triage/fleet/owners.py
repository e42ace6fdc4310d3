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
    """host -> owner -> {"seconds", "bottlenecks": {bottleneck: share}} from the seconds each file's verdicts
    counted for the owners of their ticks (host, owner, bottleneck, seconds: :mod:`gpu_triage.fleet.perfile`);
    ticks with no owner are not in it."""
    import polars as pl

    if table.height == 0:
        return {}
    table = (
        table.group_by("host", "owner", "bottleneck")
        .agg(pl.col("seconds").sum())
        .with_columns(pl.col("seconds").sum().over("host", "owner").alias("total"))
        .sort(["host", "total", "seconds", "owner", "bottleneck"], descending=[False, True, True, False, False])
    )
    out: dict[str, dict[str, Any]] = {}
    for r in table.iter_rows(named=True):
        entry = out.setdefault(r["host"], {}).setdefault(r["owner"], {"seconds": r["total"], "bottlenecks": {}})
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
