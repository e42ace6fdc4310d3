"""The trace (v4: v2's columns, then the stack samples with each of their threads, and the verdict of each tick)
as a pyarrow schema, and the conversions between ticks and Arrow data.

The schema is the recording contract (docs/trace-v4.md, over the v3, v2 and v1 documents), built
from the field definitions in :mod:`gpu_triage.model` (each field's ``trace_type``): units in the names, and the
widths the bundled H200 recordings use (uint16 indexes, float32 percentages, uint64 bytes, float64 rates, ``ts``
as UTC microseconds).

The columns themselves are defined once, without pyarrow, in :mod:`gpu_triage.trace.layout`; this module
makes their pyarrow types for the readers (the recorder writes its stream without pyarrow, through
:mod:`gpu_triage.trace.arrow_ipc`). Ticks become a :class:`pyarrow.RecordBatch` through one ``pa.array``
call over the layout's nested tuples (offline diagnosis of tick lists, tests). Arrow data becomes ticks through
``row_codec.tick_from_row`` on ``to_pylist()`` rows, one slice at a time, so a reader never converts a whole day.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from gpu_triage.model import (
    JOB_RANGES,
    DiskSample,
    GpuSample,
    HostInfo,
    NetSample,
    ProcSample,
    StackSample,
    Tick,
    trace_fields,
)
from gpu_triage.trace.layout import (
    DISK,
    GPU,
    JOB,
    NET,
    PROC,
    TRACE_COLUMNS,
    Col,
    tick_values,
    trace_metadata,
)
from gpu_triage.trace.row_codec import tick_from_row

_SCALAR_TYPES: dict[str, pa.DataType] = {
    "u16": pa.uint16(),
    "u32": pa.uint32(),
    "u64": pa.uint64(),
    "f32": pa.float32(),
    "f64": pa.float64(),
    "str": pa.string(),
    "ts_us": pa.timestamp("us", tz="UTC"),
}


def arrow_type(col: Col) -> pa.DataType:
    """The pyarrow type of one column of the layout (a list's child is ``item``, as pyarrow names it)."""
    if col.kind == "list":
        return pa.list_(arrow_type(col.children[0]))
    if col.kind == "struct":
        return pa.struct([pa.field(c.name, arrow_type(c)) for c in col.children])
    return _SCALAR_TYPES[col.kind]


def _arrow_fields(struct: Col) -> tuple[tuple[str, pa.DataType], ...]:
    return tuple((c.name, arrow_type(c)) for c in struct.children)


# Derived from the sample classes in gpu_triage.model (through the layout), the one definition of the fields.
GPU_ARROW_FIELDS = _arrow_fields(GPU)
DISK_ARROW_FIELDS = _arrow_fields(DISK)
PROC_ARROW_FIELDS = _arrow_fields(PROC)
NET_ARROW_FIELDS = _arrow_fields(NET)

# What each measured field can physically be, next to the fields themselves: ``(low, high)``, both
# inclusive. A value outside (a negative percentage, NaN, inf, 10^6 %, a negative watt, a GPU with a
# petabyte of memory) is a damaged or foreign file, not a measurement: the reader turns it into null ("the
# hardware does not say"), counts it and says so once. Identifiers (index, pid, name, workers) have no
# range here: their Arrow types already bound them. The upper bounds are generous by design (several
# generations past an H200: 141 GB, 700 W, ~900 GB/s NVLink) so that no real reading is ever dropped.
PCT = (0.0, 100.0)
PROCESS_PCT = (0.0, 100.0 * 4096)  # a process's CPU % sums its threads: up to 100 % per core
BYTES = (0.0, 2.0**50)  # 1 PiB: memory of one GPU or one host
LINK_BYTES_PER_S = (0.0, 1e13)  # 10 TB/s: past PCIe 7 x16 and NVLink 5 per direction
DISK_BYTES_PER_S = (0.0, 1e12)
DISK_OPS_PER_S = (0.0, 1e9)
NET_BYTES_PER_S = (0.0, 1e13)  # 10 TB/s: past any NIC or 800G InfiniBand port
ERROR_COUNT = (0.0, 2.0**63)  # counters: any non-negative count a u64 can honestly hold
FIELD_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "gpus": {
        "util_pct": PCT,
        "util_min_pct": PCT,
        "util_max_pct": PCT,
        "sm_active_pct": PCT,
        "sm_occupancy_pct": PCT,
        "tensor_active_pct": PCT,
        "dram_active_pct": PCT,
        "mem_used_bytes": BYTES,
        "mem_total_bytes": BYTES,
        "pcie_tx_bytes_per_s": LINK_BYTES_PER_S,
        "pcie_rx_bytes_per_s": LINK_BYTES_PER_S,
        "nvlink_tx_bytes_per_s": LINK_BYTES_PER_S,
        "nvlink_rx_bytes_per_s": LINK_BYTES_PER_S,
        "power_w": (0.0, 10_000.0),
        "temp_c": (0.0, 200.0),
        "sm_clock_mhz": (0.0, 10_000.0),
        # trace v2: card health (the reason mask is a bit set, bounded by its type: no range)
        "ecc_corrected": ERROR_COUNT,
        "ecc_uncorrected": ERROR_COUNT,
        "xid_count": (0.0, 2.0**32 - 1),
        "xid_last": (0.0, 2.0**16),  # XID codes are small numbers (79: fell off the bus)
        "energy_mj": ERROR_COUNT,  # a cumulative counter: any non-negative u64
    },
    "nets": {
        "rx_bytes_per_s": NET_BYTES_PER_S,
        "tx_bytes_per_s": NET_BYTES_PER_S,
    },
    "disks": {
        "busy_pct": PCT,
        "await_ms": (0.0, 1e7),
        "read_bytes_per_s": DISK_BYTES_PER_S,
        "write_bytes_per_s": DISK_BYTES_PER_S,
        "reads_per_s": DISK_OPS_PER_S,
        "writes_per_s": DISK_OPS_PER_S,
    },
    "procs": {
        "sm_pct": PCT,
        "gpu_mem_bytes": BYTES,
        "cpu_pct": PROCESS_PCT,
        "workers_cpu_pct": PROCESS_PCT,  # a list: each element
    },
    # trace v2: the job's figures, the whole job's and each rank's (a loss has no physical range: none here)
    "job": JOB_RANGES,
    "job.ranks": JOB_RANGES,
    # the headroom stored with each verdict: a bound is a speed-up (at least 1x), a share a part of the time
    "verdict": {"headroom_factor": (1.0, 1e6), "headroom_share": (0.0, 1.0)},
    # top-level columns (a list column: each element)
    "": {
        "interval_s": (1e-3, 86_400.0),
        "cpu_pct": PCT,
        "iowait_pct": PCT,
        "host_mem_used_bytes": BYTES,
        "host_mem_total_bytes": BYTES,
        "host_swap_used_bytes": BYTES,
        "host_swap_total_bytes": BYTES,
    },
}

# A tick interval a file may claim (metadata or per tick), and a timestamp it may carry (1970 to 2200, in
# microseconds): outside, the reader derives the interval from the timestamps / drops the tick.
RECORDED_INTERVAL_RANGE_S: tuple[float, float] = FIELD_RANGES[""]["interval_s"]
TS_RANGE_US: tuple[float, float] = (0.0, 7_258_118_400.0 * 1e6)

# Trace v2: the job's own progress per tick (docs/trace-v2.md). Whole-job scalars, then one entry per rank.
JOB_ARROW_FIELDS = _arrow_fields(JOB)
JOB_STRUCT = arrow_type(JOB)
JOB_RANK_STRUCT = arrow_type(JOB.children[-1].children[0])
GPU_STRUCT = arrow_type(GPU)
DISK_STRUCT = arrow_type(DISK)
PROC_STRUCT = arrow_type(PROC)
NET_STRUCT = arrow_type(NET)
TS_TYPE = _SCALAR_TYPES["ts_us"]

TRACE_SCHEMA = pa.schema([pa.field(c.name, arrow_type(c)) for c in TRACE_COLUMNS])

COLUMNS: tuple[str, ...] = tuple(TRACE_SCHEMA.names)
REQUIRED_STRUCT_FIELDS: dict[str, tuple[str, ...]] = {
    column: tuple(f.name for f in trace_fields(kind) if f.required)
    for column, kind in (("gpus", GpuSample), ("disks", DiskSample), ("procs", ProcSample), ("nets", NetSample),
                         ("stacks", StackSample))
}


def schema_with_metadata(host: HostInfo, interval_s: float) -> pa.Schema:
    return TRACE_SCHEMA.with_metadata(trace_metadata(host, interval_s))


_ROW_STRUCT = pa.struct(list(TRACE_SCHEMA))


def ticks_to_batch(ticks: Sequence[Tick], metadata: dict[bytes, bytes] | None = None) -> pa.RecordBatch:
    """Ticks as one record batch of TRACE_SCHEMA (with ``metadata`` if given).

    One ``pa.array`` call over nested tuples (attrgetter, no per-field dicts) measured ~0.1 ms for one
    8-card tick against ~0.45 ms building each leaf array separately and ~0.3 ms via ``tick_to_row()`` dicts.
    """
    rows = pa.array([tick_values(t) for t in ticks], type=_ROW_STRUCT)
    batch = pa.RecordBatch.from_struct_array(rows)
    return batch.replace_schema_metadata(metadata) if metadata else batch


def rows_to_ticks(table: pa.Table | pa.RecordBatch) -> list[Tick]:
    """Every row of ``table`` as a tick (call it on a slice: it converts what it is given)."""
    return [tick_from_row(row) for row in table.to_pylist()]
