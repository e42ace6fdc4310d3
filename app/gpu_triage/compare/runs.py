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
from pathlib import Path
from typing import Any

import polars as pl

from gpu_triage.compare.jobs import compare_job, render_job, scaling_line
from gpu_triage.config import Config
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.trace.reader import TraceFile
from gpu_triage.trace.stream import unfinished_line
from gpu_triage.units import fmt_bytes

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
_BYTES_KEYS = {"mem_used_mean_bytes", "pcie_mean_bytes_per_s", "nvlink_mean_bytes_per_s"}


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


def _metadata(trace: TraceFile) -> dict[str, Any]:
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
    return differences(_metadata(before), _metadata(after))


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The keys whose values differ between two metadata dicts, in ``a``'s order then ``b``'s new keys."""
    diffs: dict[str, dict[str, Any]] = {}
    for key in list(a) + [k for k in b if k not in a]:
        if a.get(key) != b.get(key):
            diffs[key] = {"before": a.get(key), "after": b.get(key)}
    return diffs


def _change(before: float | None, after: float | None) -> dict[str, float | None]:
    change = None if before is None or after is None else after - before
    pct = None if change is None or not before else 100.0 * change / abs(before)
    return {"before": before, "after": after, "change": change, "change_pct": pct}


# A change smaller than these reads as unchanged. Percentages: 1 point (NVML's utilisation samples are whole
# per cent, and a mean shown to a tenth moving by less than a point is the sampling, not the run). The rest:
# 2 % of the larger side (two runs of the same job differ by about that in throughput, power and rates),
# which also covers the display precision (a change that prints as 0.0 or -0 B is far below it).
PP_FLOOR = 1.0
REL_FLOOR_PCT = 2.0
_UNITS = {"samples_per_s": "samples/s", "steps_per_s": "steps/s", "step_time_s": "s", "power_mean_w": "W"}


def unit_of(key: str) -> str:
    """The unit of a compared figure, by its key: "%", "bytes", "bytes/s", "W", "samples/s", "steps/s", "s"."""
    if key in _UNITS:
        return _UNITS[key]
    if key.endswith("_pct"):
        return "%"
    if key.endswith("_bytes_per_s"):
        return "bytes/s"
    return "bytes" if key.endswith("_bytes") else ""


def changed(c: dict[str, Any], unit: str, floors: float = 1.0) -> bool:
    """Whether a before/after pair differs by more than its noise floor (a figure only one side has did);
    ``floors``: that many noise floors."""
    before, after = c.get("before"), c.get("after")
    if before is None or after is None:
        return (before is None) != (after is None)
    if unit == "%":
        return abs(after - before) >= PP_FLOOR * floors
    scale = max(abs(before), abs(after))
    return scale > 0 and abs(after - before) >= scale * REL_FLOOR_PCT * floors / 100.0


def _describe(rows: dict[str, dict[str, Any]] | None, unit: Callable[[str], str]) -> None:
    for key, c in (rows or {}).items():
        u = unit(key)
        c["unit"] = u
        c["change_unit"] = "pp" if u == "%" else u
        c["changed"] = changed(c, u)


def describe(result: dict[str, Any]) -> dict[str, Any]:
    """Adds to each figure of a comparison (in place) its ``unit``, the ``change_unit`` ("pp" for a
    percentage) and whether it ``changed`` beyond the noise floor, then the ``headline``; returns it."""
    if result.get("job"):
        _describe(result["job"]["metrics"], unit_of)
    for block in ("overall", "host"):
        _describe(result[block], unit_of)
    for group in ("cards", "hosts"):
        for rows in (result.get(group) or {}).values():
            _describe(rows, unit_of)
    _describe(result.get("diagnosis"), lambda _k: "%")
    result["headline"] = headline(result)
    return result


BOTTLENECK_NAMES = {
    "data_pipeline": "the input pipeline",
    "storage_io": "storage I/O",
    "communication": "communication between the cards",
    "memory_idle": "memory held on idle cards",
    "launch_overhead": "kernel launch overhead",
    "h2d_copy": "host-to-device copies",
    "stall_unexplained": "a stall in the job itself",
    "placement": "every rank on one card",
    "imbalance": "unequal work across the cards",
    "hung_collective": "a hung collective",
    "unexplained": "a wait no rule explains",
}
DOMINANT_MIN_PCT = 10.0  # a bottleneck for less of the time than this is not "the" bottleneck of a run


def _bottleneck_shares(diagnosis: dict[str, dict[str, Any]], side: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, c in diagnosis.items():
        b = key.rpartition("/")[2]
        if b not in ("none", "start_up") and c.get(side) is not None:
            out[b] = out.get(b, 0.0) + float(c[side])
    return out


def _dominant(shares: dict[str, float]) -> tuple[str | None, float]:
    if not shares:
        return None, 0.0
    b = max(shares, key=shares.__getitem__)
    return (b, shares[b]) if shares[b] >= DOMINANT_MIN_PCT else (None, 0.0)


def bottleneck_change(diagnosis: dict[str, dict[str, Any]] | None) -> str:
    """What happened to the dominant bottleneck (the one the most time went to), in a few words."""
    if diagnosis is None:
        return "no diagnosis in this installation"
    b0, s0 = _dominant(_bottleneck_shares(diagnosis, "before"))
    b1, s1 = _dominant(_bottleneck_shares(diagnosis, "after"))

    def name(b: str) -> str:
        return BOTTLENECK_NAMES.get(b, b)

    if b0 is None and b1 is None:
        return "no bottleneck before or after"
    if b1 is None:
        return f"{name(str(b0))} is no longer the bottleneck ({s0:.0f} % of the time before)"
    if b0 is None:
        return f"{name(b1)} became the bottleneck ({s1:.0f} % of the time)"
    if b0 != b1:
        return f"the bottleneck moved from {name(b0)} to {name(b1)} ({s1:.0f} % of the time)"
    if abs(s1 - s0) >= PP_FLOOR:
        return f"{name(b0)} is still the bottleneck, {s0:.0f} -> {s1:.0f} % of the time"
    return f"{name(b0)} is still the bottleneck ({s1:.0f} % of the time)"


def _rows(result: dict[str, Any]) -> Iterable[dict[str, Any]]:
    if result.get("job"):
        yield from result["job"]["metrics"].values()
    for block in ("overall", "host", "diagnosis"):
        yield from (result.get(block) or {}).values()
    for group in ("cards", "hosts"):
        for rows in (result.get(group) or {}).values():
            yield from rows.values()


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """One line, what changed: the job's samples/s when both sides have it, else the cards' mean GPU-Util,
    and what happened to the dominant bottleneck. ``basis``: the figure it leads with."""
    if not any(c.get("changed") for c in _rows(result)):
        return {"text": f"no change: every figure is within its noise floor ({PP_FLOOR:g} pp for percentages, "
                        f"{REL_FLOOR_PCT:g} % for the rest)", "basis": None, "changed": False}
    job = result.get("job")
    sps = job["metrics"]["samples_per_s"] if job else None
    if sps and sps.get("before") and sps.get("after"):
        basis = "samples_per_s"
        lead = (f"samples/s {sps['change_pct']:+.0f} % ({sps['before']:.0f} -> {sps['after']:.0f})" if sps["changed"]
                else f"samples/s unchanged ({sps['after']:.0f})")
    else:
        basis = "util_mean_pct"
        u = result["overall"]["util_mean_pct"]
        if u.get("before") is None or u.get("after") is None:
            lead = "GPU-Util n/a"
        elif u["changed"]:
            lead = f"GPU-Util {u['change']:+.0f} pp ({u['before']:.0f} -> {u['after']:.0f} %)"
        else:
            lead = f"GPU-Util unchanged ({u['after']:.0f} %)"
    why = bottleneck_change(result.get("diagnosis"))
    if job and job.get("scaling"):  # runs on different card counts: how well the cards added up is the news
        why = f"{scaling_line(job['scaling'])}; {why}"
    return {"text": f"{lead}: {why}", "basis": basis, "changed": True}


def compare_traces(before: TraceFile, after: TraceFile, config: Config,
                   progress: Callable[[str], Callable[[int, int], None] | None] | None = None) -> dict[str, Any]:
    """The whole comparison as a JSON-ready dict with stable keys (see docs/recording.md).

    ``progress(label)`` gives the progress callback of each file's diagnosis (or None)."""
    sa, sb = summarise(before, config.thresholds), summarise(after, config.thresholds)
    card_ids = sorted(set(sa["cards"]) | set(sb["cards"]), key=int)
    empty: dict[str, float | None] = {}
    tla = _timeline(before, config, progress(f"diagnosing {before.path.name}") if progress else None)
    tlb = _timeline(after, config, progress(f"diagnosing {after.path.name}") if progress else None)
    da, db = _shares(tla), _shares(tlb)
    diagnosis = {k: _change(da.get(k, 0.0), db.get(k, 0.0)) for k in sorted(set(da) | set(db))}
    return describe({
        "before": _file_info(before, tla),
        "after": _file_info(after, tlb),
        "job": compare_job(before, after, config.thresholds.idle_util_pct),  # samples/s first: the point of tuning
        "overall": {k: _change(sa["overall"].get(k), sb["overall"].get(k)) for k, _ in CARD_METRICS},
        "cards": {
            c: {
                k: _change(sa["cards"].get(c, empty).get(k), sb["cards"].get(c, empty).get(k))
                for k, _ in CARD_METRICS
            }
            for c in card_ids
        },
        "host": {k: _change(sa["host"].get(k), sb["host"].get(k)) for k, _ in HOST_METRICS},
        "diagnosis": diagnosis,
        "metadata_differences": metadata_differences(before, after),
    })


def _file_info(trace: TraceFile, timeline: Any) -> dict[str, Any]:
    """Duration is the recorded time: first tick's start to last tick's end, less the gaps (nothing
    recorded); the interval is the one the timestamps bear out."""
    return {
        "path": str(trace.path),
        "ticks": trace.n,
        "duration_s": timeline.recorded_s,
        "gaps": len(timeline.gaps),
        "gap_s": sum(g.seconds for g in timeline.gaps),
        "interval_s": timeline.interval_s,
        "recovered": trace.recovered,
        "warnings": list(timeline.warnings),  # also printed on stderr by the command
    }


def _fmt_value(key: str, v: float | None, signed: bool = False, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if key in _BYTES_KEYS:
        return fmt_bytes(v, per_s="per_s" in key, signed=signed, digits=2)
    sign = "+" if signed and v > 0 else ""
    text = f"{sign}{v:.1f}"
    return f"{text} pp" if unit == "pp" and signed else text


def _fmt_pct(c: dict[str, Any]) -> str:
    if c.get("unit") == "%":
        return ""  # a percentage's change is in points, in the change column
    v = c.get("change_pct")
    return "n/a" if v is None else f"{v:+.0f}%"


def render_text(result: dict[str, Any], show_all: bool = False) -> str:
    """Aligned plain text, readable in a terminal and through a pipe: the headline first, then what changed
    (everything with ``show_all``), per card only for the cards that changed."""
    from gpu_triage.offline.render import human_duration

    if "headline" not in result:
        describe(result)
    lines: list[str] = [result["headline"]["text"], ""]
    for side in ("before", "after"):
        f = result[side]
        rec = ", recovered stream" if f["recovered"] else ""
        gaps = ""
        if f.get("gaps"):
            gaps = f", {f['gaps']} gap{'s' if f['gaps'] > 1 else ''} of {human_duration(f['gap_s'])} left out"
        files = ""
        if "files" in f:  # a dataset side (gpu_triage.fleet.compare)
            hosts = f["hosts"]
            files = (f"{f['files']} file{'s' * (f['files'] != 1)} from "
                     f"{hosts[0] if len(hosts) == 1 else f'{len(hosts)} hosts'}, ")
        lines.append(
            f"{side:<7} {f['path']}  ({files}{f['ticks']} ticks, {human_duration(f['duration_s'])} at "
            f"{f['interval_s']:g} s{gaps}{rec})"
        )
        for skip in f.get("skipped", []):
            lines.append(f"        left out (unreadable): {skip['path']}: {skip['reason']}")
        for p in f.get("leftovers", []):
            lines.append(f"        not read: {unfinished_line(Path(p))}")
    if not show_all and not result["headline"]["changed"]:
        lines.append("")
        lines.extend(_metadata_lines(result["metadata_differences"]))
        lines.append("")
        lines.append("(--all shows every figure)")
        return "\n".join(lines)
    lines.extend(render_job(result.get("job"), show_all))
    hidden = False

    def block(title: str, rows: dict[str, dict[str, Any]], labels: Callable[[str], str]) -> None:
        nonlocal hidden
        shown = {k: c for k, c in rows.items() if show_all or c.get("changed", True)}
        same = [labels(k) for k in rows if k not in shown]
        hidden = hidden or bool(same)
        lines.append("")
        if not shown:
            lines.append(f"{title}: unchanged")
            return
        w = max([26, *(len(labels(k)) + 2 for k in shown)])  # a diagnosis key can be longer than a label
        lines.append(title)
        lines.append(f"  {'':<{w}}{'before':>13}{'after':>13}{'change':>14}{'%':>8}")
        for key, c in shown.items():
            lines.append(
                f"  {labels(key):<{w}}{_fmt_value(key, c['before']):>13}{_fmt_value(key, c['after']):>13}"
                f"{_fmt_value(key, c['change'], True, c.get('change_unit', '')):>14}{_fmt_pct(c):>8}".rstrip()
            )
        if same:
            lines.append(f"  unchanged: {', '.join(same)}")

    card_labels = dict(CARD_METRICS)
    block("all cards", result["overall"], card_labels.__getitem__)
    if "hosts" in result:  # a dataset side over several hosts: a block per host, the cards in --json
        for host, rows in result["hosts"].items():
            block(f"all cards of {host}", rows, card_labels.__getitem__)
    elif len(result["cards"]) > 1:  # with one card its block would repeat "all cards"
        same_cards, like_all = [], []
        for card, rows in result["cards"].items():
            if show_all:
                block(f"card {card}", rows, card_labels.__getitem__)
            elif not any(c.get("changed", True) for c in rows.values()):
                same_cards.append(card)
            elif _like(rows, result["overall"]):
                like_all.append(card)
            else:
                block(f"card {card}", rows, card_labels.__getitem__)
        for cards, what in ((like_all, "as all cards"), (same_cards, "unchanged")):
            if cards:
                hidden = True
                lines.append("")
                lines.append(f"card{'s' * (len(cards) > 1)} {', '.join(cards)}: {what}")
    block("host", result["host"], dict(HOST_METRICS).__getitem__)
    if result["diagnosis"] is None:
        lines.append("")
        lines.append("diagnosis: n/a (the offline diagnosis is not available in this installation)")
    else:
        block("diagnosis: share of time %", result["diagnosis"], lambda k: k)
    lines.append("")
    lines.extend(_metadata_lines(result["metadata_differences"]))
    if hidden:
        lines.append("")
        lines.append(f"(left out: changes under {PP_FLOOR:g} pp, or {REL_FLOOR_PCT:g} % for the rest; --all shows "
                     "every figure)")
    return "\n".join(lines)


def _like(rows: dict[str, dict[str, Any]], overall: dict[str, dict[str, Any]]) -> bool:
    """Whether a card changed as all cards did: the same figures changed, each by the change of all cards
    within twice the noise floor (a difference of two changes holds the noise of both). Its table would
    repeat the "all cards" block (eight cards that changed alike); a level that differs but did not change
    is no news of the comparison."""
    for key, c in rows.items():
        o = overall.get(key, {})
        if bool(c.get("changed")) != bool(o.get("changed")):
            return False
        if c.get("changed") and changed({"before": c.get("change"), "after": o.get("change")},
                                        c.get("unit", unit_of(key)), floors=2.0):
            return False
    return True


def _metadata_lines(diffs: dict[str, dict[str, Any]]) -> list[str]:
    if not diffs:
        return ["metadata: the same (driver, env vars, interval, cards, host)"]
    return ["metadata that differs", *(f"  {key}: {d['before']!r} -> {d['after']!r}" for key, d in diffs.items())]
