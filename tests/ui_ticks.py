"""Hand-made ticks for the dashboard tests: a small server whose every value is known in advance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpu_triage.model import DiskSample, GpuInfo, GpuSample, HostInfo, ProcSample, Tick

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def make_tick(i: int, *, gpus: int = 8, cores: int = 32, interval_s: float = 2.0, lost: set[int] | None = None,
              no_power: bool = False) -> Tick:
    """Card k alternates busy/idle with period k+2 ticks; card 0 hides a sawtooth inside each tick."""
    cards = []
    for k in range(gpus):
        if lost and k in lost:
            continue
        busy = (i // (k + 2)) % 2 == 0
        util = 95.0 if busy else 5.0
        cards.append(
            GpuSample(
                index=k,
                util_pct=util,
                util_min_pct=0.0 if k == 0 else util,
                util_max_pct=100.0 if k == 0 else util,
                sm_active_pct=util * 0.9,
                mem_used_bytes=(40 + k) << 30,
                mem_total_bytes=141 << 30,
                pcie_tx_bytes_per_s=1e8,
                pcie_rx_bytes_per_s=2e8,
                nvlink_tx_bytes_per_s=None,
                nvlink_rx_bytes_per_s=None,
                power_w=None if no_power else 300.0 + k,
                temp_c=50.0,
                sm_clock_mhz=1980.0,
            )
        )
    return Tick(
        ts=T0 + timedelta(seconds=interval_s * i),
        interval_s=interval_s,
        gpus=cards,
        cpu_pct=[float((c * 7 + i) % 100) for c in range(cores)],
        iowait_pct=1.5,
        host_mem_used_bytes=20 << 30,
        host_mem_total_bytes=256 << 30,
        disks=[
            DiskSample("nvme0n1", 12.0, 0.4, 5e7, 1e6, 400.0, 10.0),
            DiskSample("sda", None, None, None, None, None, None),
        ],
        procs=[
            ProcSample(
                pid=1000 + k,
                gpu_index=k,
                name="python",
                gpu_mem_bytes=(30 << 30),
                cpu_pct=99.0,
                workers=4,
                workers_cpu_pct=[80.0, 70.0, 60.0, 50.0],
                worker_pids=[2000, 2001, 2002, 2003],
            )
            for k in range(min(gpus, 2))
        ],
    )


def make_host(gpus: int = 8, cores: int = 32) -> HostInfo:
    return HostInfo(hostname="testbox", driver_version="580.0", cpu_count=cores,
                    gpus=[GpuInfo(index=k, name="NVIDIA H200") for k in range(gpus)])


class TickListSource:
    """A Source (the outside world) that hands out pre-made ticks; used with autostart=False."""

    def __init__(
        self, gpus: int = 8, cores: int = 32, *, gpu_available: bool = True, lost: set[int] | None = None
    ) -> None:
        from gpu_triage.sources.base import SourceStatus

        self.name = "test"
        self._host = make_host(gpus, cores)
        self._status = SourceStatus(gpu_available=gpu_available, lost_gpus=set(lost or ()))
        self._i = 0
        self.gpus, self.cores = gpus, cores

    def host_info(self) -> HostInfo:
        return self._host

    def sample(self) -> Tick:
        self._i += 1
        return make_tick(self._i, gpus=self.gpus, cores=self.cores)

    def status(self):
        return self._status

    def close(self) -> None:
        pass
