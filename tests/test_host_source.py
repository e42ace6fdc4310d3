"""The psutil host reader against a fake psutil module (deterministic counters -> exact percentages),
and the real LiveSource end to end on this machine (no GPU here: host-only)."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

import psutil
import pytest

from gpu_triage.sources.host import HostReader, is_physical_disk
from gpu_triage.sources.live import LiveSource

CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
MacCpuTimes = namedtuple("MacCpuTimes", "user nice system idle")
DiskIO = namedtuple(
    "DiskIO",
    "read_count write_count read_bytes write_bytes read_time write_time read_merged_count write_merged_count busy_time",
)
DiskIONoBusy = namedtuple("DiskIONoBusy", "read_count write_count read_bytes write_bytes read_time write_time")


def cpu(user: float = 0, system: float = 0, idle: float = 0, iowait: float = 0, guest: float = 0) -> CpuTimes:
    return CpuTimes(user, 0.0, system, idle, iowait, 0.0, 0.0, 0.0, guest, 0.0)


def disk(reads: int, writes: int, rbytes: int, wbytes: int, rtime: int, wtime: int, busy: int) -> DiskIO:
    return DiskIO(reads, writes, rbytes, wbytes, rtime, wtime, 0, 0, busy)


class FakePsutil:
    """Plays back one reading per call of each counter function."""

    def __init__(
        self,
        cpu_seq: list[list],
        disk_seq: list[dict],
        mem: tuple[int, int] = (64 << 30, 16 << 30),
        net_seq: list[dict] | None = None,
        swap: tuple[int, int] | None = (0, 0),
    ) -> None:
        self.cpu_seq, self.disk_seq = list(cpu_seq), list(disk_seq)
        self.mem_total, self.mem_available = mem
        self.net_seq = list(net_seq) if net_seq is not None else None
        self.swap = swap  # (used, total); None: /proc/swaps unreadable

    def swap_memory(self) -> SimpleNamespace:
        if self.swap is None:
            raise OSError("/proc/swaps: no such file")
        used, total = self.swap
        return SimpleNamespace(used=used, total=total, free=total - used, percent=0.0, sin=0, sout=0)

    def net_io_counters(self, pernic: bool = False) -> dict:
        assert pernic
        return self.net_seq.pop(0) if self.net_seq is not None else {}

    def cpu_times(self, percpu: bool = False) -> list:
        assert percpu
        return self.cpu_seq.pop(0)

    def disk_io_counters(self, perdisk: bool = False) -> dict:
        assert perdisk
        return self.disk_seq.pop(0)

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(total=self.mem_total, available=self.mem_available, used=1)

    def cpu_count(self, logical: bool = True) -> int:
        return 2


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_per_core_busy_and_iowait_from_cpu_time_deltas() -> None:
    ps = FakePsutil(
        cpu_seq=[
            [cpu(user=10, idle=90), cpu(user=50, idle=50)],
            # +2 s per core: core 0 busy 1.5 s of 2; core 1 idle 1 s and waiting on IO 1 s
            [cpu(user=11, system=0.5, idle=90.5), cpu(user=50, idle=51, iowait=1)],
        ],
        disk_seq=[{}, {}],
    )
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None)
    assert reader.sample().cpu_pct == []  # baseline only
    clock.t += 2.0
    out = reader.sample()
    assert out.cpu_pct == [pytest.approx(75.0), pytest.approx(0.0)]  # iowait is idle time, as in htop
    assert out.iowait_pct == pytest.approx(25.0)  # 1 s of 4 core-seconds
    assert out.mem_total_bytes == 64 << 30 and out.mem_used_bytes == 48 << 30


def test_guest_time_is_not_counted_twice() -> None:
    ps = FakePsutil(
        cpu_seq=[[cpu(user=0, idle=0)], [cpu(user=2, idle=2, guest=2)]],  # guest is already inside user
        disk_seq=[{}, {}],
    )
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None)
    reader.sample()
    clock.t += 4.0
    assert reader.sample().cpu_pct == [pytest.approx(50.0)]


def test_iowait_none_where_the_os_has_none() -> None:
    ps = FakePsutil(cpu_seq=[[MacCpuTimes(1, 0, 1, 8)], [MacCpuTimes(2, 0, 2, 9)]], disk_seq=[{}, {}])
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None)
    reader.sample()
    clock.t += 3.0
    out = reader.sample()
    assert out.iowait_pct is None and out.cpu_pct == [pytest.approx(200 / 3)]


def test_disk_busy_await_rates_like_iostat() -> None:
    mib = 1 << 20
    ps = FakePsutil(
        cpu_seq=[[cpu(idle=1)], [cpu(idle=3)]],
        disk_seq=[
            {"nvme0n1": disk(100, 50, 10 * mib, 5 * mib, 300, 200, 1000), "loop0": disk(0, 0, 0, 0, 0, 0, 0)},
            # in 2 s: 400 reads + 100 writes, 40 MiB read, 8 MiB written, 1500 + 1000 ms of IO time, busy 1.8 s
            {"nvme0n1": disk(500, 150, 50 * mib, 13 * mib, 1800, 1200, 2800), "loop0": disk(9, 9, 9, 9, 9, 9, 9)},
        ],
    )
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None)
    reader.sample()
    clock.t += 2.0
    disks = reader.sample().disks
    assert [d.name for d in disks] == ["nvme0n1"]  # loop devices are not storage
    d = disks[0]
    assert d.busy_pct == pytest.approx(90.0)
    assert d.await_ms == pytest.approx(2500 / 500)
    assert d.reads_per_s == pytest.approx(200.0) and d.writes_per_s == pytest.approx(50.0)
    assert d.read_bytes_per_s == pytest.approx(20 * mib) and d.write_bytes_per_s == pytest.approx(4 * mib)


def test_disk_without_busy_time_and_without_io() -> None:
    ps = FakePsutil(
        cpu_seq=[[cpu(idle=1)], [cpu(idle=2)]],
        disk_seq=[{"sda": DiskIONoBusy(5, 5, 0, 0, 10, 10)}, {"sda": DiskIONoBusy(5, 5, 0, 0, 10, 10)}],
    )
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None)
    reader.sample()
    clock.t += 1.0
    d = reader.sample().disks[0]
    assert d.busy_pct is None  # the OS does not say: n/a, not 0
    assert d.await_ms is None  # no IO completed: no mean time per IO
    assert d.reads_per_s == 0.0


def test_partitions_and_virtual_devices_are_skipped() -> None:
    for name in ("sda1", "nvme0n1p2", "vdb3", "mmcblk0p1", "loop3", "ram0", "zram0", "sr0"):
        assert not is_physical_disk(name, None), name
    for name in ("sda", "nvme0n1", "vdb", "md0", "mmcblk0"):
        assert is_physical_disk(name, None), name


def test_real_live_source_on_this_machine_runs_host_only() -> None:
    source = LiveSource()
    try:
        status = source.status()
        if status.gpu_available:
            pytest.skip("this machine has an NVIDIA driver: the host-only path is not what runs here")
        assert "No NVIDIA driver found" in " ".join(status.messages)
        tick = source.sample()
        assert tick.gpus == [] and tick.procs == []
        assert len(tick.cpu_pct) == psutil.cpu_count(logical=True)
        assert all(0.0 <= v <= 100.0 for v in tick.cpu_pct)
        assert tick.host_mem_total_bytes and tick.host_mem_used_bytes
        physical = [n for n in psutil.disk_io_counters(perdisk=True) or {} if is_physical_disk(n, None)]
        if physical:
            assert tick.disks, "a machine with block devices shows at least one"
        assert all(not d.name.startswith("loop") for d in tick.disks)
        assert tick.interval_s > 0
        info = source.host_info()
        assert info.cpu_count == psutil.cpu_count(logical=True) and info.hostname
    finally:
        source.close()


NetIO = namedtuple("NetIO", "bytes_sent bytes_recv packets_sent packets_recv errin errout dropin dropout")


def nic(recv: int, sent: int) -> NetIO:
    return NetIO(sent, recv, 0, 0, 0, 0, 0, 0)


def _ib_port(root, device: str, port: int, rcv_words: int, xmit_words: int) -> None:
    counters = root / device / "ports" / str(port) / "counters"
    counters.mkdir(parents=True, exist_ok=True)
    (counters / "port_rcv_data").write_text(f"{rcv_words}\n")
    (counters / "port_xmit_data").write_text(f"{xmit_words}\n")


def test_swap_used_and_total_are_read_each_tick() -> None:
    ps = FakePsutil(cpu_seq=[[cpu(idle=1)]], disk_seq=[{}], swap=(3 << 30, 8 << 30))
    out = HostReader(ps, clock=FakeClock(), sys_block=None, sys_infiniband=None).sample()
    assert (out.swap_used_bytes, out.swap_total_bytes) == (3 << 30, 8 << 30)


def test_unreadable_swap_is_none_not_zero() -> None:
    ps = FakePsutil(cpu_seq=[[cpu(idle=1)]], disk_seq=[{}], swap=None)
    out = HostReader(ps, clock=FakeClock(), sys_block=None, sys_infiniband=None).sample()
    assert out.swap_used_bytes is None and out.swap_total_bytes is None


def test_network_rates_per_interface_from_counter_deltas_without_loopback() -> None:
    ps = FakePsutil(
        cpu_seq=[[cpu(idle=1)], [cpu(idle=3)], [cpu(idle=5)]],
        disk_seq=[{}, {}, {}],
        net_seq=[
            {"lo": nic(0, 0), "eth0": nic(1_000, 2_000)},
            {"lo": nic(9**9, 9**9), "eth0": nic(201_000, 42_000), "ib0": nic(5, 5)},
            {"lo": nic(0, 0), "eth0": nic(100, 52_000), "ib0": nic(4_000_005, 5)},  # eth0 rx reset
        ],
    )
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None, sys_infiniband=None)
    assert reader.sample().nets == []  # baseline only
    clock.t += 2.0
    out = reader.sample()
    assert [(n.name, n.rx_bytes_per_s, n.tx_bytes_per_s) for n in out.nets] == [("eth0", 100_000.0, 20_000.0)]
    clock.t += 2.0
    out = reader.sample()
    rates = {n.name: (n.rx_bytes_per_s, n.tx_bytes_per_s) for n in out.nets}
    assert rates == {"eth0": (None, 5_000.0), "ib0": (2_000_000.0, 0.0)}  # a counter that went back: no rate


def test_infiniband_ports_from_sysfs_counters_in_four_byte_words(tmp_path) -> None:
    root = tmp_path / "infiniband"
    _ib_port(root, "mlx5_0", 1, rcv_words=1_000, xmit_words=0)
    _ib_port(root, "mlx5_1", 1, rcv_words=0, xmit_words=0)
    (root / "mlx5_1" / "ports" / "2" / "counters").mkdir(parents=True)  # a port without data counters
    ps = FakePsutil(cpu_seq=[[cpu(idle=1)], [cpu(idle=3)]], disk_seq=[{}, {}])
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None, sys_infiniband=root)
    reader.sample()
    _ib_port(root, "mlx5_0", 1, rcv_words=1_000 + 500_000, xmit_words=250_000)  # 2 MB in, 1 MB out
    clock.t += 2.0
    out = reader.sample()
    rates = {n.name: (n.rx_bytes_per_s, n.tx_bytes_per_s) for n in out.nets}
    assert rates == {"mlx5_0/1": (1_000_000.0, 500_000.0), "mlx5_1/1": (0.0, 0.0)}


def test_no_infiniband_tree_means_no_ports(tmp_path) -> None:
    ps = FakePsutil(cpu_seq=[[cpu(idle=1)], [cpu(idle=3)]], disk_seq=[{}, {}])
    clock = FakeClock()
    reader = HostReader(ps, clock=clock, sys_block=None, sys_infiniband=tmp_path / "absent")
    reader.sample()
    clock.t += 2.0
    assert reader.sample().nets == []
