"""The metrics, read from the monitor's latest snapshot at scrape time.

Names, units and types follow the Prometheus conventions: base units (``_bytes``, ``_seconds``,
``_hertz``, ``_watts``, ``_celsius``), activity as ``_ratio`` in 0–1, counters end in ``_total``. A field
the hardware does not give (``None`` in the tick) is not exported for that card or disk: a missing series
means "n/a", never 0. Every name is listed in docs/metrics.md.

Cardinality: one series per card and field, per disk and field, per card and *owner* of its GPU processes
(the Slurm job, Kubernetes pod, container or user: ``owner_kind``/``owner``, which lives as long as the job,
where a pid label would start new series with every process, the reason DCGM has none), and a fixed handful
for the host's cores (their mean, their maximum and how many are saturated) however many cores the machine
has. ``pid``/``name`` labels are off unless asked for (``export --pid-labels``).

Monotonic values are counters (``_total``): ECC and XID counts as the driver and the event watch give them,
link and network bytes and energy accumulated by the monitor from each tick's rate x interval, so a scrape
slower than the tick still sees every tick (``rate()`` over them).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpu_triage import __version__
from gpu_triage.diagnosis.vocab import GPU_FAULT, GpuFault
from gpu_triage.export.lost_metric import lost as _lost
from gpu_triage.export.monitor import Snapshot
from gpu_triage.model import CLOCK_EVENT_NAMES, GpuSample, ProcSample
from gpu_triage.safetext import clean, is_clean

PREFIX = "gpu_triage"
CORE_SATURATED_RATIO = 0.9  # a core at or above this is counted in gpu_triage_host_cpu_cores_saturated

# (trace field, metric suffix, help, scale to base units)
GPU_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("util_pct", "utilization_ratio", "GPU-Util over the tick (NVML): a kernel was running, 0-1", 0.01),
    ("util_min_pct", "utilization_min_ratio", "lowest driver GPU-Util sample inside the tick, 0-1", 0.01),
    ("util_max_pct", "utilization_max_ratio", "highest driver GPU-Util sample inside the tick, 0-1", 0.01),
    ("sm_active_pct", "sm_active_ratio", "SM activity (GPM, Hopper and newer): share of SMs busy, 0-1", 0.01),
    ("sm_occupancy_pct", "sm_occupancy_ratio", "SM occupancy (GPM): resident warps over the maximum, 0-1", 0.01),
    ("tensor_active_pct", "tensor_active_ratio", "tensor core activity (GPM), 0-1", 0.01),
    ("dram_active_pct", "dram_active_ratio", "DRAM bandwidth activity (GPM), 0-1", 0.01),
    ("mem_used_bytes", "memory_used_bytes", "GPU memory in use", 1.0),
    ("mem_total_bytes", "memory_total_bytes", "GPU memory installed", 1.0),
    ("power_w", "power_watts", "board power draw", 1.0),
    ("temp_c", "temperature_celsius", "GPU temperature", 1.0),
    ("sm_clock_mhz", "sm_clock_hertz", "SM clock", 1e6),
    ("xid_last", "xid_last_code", "code of the newest critical XID event (absent while none was seen)", 1.0),
)

# Counters the card's own fields give: (trace field, metric name without _total, help)
GPU_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("ecc_corrected", "ecc_corrected_errors", "volatile corrected ECC errors (since the driver loaded)"),
    ("ecc_uncorrected", "ecc_uncorrected_errors", "volatile uncorrected ECC errors (since the driver loaded)"),
    ("xid_count", "xid_events", "critical XID events seen since the exporter started watching"),
)

# Counters the monitor accumulates (Snapshot.gpu_totals / net_totals): (key, metric name without _total, help)
GPU_TOTALS: tuple[tuple[str, str, str], ...] = (
    ("pcie_rx_bytes", "pcie_rx_bytes", "PCIe bytes received (since the exporter started)"),
    ("pcie_tx_bytes", "pcie_tx_bytes", "PCIe bytes sent (since the exporter started)"),
    ("nvlink_rx_bytes", "nvlink_rx_bytes", "NVLink bytes received, all links (since the exporter started)"),
    ("nvlink_tx_bytes", "nvlink_tx_bytes", "NVLink bytes sent, all links (since the exporter started)"),
)
ENERGY_DOC = (
    "energy drawn: the driver's own counter since it loaded (nvmlDeviceGetTotalEnergyConsumption) where the "
    "card keeps one, else each tick's power x its length since the exporter started"
)
NET_TOTALS: tuple[tuple[str, str, str], ...] = (
    ("receive_bytes", "receive_bytes", "bytes received (since the exporter started)"),
    ("transmit_bytes", "transmit_bytes", "bytes sent (since the exporter started)"),
)

DISK_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("busy_pct", "busy_ratio", "share of the tick the disk had IO in flight (iostat %util), 0-1", 0.01),
    ("await_ms", "await_seconds", "mean time an IO took, queue included (iostat await)", 0.001),
    ("read_bytes_per_s", "read_bytes_per_second", "bytes read per second over the tick", 1.0),
    ("write_bytes_per_s", "write_bytes_per_second", "bytes written per second over the tick", 1.0),
    ("reads_per_s", "reads_per_second", "read operations per second over the tick", 1.0),
    ("writes_per_s", "writes_per_second", "write operations per second over the tick", 1.0),
)


def _num(v: float | None) -> float | None:
    """``v`` as a float, or None when the hardware did not say (None) or the value is NaN."""
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


class TriageCollector(Collector):
    """A custom collector: everything comes from one snapshot taken at the start of :meth:`collect`."""

    def __init__(self, snapshot: Callable[[], Snapshot | None], *, pid_labels: bool = False) -> None:
        self._snapshot = snapshot  # Monitor.snapshot, read once per scrape
        self._pid_labels = pid_labels  # one series per process (pid, name) as well as per owner

    def describe(self) -> Iterable[object]:
        return []  # no describe-time collect: registering must not need a tick

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()  # one reference: the tick and its verdict belong together
        if snap is None:
            return  # live --metrics before the dashboard's source is attached
        procs = functools.partial(_procs, pid_labels=self._pid_labels)
        for part in (_meta, _gpus, _host, procs, _job, _verdict, _lost):
            yield from map(_clean_labels, part(snap))


def _clean_labels(metric: Metric) -> Metric:
    """Label values as valid, printable UTF-8. Interface, disk, process and host names are anyone's: a lone
    surrogate (psutil's reading of a name's undecodable bytes) makes generate_latest raise on every scrape,
    verdict included, and control characters would reach whoever reads the page. Checked at the one place
    every family passes, so a label added later is covered too."""
    for k, sample in enumerate(metric.samples):
        if not all(is_clean(v) for v in sample.labels.values()):
            metric.samples[k] = sample._replace(labels={n: clean(v) for n, v in sample.labels.items()})
    return metric


def _g(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))


def _meta(snap: Snapshot) -> Iterator[Metric]:
    info = InfoMetricFamily(f"{PREFIX}_build", "gpu-triage version and the source it samples")
    info.add_metric([], {"version": __version__, "source": snap.source, "hostname": snap.host.hostname or ""})
    yield info
    ticks = CounterMetricFamily(f"{PREFIX}_ticks", "ticks sampled and diagnosed since start")
    ticks.add_metric([], snap.ticks)
    yield ticks
    avail = _g("gpu_driver_available", "1 when NVML answered (a driver and cards), 0 when running host-only")
    avail.add_metric([], 1.0 if snap.gpu_available else 0.0)
    yield avail
    fault = _g(
        "gpu_fault",
        "1 while the named fault holds: driver_failure (the kernel lists NVIDIA GPUs, NVML does not start), "
        "card_lost (a card fell off the bus), cards_missing (NVML lists fewer cards than the kernel); else 0",
        ["reason"],
    )
    for reason in GpuFault:
        fault.add_metric([str(reason)], 1.0 if snap.fault == reason else 0.0)
    yield fault
    if snap.gpus_expected is not None:
        expected = _g("gpus_expected", "NVIDIA GPUs the kernel lists (/proc/driver/nvidia/gpus, else the PCI bus)")
        expected.add_metric([], float(snap.gpus_expected))
        yield expected
        missing = _g("gpus_missing", "NVIDIA GPUs the kernel lists that the driver (NVML) does not")
        missing.add_metric([], float(snap.gpus_missing))
        yield missing
    if snap.tick is not None and snap.tick_time is not None:
        ts = _g("tick_timestamp_seconds", "end of the newest tick, seconds since the epoch (stale data shows here)")
        ts.add_metric([], snap.tick_time)
        yield ts
        if (interval := _num(snap.tick.interval_s)) is not None:
            iv = _g("tick_interval_seconds", "length of the newest tick")
            iv.add_metric([], interval)
            yield iv


def _gpus(snap: Snapshot) -> Iterator[Metric]:
    tick = snap.tick
    samples: dict[int, GpuSample] = {g.index: g for g in tick.gpus} if tick is not None else {}
    indexes = sorted(set(samples) | set(snap.lost_gpus) | {g.index for g in snap.host.gpus})
    if not indexes:
        return
    info = InfoMetricFamily(f"{PREFIX}_gpu", "static facts of each card", labels=["gpu"])
    for g in snap.host.gpus:
        info.add_metric([str(g.index)], {"name": g.name or "", "uuid": g.uuid or "", "pci_bus_id": g.pci_bus_id or ""})
    yield info
    lost = _g("gpu_lost", "1 when the card fell off the bus (NVML GPU_IS_LOST), else 0", ["gpu"])
    for i in indexes:
        lost.add_metric([str(i)], 1.0 if i in snap.lost_gpus else 0.0)
    yield lost
    for field_name, suffix, doc, scale in GPU_GAUGES:
        fam = _g(f"gpu_{suffix}", doc, ["gpu"])
        for i, v in _live_values(snap, samples, indexes, field_name):
            fam.add_metric([str(i)], v * scale)
        yield fam
    for field_name, name, doc in GPU_COUNTERS:
        counter = CounterMetricFamily(f"{PREFIX}_gpu_{name}", doc, labels=["gpu"])
        for i, v in _live_values(snap, samples, indexes, field_name):
            counter.add_metric([str(i)], v)
        yield counter
    for key, name, doc in GPU_TOTALS:
        counter = CounterMetricFamily(f"{PREFIX}_gpu_{name}", doc, labels=["gpu"])
        for i in indexes:
            if i in snap.lost_gpus:  # a lost card is gpu_lost 1 and nothing else; its counter resumes after
                continue
            if (total := snap.gpu_totals.get(i, {}).get(key)) is not None:
                counter.add_metric([str(i)], total)
        yield counter
    yield _energy(snap, samples, indexes)
    yield _clock_reasons(snap, samples, indexes)


def _live_values(
    snap: Snapshot, samples: dict[int, GpuSample], indexes: list[int], field_name: str
) -> Iterator[tuple[int, float]]:
    """Each card's ``field_name``, where the card is sampled, not lost, and the value known."""
    for i in indexes:
        s = samples.get(i)
        v = _num(getattr(s, field_name)) if s is not None and i not in snap.lost_gpus else None
        if v is not None:
            yield i, v


def _energy(snap: Snapshot, samples: dict[int, GpuSample], indexes: list[int]) -> Metric:
    energy = CounterMetricFamily(f"{PREFIX}_gpu_energy_joules", ENERGY_DOC, labels=["gpu"])
    for i in indexes:
        if i in snap.lost_gpus:
            continue
        s = samples.get(i)
        # one source per card for its whole life: a card keeps the driver's counter or never has one
        driver = _num(s.energy_mj) if s is not None else None
        total = driver / 1000.0 if driver is not None else snap.gpu_totals.get(i, {}).get("energy_joules")
        if total is not None:
            energy.add_metric([str(i)], total)
    return energy


def _clock_reasons(snap: Snapshot, samples: dict[int, GpuSample], indexes: list[int]) -> Metric:
    reasons = _g(
        "gpu_clock_event_reason",
        "1 while the named reason holds the card's clocks down (NVML clocks event reasons: power, thermal, "
        "hw-slowdown... ; idle and app-clocks are not throttling), else 0",
        ["gpu", "reason"],
    )
    for i in indexes:
        s = samples.get(i)
        mask = s.clock_event_reasons if s is not None and i not in snap.lost_gpus else None
        if mask is None:
            continue
        for bit, name in CLOCK_EVENT_NAMES.items():
            reasons.add_metric([str(i), name], 1.0 if mask & bit else 0.0)
    return reasons


def _host(snap: Snapshot) -> Iterator[Metric]:
    tick = snap.tick
    if tick is None:
        return
    cores = [c for c in map(_num, tick.cpu_pct) if c is not None]
    if cores:
        n = _g("host_cpu_cores", "CPU cores sampled")
        n.add_metric([], float(len(cores)))
        yield n
        mean = _g("host_cpu_busy_ratio", "mean busy share of all cores over the tick, 0-1")
        mean.add_metric([], sum(cores) / len(cores) / 100.0)
        yield mean
        top = _g("host_cpu_core_busy_max_ratio", "busy share of the busiest core over the tick, 0-1")
        top.add_metric([], max(cores) / 100.0)
        yield top
        sat = _g(
            "host_cpu_cores_saturated",
            f"cores at least {CORE_SATURATED_RATIO:.0%} busy over the tick (a starved DataLoader fills them)",
        )
        sat.add_metric([], float(sum(1 for c in cores if c / 100.0 >= CORE_SATURATED_RATIO)))
        yield sat
    if (iowait := _num(tick.iowait_pct)) is not None:
        io = _g("host_iowait_ratio", "share of CPU time waiting for IO over the tick, 0-1")
        io.add_metric([], iowait / 100.0)
        yield io
    for value, name, doc in (
        (tick.host_mem_used_bytes, "host_memory_used_bytes", "host memory in use"),
        (tick.host_mem_total_bytes, "host_memory_total_bytes", "host memory installed"),
        (tick.host_swap_used_bytes, "host_swap_used_bytes", "host swap in use"),
        (tick.host_swap_total_bytes, "host_swap_total_bytes", "host swap configured (0: none)"),
    ):
        if (v := _num(value)) is not None:
            m = _g(name, doc)
            m.add_metric([], v)
            yield m
    for field_name, suffix, doc, scale in DISK_GAUGES:
        fam = _g(f"host_disk_{suffix}", doc, ["disk"])
        for d in tick.disks:
            v = _num(getattr(d, field_name))
            if v is not None:
                fam.add_metric([d.name], v * scale)
        yield fam
    for key, name, doc in NET_TOTALS:
        counter = CounterMetricFamily(
            f"{PREFIX}_host_network_{name}", doc + " (InfiniBand/RoCE ports as DEVICE/PORT)", labels=["interface"]
        )
        for interface, totals in sorted(snap.net_totals.items()):
            if (total := totals.get(key)) is not None:
                counter.add_metric([interface], total)
        yield counter


def _procs(snap: Snapshot, pid_labels: bool) -> Iterator[Metric]:
    """Per card and owner (the processes of one job on one card summed), or per process with pid labels."""
    tick = snap.tick
    if tick is None:
        return
    labels = ["gpu", "owner_kind", "owner", *(("pid", "name") if pid_labels else ())]
    mem = _g("process_gpu_memory_bytes", "GPU memory held by GPU processes on that card", labels)
    cpu = _g("process_cpu_cores", "CPU of GPU processes in cores (1 = one core busy)", labels)
    workers = _g("process_dataloader_workers", "DataLoader worker processes of GPU processes", labels)
    wcpu = _g("process_dataloader_workers_cpu_cores", "CPU of their DataLoader workers together, in cores", labels)
    sums: dict[tuple[str, ...], list[float | None]] = {}  # key -> [memory, cpu, workers, workers' cpu]
    owners: dict[tuple[str, str], ProcSample] = {}
    for p in tick.procs:
        kind, owner = p.owner() or ("unknown", "")
        if kind != "unknown":
            owners.setdefault((kind, owner), p)
        key = (str(p.gpu_index), kind, owner, *((str(p.pid), p.name or "") if pid_labels else ()))
        acc = sums.setdefault(key, [None, None, None, None])
        held, busy = _num(p.gpu_mem_bytes), _num(p.cpu_pct)
        if held is not None:
            acc[0] = (acc[0] or 0.0) + held
        if busy is not None:
            acc[1] = (acc[1] or 0.0) + busy / 100.0
        if p.workers is not None:
            acc[2] = (acc[2] or 0.0) + float(p.workers)
            acc[3] = (acc[3] or 0.0) + sum(c for c in map(_num, p.workers_cpu_pct) if c is not None) / 100.0
    for key, values in sums.items():
        for fam, v in zip((mem, cpu, workers, wcpu), values, strict=True):
            if v is not None:
                fam.add_metric(list(key), v)
    yield from (mem, cpu, workers, wcpu)
    yield _owner_info(owners)


OWNER_INFO = ("user", "slurm_job", "pod_namespace", "pod_name", "pod_uid", "container")  # the owner's labels


def _owner_info(owners: dict[tuple[str, str], ProcSample]) -> Metric:
    info = InfoMetricFamily(
        f"{PREFIX}_owner",
        "whose job the GPU processes are: one per owner, its user, Slurm job, pod and container",
        labels=["owner_kind", "owner"],
    )
    for (kind, owner), p in sorted(owners.items()):
        info.add_metric([kind, owner], {label: getattr(p, label) or "" for label in OWNER_INFO})
    return info


JOB_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("samples_per_s", "samples_per_second", "training samples per second over the tick (all ranks)", 1.0),
    ("steps_per_s", "steps_per_second", "training steps per second over the tick", 1.0),
    ("step_time_s", "step_seconds", "time of one step (the slowest rank)", 1.0),
    ("data_wait_pct", "data_wait_ratio", "share of each step spent waiting for the next batch (slowest rank)", 0.01),
    ("since_progress_s", "seconds_since_progress", "seconds since the job last finished a step", 1.0),
    ("loss", "loss", "the loss the job last printed", 1.0),
)
JOB_RANK_GAUGES = (JOB_GAUGES[2], JOB_GAUGES[3], JOB_GAUGES[4])


def _job(snap: Snapshot) -> Iterator[Metric]:
    """The job's own clock (its pulse or its log), when the tick has one: absent otherwise."""
    job = getattr(snap.tick, "job", None)
    if job is None:
        return
    info = InfoMetricFamily(f"{PREFIX}_job", "where the job figures come from (pulse, log:tqdm, ...)")
    info.add_metric([], {"source": str(job.source)})
    yield info
    for field_name, suffix, doc, scale in JOB_GAUGES:
        if (v := _num(getattr(job, field_name, None))) is not None:
            fam = _g(f"job_{suffix}", doc)
            fam.add_metric([], v * scale)
            yield fam
    if (steps := _num(getattr(job, "steps", None))) is not None:
        counter = CounterMetricFamily(f"{PREFIX}_job_steps", "the job's own step counter (resets with the job)")
        counter.add_metric([], steps)
        yield counter
    ranks = list(getattr(job, "ranks", None) or [])
    for field_name, suffix, doc, scale in JOB_RANK_GAUGES:
        fam = _g(f"job_rank_{suffix}", f"per rank: {doc}", ["rank"])
        for r in ranks:
            if (v := _num(getattr(r, field_name, None))) is not None:
                fam.add_metric([str(r.rank)], v * scale)
        yield fam


VERDICT_DOC = (
    "the verdict shown on the dashboard: always 1, its labels say pattern, bottleneck and cards; while the cards "
    f"themselves are faulty, bottleneck \"{GPU_FAULT}\" with the fault as its pattern (gpu_triage_gpu_fault)"
)


def _verdict(snap: Snapshot) -> Iterator[Metric]:
    v = snap.verdict
    if snap.tick_time is None:
        return
    if snap.fault is not None:  # no waveform verdict for cards that are gone: an idle/none would read as healthy
        yield from _fault_verdict(snap, snap.fault, snap.tick_time)
        return
    if v is None:
        return
    shown = _g("verdict", VERDICT_DOC, ["pattern", "bottleneck", "cards"])
    shown.add_metric([v.pattern, v.bottleneck, ",".join(str(i) for i in sorted(v.gpus))], 1.0)
    yield shown
    conf = _g("verdict_confidence_ratio", "confidence of the shown verdict, 0-1")
    conf.add_metric([], float(v.confidence))
    yield conf
    if (hr := v.headroom) is not None and hr.kind != "none":
        if hr.factor is not None:
            bound = _g("verdict_headroom_ratio", "most speed-up removing the bottleneck can give (x)", ["bottleneck"])
            bound.add_metric([v.bottleneck], float(hr.factor))
            yield bound
        if hr.share is not None:
            lost = _g("verdict_lost_ratio", "share of the judged time the cards wait or lose, 0-1", ["bottleneck"])
            lost.add_metric([v.bottleneck], float(hr.share))
            yield lost
    if snap.verdict_since is not None:
        age = _g("verdict_age_seconds", "seconds since the shown verdict began (tick time)")
        age.add_metric([], max(0.0, snap.tick_time - snap.verdict_since))
        yield age


def _fault_verdict(snap: Snapshot, fault: GpuFault, now: float) -> Iterator[Metric]:
    shown = _g("verdict", VERDICT_DOC, ["pattern", "bottleneck", "cards"])
    shown.add_metric([str(fault), GPU_FAULT, ",".join(str(i) for i in sorted(snap.lost_gpus))], 1.0)
    yield shown
    conf = _g("verdict_confidence_ratio", "confidence of the shown verdict, 0-1")
    conf.add_metric([], 1.0)  # the driver said so: nothing is inferred
    yield conf
    if snap.fault_since is not None:
        age = _g("verdict_age_seconds", "seconds since the shown verdict began (tick time)")
        age.add_metric([], max(0.0, now - snap.fault_since))
        yield age


class RecordingCollector(Collector):
    """``gpu_triage_recording_up``, registered by ``export --record`` only: without a recording the series
    is absent, so an alert on ``== 0`` fires for a recorder that stopped writing, never for a plain exporter."""

    def __init__(self, up: Callable[[], bool]) -> None:
        self._up = up

    def describe(self) -> Iterable[object]:
        return []

    def collect(self) -> Iterator[Metric]:
        doc = "1 while export --record writes its dataset, 0 from a write error to a retry that works"
        up = _g("recording_up", doc)
        up.add_metric([], 1.0 if self._up() else 0.0)
        yield up
