"""What one recording of a dataset says, read by a summary (``summary``) and by each file's share of it
(``perfile``): its host, its verdicts one every STRIDE_S seconds, its utilisation rows. Apart from both so that
neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.safetext import clean

STRIDE_S = 30.0  # seconds of data between two verdicts (see the module docstring)


def skip_reason(path: Path, why: str) -> str:
    """Why a file of a dataset is left out: the error's line without the path it starts with."""
    return why.removeprefix(f"{path}: ").removeprefix(f"{path} ")


def host_of(path: Path, fallback: str | None) -> str:
    """The ``host=`` partition of a file's path, else the recording's own host name, else its directory."""
    for part in reversed(path.parts[:-1]):
        if part.startswith("host="):  # a directory anyone with write access to the dataset may name
            return clean(part[5:])
    return clean(fallback or path.parent.name or "unknown")


@dataclass(slots=True)
class Span:
    host: str
    start: datetime
    end: datetime
    pattern: str
    bottleneck: str
    gpus: tuple[int, ...] = ()  # the cards the verdict names (what its GPU-hours lost are counted on)


def file_verdicts(path: Path, config: Config) -> tuple[str, list[Span]]:
    """The host of one recording and its verdict spans, one verdict every STRIDE_S seconds of data.

    The recording is streamed in columns as ``diagnose FILE`` streams it (:func:`~gpu_triage.diagnosis.
    offline.judge`): each verdict is the dashboard's raw verdict at that tick, from exactly the window a
    RollingWindow would hold. A gap in the recording ends a span (it is no bottleneck's time) and the
    window starts afresh after it, as in ``diagnose FILE``."""
    from gpu_triage.offline.judge import judge
    from gpu_triage.offline.timeline import first_start
    from gpu_triage.trace.batches import iter_batches

    src = iter_batches(path)
    host = host_of(path, src.host.hostname)
    if src.n == 0:
        return host, []
    nominal = _interval_of(src)
    jd = judge(src, config.thresholds, config.window_s, stride=max(1, round(STRIDE_S / nominal)))
    spans: list[Span] = []
    group = -1
    start = first_start(src, jd, 0)
    for p, g, v in zip(jd.points.tolist(), jd.group_of.tolist(), jd.raws, strict=True):
        if g != group:
            group = g
            start = first_start(src, jd, jd.starts[g])
        end = datetime.fromtimestamp(float(src.t[p]), UTC)
        spans.append(Span(host, start, end, v.pattern, v.bottleneck, tuple(int(g) for g in v.gpus)))
        start = end
    return host, spans


def _interval_of(src: Any) -> float:
    """The interval ``diagnose`` trusts for a recording (its metadata's unless the timestamps disagree)."""
    from gpu_triage.offline.judge import trusted_interval

    return trusted_interval(src.t, src.meta_interval_s)


def util_rows(pl: Any, lf: Any, host: str, lo: datetime, hi: datetime) -> Any:
    """One file's (host, ts, util, mem_frac) rows, or None when its cards carry no GPU-Util or memory.

    ``lf`` holds at least the file's ``ts`` and ``gpus`` (only the leaves read:
    :mod:`gpu_triage.fleet_history.perfile`).
    Read as the reader reads it: a value outside its range (GPU-Util past 100 %, a tick in year 9999) is no
    reading, a string or null-typed column is cast or left out. One scan of the whole dataset raised on the
    first file whose types differed from the others (a polars SchemaError traceback), and a year-9999 tick
    made the windows span millennia (a hang)."""
    schema = lf.collect_schema()
    gpus, ts = schema.get("gpus"), schema.get("ts")
    inner = getattr(gpus, "inner", None)
    need = {"util_pct", "mem_used_bytes", "mem_total_bytes"}
    if not isinstance(ts, pl.Datetime) or not isinstance(inner, pl.Struct) or not need <= {
        f.name for f in inner.fields
    }:
        return None
    stamp = pl.col("ts").dt.replace_time_zone("UTC") if ts.time_zone is None else pl.col("ts")
    field = pl.element().struct.field

    def num(name: str) -> Any:
        return field(name).cast(pl.Float64, strict=False)

    util = pl.when(num("util_pct").is_between(0.0, 100.0)).then(num("util_pct"))
    frac = num("mem_used_bytes") / num("mem_total_bytes")
    return (
        lf.select(
            pl.lit(host, dtype=pl.String).alias("host"),
            stamp.dt.convert_time_zone("UTC").dt.cast_time_unit("us").alias("ts"),
            pl.col("gpus").list.eval(util).list.mean().cast(pl.Float64).alias("util"),
            pl.col("gpus").list.eval(pl.when(frac.is_finite()).then(frac)).list.max().cast(pl.Float64)
            .alias("mem_frac"),
        )
        .filter(pl.col("ts").is_between(lo, hi))
        .collect()
    )
