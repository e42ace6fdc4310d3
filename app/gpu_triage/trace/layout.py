"""The trace's columns as plain data, without pyarrow: what the recorder needs to write a tick.

The trace schema (docs/trace-v4.md, over docs/trace-v3.md, docs/trace-v2.md and docs/trace-v1.md) is defined
once, here, from the field definitions in :mod:`gpu_triage.model` (each field's ``trace_type``).
:mod:`gpu_triage.trace.schema` turns this layout into pyarrow types for the readers;
:mod:`gpu_triage.trace.arrow_ipc` writes it as an Arrow IPC stream without pyarrow, so that a recorder never
loads Arrow's 31 MB of libraries while it records.

A tick becomes one row of nested tuples in column order (:func:`tick_values`): a list column holds a list,
a struct a tuple of its fields, a missing value None.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Any

from gpu_triage.model import (
    SCHEMA_VERSION,
    DiskSample,
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
    trace_fields,
)
from gpu_triage.trace.row_codec import host_to_json

META_SCHEMA = b"gpu_triage.schema"
META_INTERVAL = b"gpu_triage.interval_s"
META_HOST = b"gpu_triage.host"

#: Scalar kinds (the model's trace types) and the two containers. ``ts_us`` is a UTC timestamp in µs.
SCALARS = frozenset({"u16", "u32", "u64", "f32", "f64", "str", "ts_us"})


@dataclass(frozen=True, slots=True)
class Col:
    """One column of the trace: a scalar kind, or ``list`` (one child, named ``item``) or ``struct``."""

    name: str
    kind: str
    children: tuple[Col, ...] = ()


def _of_trace_type(name: str, trace_type: str) -> Col:
    if trace_type.startswith("list[") and trace_type.endswith("]"):
        return Col(name, "list", (_of_trace_type("item", trace_type[5:-1]),))
    if trace_type == "job_rank":
        return struct_of("item", JobRank)
    if trace_type == "stack_thread":
        return struct_of("item", ThreadSample)
    if trace_type not in SCALARS:
        raise ValueError(f"unknown trace type {trace_type!r} of {name}")
    return Col(name, trace_type)


def struct_of(name: str, kind: type) -> Col:
    """A struct column of one sample class's trace fields, in the class's order."""
    return Col(name, "struct", tuple(_of_trace_type(f.name, f.trace_type) for f in trace_fields(kind)))


def list_of(name: str, kind: type) -> Col:
    return Col(name, "list", (struct_of("item", kind),))


GPU = struct_of("item", GpuSample)
DISK = struct_of("item", DiskSample)
PROC = struct_of("item", ProcSample)
NET = struct_of("item", NetSample)
JOB = struct_of("job", JobSample)
STACK = struct_of("item", StackSample)
VERDICT = struct_of("verdict", VerdictSample)

#: The whole trace row, in file order (v1's columns, then v2's job, swap and nets, then v3's stacks and verdict).
TRACE_COLUMNS: tuple[Col, ...] = (
    Col("ts", "ts_us"),
    Col("interval_s", "f64"),
    Col("gpus", "list", (GPU,)),
    Col("cpu_pct", "list", (Col("item", "f32"),)),
    Col("iowait_pct", "f32"),
    Col("host_mem_used_bytes", "u64"),
    Col("host_mem_total_bytes", "u64"),
    Col("disks", "list", (DISK,)),
    Col("procs", "list", (PROC,)),
    JOB,
    Col("host_swap_used_bytes", "u64"),
    Col("host_swap_total_bytes", "u64"),
    Col("nets", "list", (NET,)),
    Col("stacks", "list", (STACK,)),
    VERDICT,
)


def trace_metadata(host: HostInfo, interval_s: float) -> dict[bytes, bytes]:
    """The file's key-value metadata: schema number, nominal interval, host facts as JSON."""
    return {
        META_SCHEMA: SCHEMA_VERSION.encode(),
        META_INTERVAL: repr(float(interval_s)).encode(),
        META_HOST: json.dumps(host_to_json(host), ensure_ascii=False, default=str).encode(),
    }


def _getter(col: Col) -> Any:
    return operator.attrgetter(*(c.name for c in col.children))


_gpu_values = _getter(GPU)
_disk_values = _getter(DISK)
_proc_values = _getter(PROC)
_net_values = _getter(NET)
assert STACK.children[-1].name == "thread_list"  # the scalars, then the list of threads (see _stack)
_stack_values = operator.attrgetter(*(c.name for c in STACK.children[:-1]))
_thread_values = _getter(STACK.children[-1].children[0])
_verdict_values = _getter(VERDICT)
assert JOB.children[-1].name == "ranks"  # the scalars, then the list of ranks (see _job)
_job_values = operator.attrgetter(*(c.name for c in JOB.children[:-1]))
_job_rank_values = _getter(JOB.children[-1].children[0])


def _job(job: Any) -> tuple[Any, ...] | None:
    if job is None:
        return None
    return (*_job_values(job), [_job_rank_values(r) for r in job.ranks])


def _stack(x: Any) -> tuple[Any, ...]:
    return (*_stack_values(x), [_thread_values(t) for t in x.thread_list])


def tick_values(t: Tick) -> tuple[Any, ...]:
    """One tick as nested tuples in column order (attribute getters, no per-field dicts)."""
    return (
        t.ts,
        t.interval_s,
        [_gpu_values(g) for g in t.gpus],
        t.cpu_pct,
        t.iowait_pct,
        t.host_mem_used_bytes,
        t.host_mem_total_bytes,
        [_disk_values(d) for d in t.disks],
        [_proc_values(p) for p in t.procs],
        _job(t.job),
        t.host_swap_used_bytes,
        t.host_swap_total_bytes,
        [_net_values(n) for n in t.nets],
        [_stack(x) for x in t.stacks],
        None if t.verdict is None else _verdict_values(t.verdict),
    )
