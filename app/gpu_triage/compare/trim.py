"""The idle start and end of a run, left out before two runs are compared.

A recording usually starts before the job's first step (imports, data loading, NCCL set-up) and stops some
time after its last (teardown, ranks waiting on each other to exit). Those stretches are no part of the
change being tested, yet they weigh in every figure: on the real starved/fixed pair of H200 recordings the
starved run's last 30 s, both ranks spinning in a collective after the job's last step, made the headline "a
hung collective is no longer the bottleneck" and put "time stalled +15 pp" beside a 3.4x speed-up.

A tick works when the job made progress in it (samples or steps per second above 0), where the recording
has the job's figures; without them, when any card's GPU-Util reaches the idle threshold. Only the leading
and the trailing ticks that do not work are left out; a stall in the middle of the run is part of the run.
A run in which no tick works is compared whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from gpu_triage.trace.reader import TraceFile


@dataclass(frozen=True, slots=True)
class Trim:
    """What was left out of one side: the ticks and seconds before its first working tick and after its
    last, and what "working" was read from."""

    start_ticks: int
    end_ticks: int
    start_s: float
    end_s: float
    by: str  # what "no work" was read from, in words

    def to_json(self) -> dict[str, object]:
        return {"start_ticks": self.start_ticks, "end_ticks": self.end_ticks, "start_s": round(self.start_s, 3),
                "end_s": round(self.end_s, 3), "by": self.by}


def _struct_field(df: pl.DataFrame, column: str, name: str) -> pl.Expr:
    dtype = df.schema.get(column)
    fields = {f.name for f in dtype.fields} if isinstance(dtype, pl.Struct) else set()
    return pl.col(column).struct.field(name) if name in fields else pl.lit(None, dtype=pl.Float64)


def working(trace: TraceFile, idle_util_pct: float) -> tuple[np.ndarray, str]:
    """Per tick, whether it works (see the module), and what that was read from."""
    names = trace.table.column_names
    df = pl.from_arrow(trace.table.select([c for c in ("gpus", "job") if c in names]))
    assert isinstance(df, pl.DataFrame)
    if "job" in names:
        rates = df.select(
            pl.max_horizontal(_struct_field(df, "job", "samples_per_s").cast(pl.Float64),
                              _struct_field(df, "job", "steps_per_s").cast(pl.Float64)).alias("rate")
        )["rate"]
        if rates.is_not_null().any():
            return (rates.fill_null(0.0) > 0).to_numpy(), "the job made no progress"
    rows = df.with_row_index("row").select("row", "gpus").explode("gpus").drop_nulls("gpus")
    inner = getattr(df.schema["gpus"], "inner", None)
    has_util = isinstance(inner, pl.Struct) and "util_pct" in {f.name for f in inner.fields}
    busy = np.zeros(trace.n, dtype=bool)
    if has_util and rows.height:
        top = (rows.select("row", pl.col("gpus").struct.field("util_pct").cast(pl.Float64).alias("u"))
               .group_by("row").agg(pl.col("u").max()))
        hit = top.filter(pl.col("u") >= idle_util_pct)["row"].to_numpy()
        busy[hit.astype(np.int64)] = True
    return busy, f"no card at {idle_util_pct:g} % GPU-Util"


def trim_idle(trace: TraceFile, idle_util_pct: float) -> tuple[TraceFile, Trim | None]:
    """``trace`` without its idle start and end, and what was left out (None: nothing was)."""
    works, by = working(trace, idle_util_pct)
    if not works.any():
        return trace, None
    first, last = int(np.argmax(works)), int(trace.n - 1 - np.argmax(works[::-1]))
    if first == 0 and last == trace.n - 1:
        return trace, None
    ts = trace.timestamps
    trimmed = TraceFile(trace.path, trace.table.slice(first, last - first + 1), trace.host, trace.interval_s,
                        recovered=trace.recovered, notices=trace.notices, out_of_range=trace.out_of_range,
                        duplicates_dropped=trace.duplicates_dropped, reordered=trace.reordered)
    # each tick left out stands for the interval up to the next one kept (or after the last one kept)
    return trimmed, Trim(first, trace.n - 1 - last, float(ts[first] - ts[0]), float(ts[-1] - ts[last]), by)
