"""The codec between a tick and one trace row: :func:`tick_to_row` makes a tick plain dicts and lists (one
Parquet row, trace v1 to v4 field for field, docs/trace-v1.md), :func:`tick_from_row` builds a tick back from
a row, and :func:`host_to_json` / :func:`host_from_json` do the same for the host's facts, the file's metadata.

A recording is outside input (anyone may hand one over): rows become ticks through :func:`build_record`, which
keeps only the fields a sample class has and cleans their text (:mod:`gpu_triage.safetext`). The data types
themselves are :mod:`gpu_triage.model`'s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from gpu_triage.model import (
    THREAD_CPU_PCT,
    DiskSample,
    GpuInfo,
    GpuSample,
    HostInfo,
    JobRank,
    JobSample,
    NetSample,
    ProcSample,
    StackSample,
    ThreadSample,
    Tick,
    VerdictSample,
)
from gpu_triage.safetext import clean


def tick_to_row(tick: Tick) -> dict[str, Any]:
    """A tick as one trace-v1 row (plain dicts and lists)."""
    return {
        "ts": tick.ts,
        "interval_s": tick.interval_s,
        "gpus": [_asdict(g) for g in tick.gpus],
        "cpu_pct": list(tick.cpu_pct),
        "iowait_pct": tick.iowait_pct,
        "host_mem_used_bytes": tick.host_mem_used_bytes,
        "host_mem_total_bytes": tick.host_mem_total_bytes,
        "disks": [_asdict(d) for d in tick.disks],
        "procs": [_asdict(p) for p in tick.procs],
        "job": None if tick.job is None else _job_row(tick.job),
        "host_swap_used_bytes": tick.host_swap_used_bytes,
        "host_swap_total_bytes": tick.host_swap_total_bytes,
        "nets": [_asdict(n) for n in tick.nets],
        "stacks": [_stack_row(x) for x in tick.stacks],
        "verdict": None if tick.verdict is None else _asdict(tick.verdict),
    }


def tick_from_row(row: dict[str, Any]) -> Tick:
    """Build a tick from a trace-v1 row; unknown keys are ignored, missing optional ones are None."""
    return Tick(
        ts=row["ts"],
        interval_s=row.get("interval_s"),
        gpus=[build_record(GpuSample, g) for g in (row.get("gpus") or [])],
        cpu_pct=list(row.get("cpu_pct") or []),
        iowait_pct=row.get("iowait_pct"),
        host_mem_used_bytes=row.get("host_mem_used_bytes"),
        host_mem_total_bytes=row.get("host_mem_total_bytes"),
        disks=[build_record(DiskSample, d) for d in (row.get("disks") or [])],
        procs=[build_record(ProcSample, p) for p in (row.get("procs") or [])],
        job=job_from_row(row.get("job")),
        host_swap_used_bytes=row.get("host_swap_used_bytes"),
        host_swap_total_bytes=row.get("host_swap_total_bytes"),
        nets=[build_record(NetSample, n) for n in (row.get("nets") or []) if n and n.get("name") is not None],
        stacks=[stack_from_row(x) for x in (row.get("stacks") or [])
                if x and None not in (x.get("pid"), x.get("role"), x.get("phase"))],
        verdict=_verdict_from_row(row.get("verdict")),
    )


def host_to_json(host: HostInfo) -> dict[str, Any]:
    """The host's facts as the trace's ``gpu_triage.host`` metadata (a JSON object)."""
    obj: dict[str, Any] = {
        "hostname": host.hostname,
        "driver_version": host.driver_version,
        "cuda_driver_version": host.cuda_driver_version,
        "cpu_count": host.cpu_count,
        "gpus": [_asdict(g) for g in host.gpus],
        "topology": [list(r) for r in host.topology],
    }
    obj.update(host.extra)
    return obj


def host_from_json(obj: dict[str, Any]) -> HostInfo:
    """The host's facts from a recording's metadata (outside input: what is not a sane value is unknown)."""
    known = {"hostname", "driver_version", "cuda_driver_version", "cpu_count", "gpus", "topology"}
    def text(key: str) -> str | None:
        """A name or version as a printable string of at most 255 characters (a host name's limit), else
        unknown: a foreign file's {"hostname": 5} broke the fleet summary's host column, a 10 MB one
        stalled it, and one holding escape codes and newlines reached the terminal through the summary."""
        v = obj.get(key)
        return v if isinstance(v, str) and len(v) <= 255 and v.isprintable() else None

    count = obj.get("cpu_count")
    return HostInfo(
        hostname=text("hostname"),
        driver_version=text("driver_version"),
        cuda_driver_version=text("cuda_driver_version"),
        cpu_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        gpus=[build_record(GpuInfo, g) for g in (obj.get("gpus") or [])],
        topology=[list(r) for r in (obj.get("topology") or [])],
        extra={k: v for k, v in obj.items() if k not in known},
    )


def _asdict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def build_record(kind: type, data: dict[str, Any]) -> Any:
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = frozenset(f.name for f in dataclasses.fields(kind))
    # A recording is outside input too (anyone may hand one over): its names are cleaned as the live
    # sources clean theirs, so what replay, diagnose and compare print cannot hold a terminal escape
    kwargs = {k: clean(v) if isinstance(v, str) else v for k, v in data.items() if k in names}
    for list_field in ("workers_cpu_pct", "worker_pids", "gpus"):
        if list_field in names and kwargs.get(list_field) is None:
            kwargs[list_field] = []
    return kind(**kwargs)


def _job_row(job: JobSample) -> dict[str, Any]:
    row = _asdict(job)
    row["ranks"] = [_asdict(r) for r in job.ranks]
    return row


def job_from_row(data: dict[str, Any] | None) -> JobSample | None:
    if not data or data.get("source") is None:
        return None
    # the source is a name like the others (build_record): a newline in it would break replay's JOB line in two
    kwargs: dict[str, Any] = {k: clean(v) if isinstance(v, str) else v for k, v in data.items() if k in _JOB_FIELDS}
    ranks = [build_record(JobRank, r) for r in (data.get("ranks") or []) if r and r.get("rank") is not None]
    return JobSample(**kwargs, ranks=ranks)


_JOB_FIELDS = frozenset(f.name for f in dataclasses.fields(JobSample)) - {"ranks"}


def _verdict_from_row(data: dict[str, Any] | None) -> VerdictSample | None:
    if not data or data.get("pattern") is None or data.get("bottleneck") is None:
        return None
    verdict: VerdictSample = build_record(VerdictSample, data)
    return verdict


def _stack_row(x: StackSample) -> dict[str, Any]:
    row = _asdict(x)
    row["thread_list"] = [_asdict(t) for t in x.thread_list]
    return row


def stack_from_row(data: dict[str, Any]) -> StackSample:
    """A stack sample from a trace row (its pid, role and phase checked by the caller); each thread without
    its tid, state or phase is dropped, and a CPU share no thread can have read as unknown."""
    threads = []
    listed = data.get("thread_list")
    for t in listed if isinstance(listed, list) else []:
        if not isinstance(t, dict) or None in (t.get("tid"), t.get("state"), t.get("phase")):
            continue
        th: ThreadSample = build_record(ThreadSample, t)
        cpu = th.cpu_pct
        if cpu is not None and not (math.isfinite(cpu) and THREAD_CPU_PCT[0] <= cpu <= THREAD_CPU_PCT[1]):
            th.cpu_pct = None
        threads.append(th)
    sample: StackSample = build_record(StackSample, {k: v for k, v in data.items() if k != "thread_list"})
    sample.thread_list = threads
    return sample
