"""``gpu-triage compare BEFORE AFTER``: did the tuning change help, per card and overall?

The figures are the ones the method reads: GPU-Util (mean and its spread p5/p95), SM activity (GPU-Util
counts any kernel, SM active says how much of the chip worked), the share of stalled time, the share of
time in each diagnosis, link traffic, and the host (CPU busy, iowait, disks). Each is shown before, after,
and the change: in percentage points for a percentage (a relative change of a percentage, "+187 %" for
34 -> 97.6 % GPU-Util, reads as nonsense), absolute and relative for the rest. The report leads with one line,
what changed (:func:`headline`), and the text hides what did not change (:func:`describe`: below the noise
floor, which is above the display precision) unless asked; ``--json`` keeps every figure, with its unit
and whether it changed. Metadata that differs (driver, env vars, interval, cards, host) is listed too: a
comparison is only fair when the runs differ in the change being tested.

Aggregations run in polars on the Arrow tables (``explode("gpus").unnest("gpus")``), not on Python ticks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from gpu_triage.compare import promise
from gpu_triage.compare.changes import describe
from gpu_triage.compare.jobs import compare_job
from gpu_triage.compare.trim import trim_idle
from gpu_triage.config import Config
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.safetext import clean
from gpu_triage.trace.reader import TraceFile

# (key, label) in display order. Keys are the stable JSON keys.
CARD_METRICS: tuple[tuple[str, str], ...] = (
    ("util_mean_pct", "GPU-Util mean %"),
    ("util_p5_pct", "GPU-Util p5 %"),
    ("util_p95_pct", "GPU-Util p95 %"),
    ("sm_active_mean_pct", "SM active mean %"),
    ("stalled_share_pct", "time stalled %"),
    ("mem_used_mean_bytes", "memory used mean"),
    ("pcie_mean_bytes_per_s", "PCIe tx+rx mean"),
    ("nvlink_mean_bytes_per_s", "NVLink tx+rx mean"),
    ("power_mean_w", "power mean W"),
)
HOST_METRICS: tuple[tuple[str, str], ...] = (
    ("cpu_busy_mean_pct", "CPU busy mean %"),
    ("cpu_busiest_core_mean_pct", "busiest core mean %"),
    ("iowait_mean_pct", "iowait mean %"),
    ("disk_busy_mean_pct", "disk busy mean %"),
    ("busiest_disk_mean_pct", "busiest disk mean %"),
)


def _num(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) or math.isinf(f) else f


def _gpu_aggs(stall_pct: float) -> list[pl.Expr]:
    util = pl.col("util_pct")
    return [
        util.mean().alias("util_mean_pct"),
        util.quantile(0.05, interpolation="linear").alias("util_p5_pct"),
        util.quantile(0.95, interpolation="linear").alias("util_p95_pct"),
        pl.col("sm_active_pct").mean().alias("sm_active_mean_pct"),
        ((util < stall_pct).cast(pl.Float64).mean() * 100).alias("stalled_share_pct"),
        pl.col("mem_used_bytes").cast(pl.Float64).mean().alias("mem_used_mean_bytes"),
        (pl.col("pcie_tx_bytes_per_s") + pl.col("pcie_rx_bytes_per_s")).mean().alias("pcie_mean_bytes_per_s"),
        (pl.col("nvlink_tx_bytes_per_s") + pl.col("nvlink_rx_bytes_per_s"))
        .mean()
        .alias("nvlink_mean_bytes_per_s"),
        pl.col("power_w").mean().alias("power_mean_w"),
    ]


CARD_COLUMNS = ["index", "util_pct", "sm_active_pct", "mem_used_bytes", "pcie_tx_bytes_per_s",
              "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s", "power_w"]
COLUMNS = ["ts", "gpus", "cpu_pct", "iowait_pct", "disks"]  # what the figures read of a recording


@dataclass(slots=True)
class Parts:
    """The rows the figures are computed from, small enough to keep for a whole dataset: one row per card
    and tick (the fields of CARD_COLUMNS), one per tick (CPU mean, busiest core, iowait, busiest disk), one
    per disk and tick (busy %)."""

    gpus: pl.DataFrame
    ticks: pl.DataFrame
    disks: pl.DataFrame


def _field(df: pl.DataFrame, column: str, name: str) -> pl.Expr:
    """A field of a list-of-structs column after ``explode``; null where the recording lacks it (the reader
    accepts a card or disk struct without its optional fields: polars raised StructFieldNotFoundError)."""
    inner = getattr(df.schema[column], "inner", None)
    if isinstance(inner, pl.Struct) and name in {f.name for f in inner.fields}:
        return pl.col(column).struct.field(name)
    return pl.lit(None, dtype=pl.Float64).alias(name)


def project(df: pl.DataFrame, host: str | None = None) -> Parts:
    """The :class:`Parts` of recorded rows (columns :data:`COLUMNS`); ``host`` tags the cards' rows."""
    gpus = (
        df.select("gpus")
        .explode("gpus")
        .drop_nulls("gpus")
        .select([_field(df, "gpus", f) for f in CARD_COLUMNS])
        .with_columns(pl.col(c).cast(pl.Float64) for c in CARD_COLUMNS if c != "index")
        .with_columns(pl.col("index").cast(pl.Int64), pl.lit(host, dtype=pl.Categorical).alias("host"))
    )
    disks = (
        df.with_row_index("row")
        .select("row", "disks")
        .explode("disks")
        .drop_nulls("disks")
        .select("row", _field(df, "disks", "busy_pct").cast(pl.Float64))
    )
    busiest = disks.group_by("row").agg(pl.col("busy_pct").max().alias("busiest_disk"))
    ticks = (
        df.with_row_index("row")
        .select(
            "row",
            pl.col("cpu_pct").list.mean().cast(pl.Float64).alias("mean"),
            pl.col("cpu_pct").list.max().cast(pl.Float64).alias("max"),
            pl.col("iowait_pct").cast(pl.Float64),
        )
        .join(busiest, on="row", how="left")
        .drop("row")
    )
    return Parts(gpus, ticks, disks.drop("row"))


def concat_parts(parts: list[Parts]) -> Parts:
    def cat(frames: list[pl.DataFrame]) -> pl.DataFrame:
        return pl.concat(frames, how="vertical_relaxed")

    return Parts(cat([p.gpus for p in parts]), cat([p.ticks for p in parts]), cat([p.disks for p in parts]))


def aggregate(parts: Parts, thresholds: Thresholds, by_host: bool = False) -> dict[str, Any]:
    """Per-card, overall and host figures (None where the data has no value). ``by_host``: cards are
    ``host:index`` (a side that spans several hosts), and each host's overall figures are given too."""
    gpus = parts.gpus
    aggs = _gpu_aggs(thresholds.stall_util_pct)
    overall_row = gpus.select(aggs).to_dicts()[0] if gpus.height else {}
    cards: dict[str, dict[str, float | None]] = {}
    hosts: dict[str, dict[str, float | None]] = {}
    if gpus.height:
        keys = ["host", "index"] if by_host else ["index"]
        per_card = gpus.group_by(keys).agg(aggs).sort(keys)
        for row in per_card.to_dicts():
            idx = row.pop("index")
            name = f"{row.pop('host')}:{idx}" if by_host else str(idx)
            cards[name] = {k: _num(row.get(k)) for k, _ in CARD_METRICS}
        if by_host:
            for row in gpus.group_by("host").agg(aggs).sort("host").to_dicts():
                hosts[str(row.pop("host"))] = {k: _num(row.get(k)) for k, _ in CARD_METRICS}
    ticks, disks = parts.ticks, parts.disks
    host = {
        "cpu_busy_mean_pct": _num(ticks["mean"].mean()) if ticks.height else None,
        "cpu_busiest_core_mean_pct": _num(ticks["max"].mean()) if ticks.height else None,
        "iowait_mean_pct": _num(ticks["iowait_pct"].mean()) if ticks.height else None,
        "disk_busy_mean_pct": _num(disks["busy_pct"].mean()) if disks.height else None,
        "busiest_disk_mean_pct": _num(ticks["busiest_disk"].mean()) if disks.height else None,
    }
    out = {
        "overall": {k: _num(overall_row.get(k)) for k, _ in CARD_METRICS},
        "cards": cards,
        "host": host,
    }
    if by_host:
        out["hosts"] = hosts
    return out


def summarise(trace: TraceFile, thresholds: Thresholds) -> dict[str, Any]:
    """Per-card, overall and host figures of one recording (None where the data has no value)."""
    df = pl.from_arrow(trace.table.select(COLUMNS))
    assert isinstance(df, pl.DataFrame)
    return aggregate(project(df), thresholds)


def diagnosis_shares(trace: TraceFile, config: Config,
                     progress: Callable[[int, int], None] | None = None) -> dict[str, float] | None:
    """Share of the recording's time (0-100) per ``pattern/bottleneck``; gaps (nothing recorded) count
    for no diagnosis.

    The one place compare touches the diagnosis: gpu_triage.offline, streamed over the table.
    """
    return _shares(_timeline(trace, config, progress))


def _timeline(trace: TraceFile, config: Config, progress: Callable[[int, int], None] | None = None) -> Any:
    from gpu_triage.offline.timeline import diagnose_trace
    from gpu_triage.trace.batches import batches_of

    return diagnose_trace(batches_of(trace), config.thresholds, config.window_s, progress)


def _shares(timeline: Any) -> dict[str, float]:
    return segment_shares(timeline.segments)


def segment_shares(segments: Iterable[Any]) -> dict[str, float]:
    """Share of the segments' time (0-100) per ``pattern/bottleneck``."""
    durations: dict[str, float] = {}
    for seg in segments:
        key = f"{seg.pattern}/{seg.bottleneck}"
        durations[key] = durations.get(key, 0.0) + max(_segment_seconds(seg), 0.0)
    total = sum(durations.values())
    if total <= 0:
        return {}
    return {k: 100.0 * v / total for k, v in sorted(durations.items())}


def _segment_seconds(seg: Any) -> float:
    return float((seg.end - seg.start).total_seconds())


def run_metadata(trace: TraceFile) -> dict[str, Any]:
    h = trace.host
    cards = sorted({g.index for t in trace.ticks(0, 1) for g in t.gpus})
    out: dict[str, Any] = {
        "hostname": h.hostname,
        "driver_version": h.driver_version,
        "cuda_driver_version": h.cuda_driver_version,
        "cpu_count": h.cpu_count,
        "cards": len(h.gpus) if h.gpus else len(cards),
        "card_names": sorted({g.name for g in h.gpus if g.name}) or None,
        "interval_s": trace.interval_s,
        "tool_version": h.extra.get("tool_version"),
        "kernel": h.extra.get("kernel"),
        "source": h.extra.get("source"),
    }
    env = h.extra.get("env")
    if isinstance(env, dict):
        for k, v in env.items():
            out[f"env.{k}"] = v
    return out


def metadata_differences(before: TraceFile, after: TraceFile) -> dict[str, dict[str, Any]]:
    return differences(run_metadata(before), run_metadata(after))


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The keys whose values differ between two metadata dicts, in ``a``'s order then ``b``'s new keys."""
    diffs: dict[str, dict[str, Any]] = {}
    for key in list(a) + [k for k in b if k not in a]:
        if a.get(key) != b.get(key):
            diffs[key] = {"before": a.get(key), "after": b.get(key)}
    return diffs


def change_of(before: float | None, after: float | None) -> dict[str, float | None]:
    change = None if before is None or after is None else after - before
    pct = None if change is None or not before else 100.0 * change / abs(before)
    return {"before": before, "after": after, "change": change, "change_pct": pct}


def compare_traces(before: TraceFile, after: TraceFile, config: Config,
                   progress: Callable[[str], Callable[[int, int], None] | None] | None = None,
                   *, trim: bool = True) -> dict[str, Any]:
    """The whole comparison as a JSON-ready dict with stable keys (see docs/recording.md).

    ``progress(label)`` gives the progress callback of each file's diagnosis (or None). Each run's idle
    start and end (gpu_triage.compare.trim) are left out first, and said; ``trim=False`` compares them whole."""
    trim_a = trim_b = None
    if trim:
        before, trim_a = trim_idle(before, config.thresholds.idle_util_pct)
        after, trim_b = trim_idle(after, config.thresholds.idle_util_pct)
    sa, sb = summarise(before, config.thresholds), summarise(after, config.thresholds)
    card_ids = sorted(set(sa["cards"]) | set(sb["cards"]), key=int)
    empty: dict[str, float | None] = {}
    tla = _timeline(before, config, progress(f"diagnosing {before.path.name}") if progress else None)
    tlb = _timeline(after, config, progress(f"diagnosing {after.path.name}") if progress else None)
    da, db = _shares(tla), _shares(tlb)
    diagnosis = {k: change_of(da.get(k, 0.0), db.get(k, 0.0)) for k in sorted(set(da) | set(db))}
    job = compare_job(before, after, config.thresholds.idle_util_pct)  # samples/s first: the point of tuning
    overall = {k: change_of(sa["overall"].get(k), sb["overall"].get(k)) for k, _ in CARD_METRICS}
    return describe({
        "before": {**_file_info(before, tla), "trimmed": trim_a.to_json() if trim_a else None},
        "after": {**_file_info(after, tlb), "trimmed": trim_b.to_json() if trim_b else None},
        "job": job,
        # what BEFORE's verdict promised fixing it would give, beside the gain measured
        "prediction": promise.check(tla, job, overall, _job_rates(before)),
        "overall": overall,
        "cards": {
            c: {
                k: change_of(sa["cards"].get(c, empty).get(k), sb["cards"].get(c, empty).get(k))
                for k, _ in CARD_METRICS
            }
            for c in card_ids
        },
        "host": {k: change_of(sa["host"].get(k), sb["host"].get(k)) for k, _ in HOST_METRICS},
        "diagnosis": diagnosis,
        "metadata_differences": metadata_differences(before, after),
    })


def _file_info(trace: TraceFile, timeline: Any) -> dict[str, Any]:
    """Duration is the recorded time: first tick's start to last tick's end, less the gaps (nothing
    recorded); the interval is the one the timestamps bear out."""
    return {
        "path": clean(str(trace.path)),
        "ticks": trace.n,
        "duration_s": timeline.recorded_s,
        "gaps": len(timeline.gaps),
        "gap_s": sum(g.seconds for g in timeline.gaps),
        "interval_s": timeline.interval_s,
        "recovered": trace.recovered,
        "warnings": list(timeline.warnings),  # also printed on stderr by the command
    }


def _job_rates(trace: TraceFile) -> list[float | None]:
    """Each tick's samples/s from the job's clock (None where it had none): the one field of the ``job`` column
    the promise's noise reads, not the whole column turned into Python once more."""
    col = trace.table.column("job")
    if not pa.types.is_struct(col.type) or col.type.get_field_index("samples_per_s") < 0:
        return []
    return list(pc.struct_field(col, "samples_per_s").to_pylist())
