"""The tick: everything the dashboard knows at the end of one sampling interval.

These classes are trace v1 (docs/trace-v1.md) field for field, so that a live tick, a simulated tick and
a replayed tick are the same object and one tick is exactly one Parquet row (the codec between them is
:mod:`gpu_triage.trace.row_codec`). The sample classes are the one definition of the per-card, per-disk and
per-process fields: each field names its storage type, and the Arrow schema, the rolling window's columns and
the tests derive from them. A value the hardware does not give is ``None`` (shown "n/a"), never 0.

Host facts that do not change per tick (names, UUIDs, topology) live in :class:`HostInfo`, which the
recorder writes as file metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpu_triage.tracefields import TRACE_TYPE as TRACE_TYPE
from gpu_triage.tracefields import TRACE_TYPES as TRACE_TYPES
from gpu_triage.tracefields import TraceField as TraceField
from gpu_triage.tracefields import trace_col, trace_key, trace_list
from gpu_triage.tracefields import trace_fields as trace_fields

SCHEMA_VERSION = "4"  # 4: every Python thread of each stack sample (trace-v4.md); versions 1 to 3 are still read
READABLE_SCHEMA_VERSIONS = ("1", "2", "3", "4")


@dataclass(slots=True)
class GpuSample:
    index: int = trace_key("u16")
    util_pct: float | None = trace_col("f32")
    util_min_pct: float | None = trace_col("f32")
    util_max_pct: float | None = trace_col("f32")
    sm_active_pct: float | None = trace_col("f32")
    sm_occupancy_pct: float | None = trace_col("f32")
    tensor_active_pct: float | None = trace_col("f32")
    dram_active_pct: float | None = trace_col("f32")
    mem_used_bytes: int | None = trace_col("u64")
    mem_total_bytes: int | None = trace_col("u64")
    pcie_tx_bytes_per_s: float | None = trace_col("f64")
    pcie_rx_bytes_per_s: float | None = trace_col("f64")
    nvlink_tx_bytes_per_s: float | None = trace_col("f64")
    nvlink_rx_bytes_per_s: float | None = trace_col("f64")
    power_w: float | None = trace_col("f32")
    temp_c: float | None = trace_col("f32")
    sm_clock_mhz: float | None = trace_col("f32")
    # trace v2 (docs/trace-v2.md): card health, on the live screen as short flags
    clock_event_reasons: int | None = trace_col("u64")  # nvmlClocksEventReason* bit mask now; see throttle_names
    ecc_corrected: int | None = trace_col("u64")  # volatile ECC errors (since the driver loaded)
    ecc_uncorrected: int | None = trace_col("u64")
    xid_count: int | None = trace_col("u32")  # critical XID events seen since this program started watching
    xid_last: int | None = trace_col("u32")  # the code of the newest of them (None: none seen)
    # energy the card drew since the driver loaded, mJ (nvmlDeviceGetTotalEnergyConsumption, Volta and
    # newer): NVML's own cumulative counter, None where the card does not keep one
    energy_mj: int | None = trace_col("u64")


#: Short names of the nvmlClocksEventReason* bits (nvml.h), in bit order.
CLOCK_EVENT_NAMES: dict[int, str] = {
    0x1: "idle",
    0x2: "app-clocks",
    0x4: "power",
    0x8: "hw-slowdown",
    0x10: "sync-boost",
    0x20: "thermal",
    0x40: "hw-thermal",
    0x80: "power-brake",
    0x100: "display",
}
#: The reasons that slow a busy card down (a throttle): power cap, thermal, hardware slowdown and brake.
#: Idle, application clocks, sync boost and display clocks are settings or rest, not throttling.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def throttle_names(mask: int | None, *, only_throttle: bool = True) -> list[str] | None:
    """The short names of the reasons set in ``mask`` (None: the card does not say). With ``only_throttle``
    just those that slow a card down (see THROTTLE_MASK); unknown bits are named by their hex value."""
    if mask is None:
        return None
    if only_throttle:
        mask &= THROTTLE_MASK
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(CLOCK_EVENT_NAMES.get(bit, f"0x{bit:x}"))
        bit <<= 1
    return names


@dataclass(slots=True)
class NetSample:
    """One network interface over the tick (trace v2). InfiniBand/RoCE ports are interfaces too (ib0...);
    where sysfs has the port's own data counters, ``ib_*`` carry them (the RDMA traffic that bypasses the
    kernel's counters)."""

    name: str = trace_key("str")
    rx_bytes_per_s: float | None = trace_col("f64")
    tx_bytes_per_s: float | None = trace_col("f64")


@dataclass(slots=True)
class DiskSample:
    name: str = trace_key("str")
    busy_pct: float | None = trace_col("f32")
    await_ms: float | None = trace_col("f32")
    read_bytes_per_s: float | None = trace_col("f64")
    write_bytes_per_s: float | None = trace_col("f64")
    reads_per_s: float | None = trace_col("f64")
    writes_per_s: float | None = trace_col("f64")


@dataclass(slots=True)
class ProcSample:
    pid: int = trace_key("u32")
    gpu_index: int = trace_key("u16")
    name: str | None = trace_col("str")
    gpu_mem_bytes: int | None = trace_col("u64")
    cpu_pct: float | None = trace_col("f32")
    workers: int | None = trace_col("u16")
    workers_cpu_pct: list[float] = trace_list("list[f32]")
    worker_pids: list[int] = trace_list("list[u32]")
    # trace v2: the process's share of the card's time with a kernel running, NVML's per-process smUtil
    # (nvmlDeviceGetProcessUtilization), the mean of the driver's samples within the tick; None: no sample
    sm_pct: float | None = trace_col("f32")
    # who the process belongs to (gpu_triage.sources.owner: its cgroup, and its environment where readable);
    # None where nothing trustworthy says it, and in recordings made before these fields existed
    user: str | None = trace_col("str")
    slurm_job: str | None = trace_col("str")
    pod_uid: str | None = trace_col("str")
    pod_name: str | None = trace_col("str")
    pod_namespace: str | None = trace_col("str")
    container: str | None = trace_col("str")  # RUNTIME://ID (containerd://…, docker://…), or the bare ID

    def owner(self) -> tuple[str, str] | None:
        """(kind, id) of the one owner that answers "whose job is it": the Slurm job, else the Kubernetes
        pod (namespace/name where known, else its uid), else the container (runtime and short id), else the
        user; None when nothing is known. The metrics label by it, the table and the summary show it."""
        if self.slurm_job:
            return "slurm", self.slurm_job
        if self.pod_uid:
            if self.pod_name:
                return "pod", f"{self.pod_namespace}/{self.pod_name}" if self.pod_namespace else self.pod_name
            return "pod", self.pod_uid
        if self.container:
            runtime, sep, cid = self.container.rpartition("://")
            return "container", f"{runtime}://{cid[:12]}" if sep else cid[:12]
        if self.user:
            return "user", self.user
        return None


#: The job's figures' physical ranges (whole job and each rank): readers make a value outside null, the job
#: sources refuse one as it comes in (no job runs 10^12 samples/s; an infinite rate breaks the arithmetic).
JOB_RANGES: dict[str, tuple[float, float]] = {
    "samples_per_s": (0.0, 1e12), "steps_per_s": (0.0, 1e9), "step_time_s": (0.0, 1e7),  # a 116-day step is none
    "data_wait_pct": (0.0, 100.0), "since_progress_s": (0.0, 1e10),
}


def job_figure(name: str, value: float | None) -> float | None:
    """``value`` where it is a finite number within ``JOB_RANGES[name]``, else None (not measured)."""
    if value is None:
        return None
    lo, hi = JOB_RANGES[name]
    return value if math.isfinite(value) and lo <= value <= hi else None


# Trace v2 (docs/trace-v2.md): the job's side of a tick, what the training itself says about its progress.
# Filled from the job's log (``--job-log``) or from :mod:`gpu_triage.pulse` inside the job; ``Tick.job`` is
# None without a job source. Figures the source does not give are None, never 0.


@dataclass(slots=True)
class JobRank:
    """One training process (rank) as its pulse reports it."""

    rank: int = trace_key("u32")
    local_rank: int | None = trace_col("u32")
    world_size: int | None = trace_col("u32")
    pid: int | None = trace_col("u32")
    samples_per_s: float | None = trace_col("f64")
    steps_per_s: float | None = trace_col("f64")
    step_time_s: float | None = trace_col("f64")
    data_wait_pct: float | None = trace_col("f32")  # share of each step spent waiting for the next batch
    since_progress_s: float | None = trace_col("f64")  # seconds since this rank last finished a step


@dataclass(slots=True)
class JobSample:
    """The job over one tick. Whole-job figures: samples/s summed over ranks, steps/s, step time and wait of
    the slowest rank, ``since_progress_s`` of the rank that progressed last longest ago."""

    source: str = trace_key("str")  # "pulse", "log:tqdm", "log:hf_trainer", ...
    samples_per_s: float | None = trace_col("f64")
    steps_per_s: float | None = trace_col("f64")
    step_time_s: float | None = trace_col("f64")
    data_wait_pct: float | None = trace_col("f32")
    since_progress_s: float | None = trace_col("f64")
    steps: int | None = trace_col("u64")  # the job's own step counter, where it says one
    loss: float | None = trace_col("f64")
    ranks: list[JobRank] = trace_list("list[job_rank]")  # last: the schema builds it from JobRank


# Trace v3 (docs/trace-v3.md): what the inside of a job was doing, and what the engine read of the tick; v4
# (docs/trace-v4.md): each Python thread of a dump, not only the one that named the process's phase.


@dataclass(slots=True)
class ThreadSample:
    """One Python thread of a dumped process (trace v4): what py-spy saw it doing at the dump."""

    tid: int = trace_key("u32")  # the OS thread id (/proc/PID/task); the main thread's is the pid
    state: str = trace_key("str")  # "active": on a CPU at the dump (py-spy's idle detection); "idle": off it
    phase: str = trace_key("str")  # the thread's own phase (sources.phases.classify), "unknown" without frames
    name: str | None = trace_col("str")  # Python's thread name ("MainThread", "Thread-2 (_pin_memory_loop)")
    holds_gil: int | None = trace_col("u16")  # 1: it held the GIL at the dump, 0: it did not; None: not said
    cpu_pct: float | None = trace_col("f32")  # its share of one core since the sampler's last read of it (/proc)
    frames: str | None = trace_col("str")  # its innermost frames down to the one that named its phase


#: A thread's CPU share a reader believes (one thread runs on one core at most; /proc's ticks jitter a little).
THREAD_CPU_PCT = (0.0, 200.0)


@dataclass(slots=True)
class StackSample:
    """One look inside a GPU process during the tick: one py-spy dump of its main thread (``role`` "main") or
    of one of its DataLoader workers ("worker"), read as one phase (``sources/phases.py``). Sparse: a tick
    holds the dumps that finished during it, none while every card is busy."""

    pid: int = trace_key("u32")
    role: str = trace_key("str")  # "main": the process on the card; "worker": one of its DataLoader workers
    phase: str = trace_key("str")  # a sources.phases.Phase value; "unknown" where no stack was read
    parent_pid: int | None = trace_col("u32")  # a worker's training process; None for "main"
    frames: str | None = trace_col("str")  # the innermost frames that named the phase, "fn (file)" joined by " < "
    busy_threads: int | None = trace_col("u16")  # threads of the process on a CPU (≥ 20 % of a core) at the dump
    threads: int | None = trace_col("u16")  # threads of the process
    error: str | None = trace_col("str")  # why there is no stack (not permitted, no py-spy, ...); None when read
    thread_list: list[ThreadSample] = trace_list("list[stack_thread]")  # v4: each Python thread (last: see layout)


@dataclass(slots=True)
class VerdictSample:
    """The engine's raw verdict at the tick's end (what ``diagnose FILE`` recomputes there): a summary reads it."""

    pattern: str = trace_key("str")
    bottleneck: str = trace_key("str")
    mechanism: str | None = trace_col("str")
    confidence: str | None = trace_col("str")  # likely / possible / unsure
    gpus: list[int] = trace_list("list[u16]")  # the cards the verdict names
    headroom_kind: str | None = trace_col("str")  # what fixing it is worth (worth.Headroom): bound / lost / none
    headroom_factor: float | None = trace_col("f32")  # the bound on the speed-up, x; only for "bound"
    headroom_share: float | None = trace_col("f32")  # 0..1 of the judged time lost
    headroom_unit: str | None = trace_col("str")  # what the factor multiplies: samples/s or GPU-busy time
    headroom_basis: str | None = trace_col("str")  # what the number rests on, in figures
    headroom_assumes: str | None = trace_col("str")  # what must hold for it


@dataclass(slots=True)
class Tick:
    ts: datetime  # timezone-aware UTC: end of the interval this tick covers
    interval_s: float | None  # actual length of the interval (None: a recording that lacks it)
    gpus: list[GpuSample] = field(default_factory=list)
    cpu_pct: list[float] = field(default_factory=list)
    iowait_pct: float | None = None
    host_mem_used_bytes: int | None = None
    host_mem_total_bytes: int | None = None
    disks: list[DiskSample] = field(default_factory=list)
    procs: list[ProcSample] = field(default_factory=list)
    job: JobSample | None = None  # the training's own progress (trace v2); None: no job source
    host_swap_used_bytes: int | None = None  # trace v2
    host_swap_total_bytes: int | None = None  # trace v2
    nets: list[NetSample] = field(default_factory=list)  # trace v2: busiest first is the screen's business
    stacks: list[StackSample] = field(default_factory=list)  # trace v3: dumps finished during the tick
    verdict: VerdictSample | None = None  # trace v3: the engine's raw verdict then; None: not recorded


@dataclass(slots=True)
class GpuInfo:
    """Static facts about one card, read once."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    mem_total_bytes: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None


@dataclass(slots=True)
class HostInfo:
    """Static facts about the machine; written as the trace's ``gpu_triage.host`` metadata."""

    hostname: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    cpu_count: int | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    topology: list[list[str]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # tool version, env vars, kernel, source
