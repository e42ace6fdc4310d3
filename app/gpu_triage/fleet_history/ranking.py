"""What to fix first: the summary's hosts and owners ranked by GPU-hours lost, each with the bottleneck that lost
the most and its knob, and each host's worst episodes (adjacent 5-minute windows of one bottleneck, merged).

Pure polars over the frames the files' parts add up to (:mod:`gpu_triage.fleet_history.summary`); GPU-seconds lost are
:mod:`gpu_triage.diagnosis.lost`'s, counted per tick by :mod:`gpu_triage.fleet_history.lost`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpu_triage.diagnosis.knobs import knob

WORST = 3  # worst episodes kept per host
WINDOW_US = 300_000_000  # the windows' length (perfile.WINDOW), in microseconds


def _h(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 3600.0, 4)


def _ranked(pl: Any, table: Any, key: str) -> Any:
    """Per ``key``: GPU-seconds lost (null: no figure, :func:`~gpu_triage.fleet_history.lost.lost_sum`) and
    seconds in all, and the bottleneck that lost the most (where none lost anything: the one of no figure, else
    by time) with its loss (``top_lost``); unordered (:func:`_worst_first`)."""
    from gpu_triage.fleet_history.lost import lost_sum

    per = table.group_by(key, "bottleneck").agg(pl.col("seconds").sum(), lost_sum(pl))
    top = (per.sort([pl.col("lost_s").fill_null(0.0), pl.col("lost_s").is_null(), "seconds", "bottleneck"],
                    descending=[True, True, True, False])
           .group_by(key, maintain_order=True).first()
           .select(key, "bottleneck", pl.col("lost_s").alias("top_lost")))
    totals = per.group_by(key).agg(lost_sum(pl), pl.col("seconds").sum())
    return totals.join(top, on=key)


def _worst_first(table: Any, key: str) -> Any:
    """Most lost first; no figure (null) after every figure, a real 0 included."""
    return table.sort(["lost_s", key], descending=[True, False], nulls_last=True)


def _top(r: dict[str, Any]) -> tuple[str, float | None]:
    """The row's bottleneck (``none`` where nothing was lost; the one of no figure where there is none) and its
    share of the loss (None: no figure)."""
    lost = r["lost_s"]
    if lost is None:
        return r["bottleneck"], None
    return (r["bottleneck"] if lost > 0 else "none"), (round(r["top_lost"] / lost, 4) if lost > 0 else 0.0)


def host_ranking(pl: Any, bottlenecks: Any) -> list[dict[str, Any]]:
    """Every host, most GPU-hours lost first, those of no figure (None) last: ``bottlenecks`` is (host,
    bottleneck, seconds, lost_s, gpu_s)."""
    gpu = bottlenecks.group_by("host").agg(pl.col("gpu_s").sum())
    out = []
    for r in _worst_first(_ranked(pl, bottlenecks, "host").join(gpu, on="host"), "host").iter_rows(named=True):
        b, share = _top(r)
        out.append({"host": r["host"], "gpu_hours_lost": _h(r["lost_s"]), "gpu_hours": _h(r["gpu_s"]),
                    "bottleneck": b, "share_of_lost": share, "knob": knob(b)})
    return out


def owner_ranking(pl: Any, owners: Any) -> list[dict[str, Any]]:
    """Every owner (a Slurm job, a pod, a container, a user) across hosts, most GPU-hours lost first, those of no
    figure last: a job spread over several hosts is one row, with its hosts. ``owners`` is (host, owner,
    bottleneck, seconds, lost_s)."""
    if owners.height == 0:
        return []
    hosts = owners.group_by("owner").agg(pl.col("host").unique().sort())
    out = []
    for r in _worst_first(_ranked(pl, owners, "owner").join(hosts, on="owner"), "owner").iter_rows(named=True):
        b, share = _top(r)
        out.append({"owner": r["owner"], "hosts": r["host"], "gpu_hours_lost": _h(r["lost_s"]),
                    "seconds": r["seconds"], "bottleneck": b, "share_of_lost": share, "knob": knob(b)})
    return out


def episodes(pl: Any, modes: Any, util: Any) -> Any:
    """Each host's episodes: runs of adjacent windows whose most-given bottleneck is the same, merged, with their
    GPU-hours lost (null: no figure) and mean GPU-Util (over the ticks where a job held the cards), the
    :data:`WORST` of each host first by GPU-hours lost (no figure after every figure), then by lowest GPU-Util;
    episodes of no bottleneck only on a host that has nothing else. ``modes``: (host, ts, bottleneck, seconds,
    lost_s); ``util``: (host, ts, util_pct, ticks)."""
    from gpu_triage.fleet_history.lost import lost_sum

    per = modes.group_by("host", "ts", "bottleneck").agg(pl.col("seconds").sum(), lost_sum(pl))
    windows = (per.sort(["host", "ts", "seconds", "bottleneck"], descending=[False, False, True, False])
               .group_by("host", "ts", maintain_order=True)
               .agg(pl.col("bottleneck").first(), lost_sum(pl), pl.col("seconds").sum()))
    windows = windows.join(util.select("host", "ts", "util_pct", "ticks"), on=["host", "ts"], how="left")
    us = pl.col("ts").dt.epoch("us")
    eps = (windows.sort("host", "ts")
           .with_columns(((pl.col("bottleneck") != pl.col("bottleneck").shift(1).over("host"))
                          | ((us - us.shift(1).over("host")) != WINDOW_US)).fill_null(True).alias("new"))
           .with_columns(pl.col("new").cum_sum().over("host").alias("episode"))
           .group_by("host", "episode")
           .agg(pl.col("ts").min().alias("start"), pl.col("ts").max().alias("last"), pl.col("bottleneck").first(),
                lost_sum(pl), pl.col("seconds").sum(),
                ((pl.col("util_pct") * pl.col("ticks")).sum()
                 / pl.col("ticks").filter(pl.col("util_pct").is_not_null()).sum()).fill_nan(None).alias("util_pct"))
           # an episode of no bottleneck is worth showing only on a host that has no other (its lowest GPU-Util)
           .with_columns((pl.col("bottleneck").is_in(["none"]) | pl.col("bottleneck").is_null()).alias("healthy"))
           .filter(~pl.col("healthy") | pl.col("healthy").all().over("host"))
           .sort(["host", "lost_s", "util_pct", "start"], descending=[False, True, False, False], nulls_last=True)
           .group_by("host", maintain_order=True).head(WORST))
    return eps


def episode_rows(pl: Any, eps: Any, host: str) -> list[dict[str, Any]]:
    """One host's worst episodes as the summary's JSON gives them (times ISO 8601 UTC)."""
    out = []
    for r in eps.filter(pl.col("host") == host).iter_rows(named=True):
        start = r["start"].astimezone(UTC)
        end = r["last"].astimezone(UTC).timestamp() + WINDOW_US / 1e6
        util = r["util_pct"]
        out.append({
            "start": start.isoformat().replace("+00:00", "Z"),  # the first window's start
            "end": datetime.fromtimestamp(end, UTC).isoformat().replace("+00:00", "Z"),  # the last window's end
            "seconds": round(r["seconds"], 3),  # the data in it (the windows' verdicts' seconds)
            "gpu_util_pct": None if util is None else round(float(util), 1),
            "bottleneck": r["bottleneck"],
            "gpu_hours_lost": _h(r["lost_s"]),
        })
    return out
