"""GPU processes and their workers: fake NVML + fake psutil (outside world), and the real procfs walk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from fake_nvml import FakeHandle, FakeNvml, FakeProcess, h200_box
from gpu_triage.nvmlwrap import load_nvml
from gpu_triage.sources.procs import GpuProcessReader, descendants_procfs, proc_children, proc_cpu_seconds

CpuTimes = namedtuple("CpuTimes", "user system")


class NoSuchProcess(Exception):
    pass


class AccessDenied(Exception):
    pass


class FakeOsProcess:
    """One process of the fake OS: cpu seconds and children settable by the test."""

    def __init__(self, pid: int, name: str, created: float, ppid: int | None = None) -> None:
        self.pid, self.name_, self.created, self.ppid = pid, name, created, ppid
        self.cpu_s = 0.0
        self.alive = True
        self.denied = False


class FakePsutil:
    LINUX = False  # force the portable children() path in these tests
    NoSuchProcess = NoSuchProcess
    AccessDenied = AccessDenied
    ZombieProcess = NoSuchProcess

    def __init__(self) -> None:
        self.procs: dict[int, FakeOsProcess] = {}
        self.opened = 0

    def add(self, pid: int, name: str, created: float, ppid: int | None = None) -> FakeOsProcess:
        self.procs[pid] = FakeOsProcess(pid, name, created, ppid)
        return self.procs[pid]

    def Process(self, pid: int) -> FakeHandleProcess:  # noqa: N802 - psutil's name
        os_proc = self.procs.get(pid)
        if os_proc is None or not os_proc.alive:
            raise NoSuchProcess(pid)
        self.opened += 1
        return FakeHandleProcess(self, pid)


class FakeHandleProcess:
    def __init__(self, ps: FakePsutil, pid: int) -> None:
        self.ps, self.pid = ps, pid
        self.created = ps.procs[pid].created  # psutil keeps the creation time read when it was made

    def is_running(self) -> bool:
        """psutil's: the pid still exists and its process has this object's creation time (not reused)."""
        p = self.ps.procs.get(self.pid)
        return p is not None and p.alive and p.created == self.created

    def _os(self) -> FakeOsProcess:
        p = self.ps.procs.get(self.pid)
        if p is None or not p.alive:
            raise NoSuchProcess(self.pid)
        if p.denied:
            raise AccessDenied(self.pid)
        return p

    def create_time(self) -> float:
        return self._os().created

    def name(self) -> str:
        return self._os().name_

    def cpu_times(self) -> CpuTimes:
        p = self._os()
        return CpuTimes(p.cpu_s * 0.75, p.cpu_s * 0.25)

    def children(self, recursive: bool = False) -> list[FakeHandleProcess]:
        self._os()
        out, frontier = [], [self.pid]
        while frontier:
            parent = frontier.pop(0)
            for p in self.ps.procs.values():
                if p.ppid == parent and p.alive:
                    out.append(FakeHandleProcess(self.ps, p.pid))
                    if recursive:
                        frontier.append(p.pid)
        return out


class World:
    """A fake driver and OS sharing one clock."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake
        self.ps = FakePsutil()
        self.mono = 1000.0
        self.wall = 1_700_000_000.0
        self.reader = GpuProcessReader(
            load_nvml(fake),
            [(i, FakeHandle(i)) for i in range(len(fake.cards))],
            self.ps,
            clock=lambda: self.mono,
            wall_clock=lambda: self.wall,
        )

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def test_process_and_recursive_workers_cpu_from_deltas() -> None:
    fake = h200_box(1)
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=8 << 30)]
    world = World(fake)
    main = world.ps.add(100, "python3", created=world.wall - 600)
    w1 = world.ps.add(101, "pt_data_worker", created=world.wall - 500, ppid=100)
    w2 = world.ps.add(102, "pt_data_worker", created=world.wall - 500, ppid=100)
    grandchild = world.ps.add(103, "decoder", created=world.wall - 400, ppid=101)
    world.ps.add(200, "unrelated", created=world.wall - 600)
    first = world.reader.sample()[0]
    assert first.cpu_pct is None  # no baseline on the very first look: no figure rather than a fake 0
    world.advance(2.0)
    main.cpu_s += 1.0  # half a core
    w1.cpu_s += 2.0  # one full core
    w2.cpu_s += 4.0  # two cores (threads)
    grandchild.cpu_s += 0.5
    proc = world.reader.sample()[0]
    assert (proc.pid, proc.gpu_index, proc.name, proc.gpu_mem_bytes) == (100, 0, "python3", 8 << 30)
    assert proc.cpu_pct == pytest.approx(50.0)
    assert proc.workers == 3 and sorted(proc.worker_pids) == [101, 102, 103]
    by_pid = dict(zip(proc.worker_pids, proc.workers_cpu_pct, strict=True))
    assert by_pid == {101: pytest.approx(100.0), 102: pytest.approx(200.0), 103: pytest.approx(25.0)}


def test_worker_born_since_last_tick_is_measured_from_its_birth() -> None:
    fake = h200_box(1)
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=1)]
    world = World(fake)
    world.ps.add(100, "python3", created=world.wall - 600)
    world.reader.sample()
    world.advance(2.0)
    born = world.ps.add(150, "pt_data_worker", created=world.wall - 1.0, ppid=100)  # a respawned worker
    born.cpu_s = 0.9
    proc = world.reader.sample()[0]
    assert proc.worker_pids == [150] and proc.workers_cpu_pct == [pytest.approx(90.0)]


def test_vanished_and_denied_processes_do_not_break_the_tick() -> None:
    fake = h200_box(2)
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=None)]
    fake.cards[1].processes = [FakeProcess(pid=300, usedGpuMemory=5)]
    world = World(fake)
    world.ps.add(100, "python3", created=world.wall - 60)
    worker = world.ps.add(101, "worker", created=world.wall - 60, ppid=100)
    other = world.ps.add(300, "someone_else", created=world.wall - 60)
    world.reader.sample()
    world.advance(2.0)
    worker.alive = False  # exited between listing and reading
    other.denied = True  # another user's process
    procs = {p.pid: p for p in world.reader.sample()}
    assert procs[100].gpu_mem_bytes is None and procs[100].workers == 0
    assert procs[300].cpu_pct is None and procs[300].gpu_index == 1


def test_a_gpu_process_under_another_is_not_its_worker() -> None:
    fake = h200_box(2)
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=1)]
    fake.cards[1].processes = [FakeProcess(pid=101, usedGpuMemory=1)]  # mp.spawn'ed rank 1
    world = World(fake)
    world.ps.add(100, "rank0", created=world.wall - 60)
    world.ps.add(101, "rank1", created=world.wall - 60, ppid=100)
    world.ps.add(102, "worker", created=world.wall - 60, ppid=100)
    world.reader.sample()
    world.advance(1.0)
    procs = {p.pid: p for p in world.reader.sample()}
    assert procs[100].worker_pids == [102]


def test_process_objects_are_cached_between_ticks_and_forgotten_when_gone() -> None:
    fake = h200_box(1)
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=1)]
    world = World(fake)
    world.ps.add(100, "python3", created=world.wall - 60)
    for _ in range(5):
        world.advance(1.0)
        world.reader.sample()
    assert world.ps.opened == 1
    fake.cards[0].processes = []
    world.reader.sample()
    assert world.reader._tracked == {}  # noqa: SLF001 - the cache must not grow without bound


def test_lost_card_is_skipped() -> None:
    fake = h200_box(2)
    fake.cards[1].processes = [FakeProcess(pid=100, usedGpuMemory=1)]
    world = World(fake)
    assert world.reader.sample(lost={1}) == []


def test_each_process_has_its_own_sm_share_and_no_sample_is_no_data() -> None:
    """NVML's per-process smUtil, the mean of the driver's samples newer than the last tick; a process
    without a sample (idle, or a driver answering NOT_FOUND) is None, shown n/a, never 0."""
    fake = h200_box(2)
    fake.cards[0].process_utilization_not_found = False
    fake.cards[1].process_utilization_not_found = False
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=1, sm_util=87), FakeProcess(pid=101, usedGpuMemory=1)]
    fake.cards[1].processes = [FakeProcess(pid=200, usedGpuMemory=1, sm_util=3)]
    world = World(fake)
    for pid in (100, 101, 200):
        world.ps.add(pid, "python3", created=world.wall - 600)
    fake.advance(2.0)
    world.advance(2.0)
    got = {p.pid: p.sm_pct for p in world.reader.sample()}
    # 101 shares card 0 but had no sample; 200 is alone on card 1 and has its own share too, as nvitop shows
    assert got == {100: 87.0, 101: None, 200: 3.0}
    assert fake.card_calls[(1, "nvmlDeviceGetProcessUtilization")] == 1
    # nothing newer since: the same samples are not counted twice, the tick has no data
    assert {p.pid: p.sm_pct for p in world.reader.sample()} == {100: None, 101: None, 200: None}
    fake.cards[0].processes[0].sm_util = 40
    fake.advance(2.0)
    world.advance(2.0)
    assert {p.pid: p.sm_pct for p in world.reader.sample()}[100] == 40.0


def test_a_driver_without_per_process_samples_gives_none_not_zero() -> None:
    fake = h200_box(1)  # as the real driver starts: NOT_FOUND until a process has a sample
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=1, sm_util=50), FakeProcess(pid=101, sm_util=9)]
    world = World(fake)
    world.ps.add(100, "python3", created=world.wall - 600)
    world.ps.add(101, "python3", created=world.wall - 600)
    fake.advance(2.0)
    assert [p.sm_pct for p in world.reader.sample()] == [None, None]
    assert fake.card_calls[(0, "nvmlDeviceGetProcessUtilization")] == 1
    fake.missing.add("nvmlDeviceGetProcessUtilization")  # an older binding without the call
    fake.cards[0].process_utilization_not_found = False
    fake.advance(2.0)
    assert [p.sm_pct for p in world.reader.sample()] == [None, None]


@pytest.mark.slow
def test_procfs_finds_children_and_grandchildren_of_a_real_process() -> None:
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no procfs here")
    script = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        found = descendants_procfs(parent.pid)
        if found is None:
            pytest.skip("kernel without /proc/PID/task/TID/children")
        assert found == [grandchild]
        assert descendants_procfs(grandchild) == []
    finally:
        for pid in descendants_procfs(parent.pid) or []:  # only the processes this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.kill()
        parent.wait()


def _fake_proc(root: Path, pid: int, threads: dict[int, str]) -> None:
    """/proc/PID/task/TID/children files of a fake procfs: tid -> the file's text."""
    for tid, text in threads.items():
        tid_dir = root / str(pid) / "task" / str(tid)
        tid_dir.mkdir(parents=True)
        (tid_dir / "children").write_text(text)


def test_proc_children_reads_every_threads_children_file(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 10, {10: "11 12 ", 13: "", 14: "15 "})  # a worker forked by a thread other than main
    _fake_proc(tmp_path, 11, {11: "16 "})
    for pid in (12, 15, 16):
        _fake_proc(tmp_path, pid, {pid: ""})
    assert sorted(proc_children(10, tmp_path) or []) == [11, 12, 15]
    assert sorted(descendants_procfs(10, str(tmp_path)) or []) == [11, 12, 15, 16]
    assert descendants_procfs(16, tmp_path) == []


def test_proc_children_is_none_when_procfs_cannot_tell(tmp_path: Path) -> None:
    assert proc_children(10, tmp_path) is None  # no such process
    (tmp_path / "20" / "task" / "20").mkdir(parents=True)  # a kernel without CONFIG_PROC_CHILDREN
    assert proc_children(20, tmp_path) is None
    assert descendants_procfs(20, tmp_path) is None


def test_proc_children_reads_a_children_file_longer_than_one_read(tmp_path: Path) -> None:
    many = list(range(1_000_000, 1_012_000))  # 96 KB of pids: more than one 64 KiB read
    _fake_proc(tmp_path, 10, {10: "".join(f"{p} " for p in many)})
    assert proc_children(10, tmp_path) == many


def _fake_stat(root: Path, pid: int, comm: str, utime: int, stime: int, start: int = 12345) -> None:
    """/proc/PID/stat as the kernel writes it (times in clock ticks; ``start``: field 22, starttime)."""
    rest = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "100", "0", "0", "0", str(utime), str(stime)]
    rest += ["0", "0", "20", "0", "41", "0", str(start)]
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")


def test_proc_cpu_seconds_reads_user_plus_system_from_stat(tmp_path: Path) -> None:
    tck = os.sysconf("SC_CLK_TCK")
    _fake_stat(tmp_path, 10, "pt_data_worker", utime=3 * tck, stime=tck // 2)
    _fake_stat(tmp_path, 11, "a (weird) name", utime=tck, stime=0)  # comm may hold spaces and parentheses
    assert proc_cpu_seconds(10, tmp_path) == pytest.approx(3.5)
    assert proc_cpu_seconds(11, str(tmp_path)) == pytest.approx(1.0)
    assert proc_cpu_seconds(12, tmp_path) is None  # gone


def test_proc_cpu_seconds_of_this_process_is_what_psutil_says() -> None:
    if not Path("/proc/self/stat").is_file():
        pytest.skip("no procfs here")
    import psutil

    sum(range(2_000_000))  # some CPU time of our own
    times = psutil.Process().cpu_times()
    ours = proc_cpu_seconds(os.getpid())
    assert ours is not None and ours >= times.user + times.system - 0.011  # ticks of 10 ms; ours is read later
    assert ours <= sum(psutil.Process().cpu_times()[:2]) + 0.011


def _procfs_reader(tmp_path: Path, ps: FakePsutil, mono: list[float], wall: float) -> GpuProcessReader:
    fake = h200_box(1)
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=1)]
    return GpuProcessReader(
        load_nvml(fake),
        [(0, FakeHandle(0))],
        ps,
        clock=lambda: mono[0],
        wall_clock=lambda: wall,
        use_procfs=True,
        proc_root=tmp_path,
    )


def test_reader_takes_workers_and_cpu_from_a_procfs_tree(tmp_path: Path) -> None:
    tck = os.sysconf("SC_CLK_TCK")
    ps = FakePsutil()
    wall = 1_700_000_000.0
    ps.add(100, "python3", created=wall - 60)
    ps.add(101, "pt_data_worker", created=wall - 60)  # no ppid: psutil's children() would not see it
    _fake_proc(tmp_path, 100, {100: "", 105: "101 "})  # forked by thread 105, not the main thread
    _fake_proc(tmp_path, 101, {101: ""})
    _fake_stat(tmp_path, 100, "python3", utime=10 * tck, stime=0)
    _fake_stat(tmp_path, 101, "pt_data_worker", utime=20 * tck, stime=0)
    mono = [1000.0]
    reader = _procfs_reader(tmp_path, ps, mono, wall)
    reader.sample()
    mono[0] += 2.0
    _fake_stat(tmp_path, 100, "python3", utime=10 * tck + tck // 2, stime=tck // 2)  # one second in two
    _fake_stat(tmp_path, 101, "pt_data_worker", utime=22 * tck, stime=0)  # two seconds in two
    proc = reader.sample()[0]
    assert proc.cpu_pct == pytest.approx(50.0)
    assert proc.worker_pids == [101] and proc.workers_cpu_pct == [pytest.approx(100.0)]
    (tmp_path / "101" / "stat").unlink()  # the worker exited
    mono[0] += 2.0
    assert reader.sample()[0].worker_pids == []


def test_reader_falls_back_to_psutil_when_procfs_has_no_children_files(tmp_path: Path) -> None:
    ps = FakePsutil()
    ps.add(100, "python3", created=1.0)
    ps.add(101, "pt_data_worker", created=1.0, ppid=100)
    (tmp_path / "100" / "task" / "100").mkdir(parents=True)  # a kernel without CONFIG_PROC_CHILDREN
    _fake_stat(tmp_path, 100, "python3", utime=1, stime=0)
    _fake_stat(tmp_path, 101, "pt_data_worker", utime=1, stime=0)
    mono = [1000.0]
    reader = _procfs_reader(tmp_path, ps, mono, 1_700_000_000.0)
    reader.sample()
    mono[0] += 1.0
    assert reader.sample()[0].worker_pids == [101]


def test_each_gpu_process_carries_its_owner_and_a_reused_pid_is_asked_again(tmp_path: Path) -> None:
    data = Path(__file__).parent / "data" / "cgroup"
    ps = FakePsutil()
    wall = 1_700_000_000.0
    ps.add(100, "python3", created=wall - 60)
    _fake_proc(tmp_path, 100, {100: ""})
    _fake_stat(tmp_path, 100, "python3", utime=1, stime=0)
    (tmp_path / "100" / "cgroup").write_text((data / "slurm-v2").read_text())
    (tmp_path / "100" / "status").write_text("Name:\tpython3\nUid:\t0\t0\t0\t0\n")
    mono = [1000.0]
    reader = _procfs_reader(tmp_path, ps, mono, wall)
    proc = reader.sample()[0]
    assert (proc.slurm_job, proc.user, proc.owner()) == ("1392969", "root", ("slurm", "1392969"))
    # pid 100 exits and is reused by a pod's process: a new start time, so its owner is read again
    ps.add(100, "python3", created=wall - 1)
    reader._tracked.clear()  # psutil's cached handle went with the old process (as sample() forgets it)
    (tmp_path / "100" / "cgroup").write_text((data / "k8s-v2-systemd-containerd").read_text())
    mono[0] += 2.0
    proc = reader.sample()[0]
    assert proc.slurm_job is None and proc.owner() == ("pod", "0e886e9a-3879-45f9-b44d-86ef9df03224")


def test_a_reused_pid_is_a_new_process_with_its_own_name_and_cpu_procfs(tmp_path: Path) -> None:
    """The GPU process 100 exits and another process gets pid 100 between two ticks: its name is its own
    (not the cached one) and its CPU is measured from its birth, not against the old one's CPU seconds."""
    tck = os.sysconf("SC_CLK_TCK")
    ps = FakePsutil()
    wall = 1_700_000_000.0
    ps.add(100, "trainer", created=wall - 600)
    _fake_proc(tmp_path, 100, {100: ""})
    _fake_stat(tmp_path, 100, "trainer", utime=500 * tck, stime=0, start=1000)
    mono = [1000.0]
    reader = _procfs_reader(tmp_path, ps, mono, wall)
    reader.sample()
    mono[0] += 2.0
    _fake_stat(tmp_path, 100, "trainer", utime=501 * tck, stime=0, start=1000)
    assert reader.sample()[0].cpu_pct == pytest.approx(50.0)
    ps.add(100, "intruder", created=wall + 1.0)  # reused: born after our last tick
    _fake_stat(tmp_path, 100, "intruder", utime=tck, stime=0, start=1000 + 600 * tck)
    mono[0] += 2.0
    reader._wall = lambda: wall + 2.0  # noqa: SLF001 - the wall clock of this tick
    proc = reader.sample()[0]
    assert proc.name == "intruder"
    assert proc.cpu_pct == pytest.approx(100.0)  # 1 s in its 1 s of life; against the old one's: 0


def test_a_reused_pid_is_a_new_process_with_its_own_name_portable() -> None:
    fake = h200_box(1)
    fake.cards[0].processes = [FakeProcess(pid=100, usedGpuMemory=1)]
    world = World(fake)
    old = world.ps.add(100, "trainer", created=world.wall - 600)
    old.cpu_s = 500.0
    world.reader.sample()
    world.advance(2.0)
    old.cpu_s = 501.0
    assert world.reader.sample()[0].name == "trainer"
    new = world.ps.add(100, "intruder", created=world.wall + 1.0)
    new.cpu_s = 1.0
    world.advance(2.0)
    proc = world.reader.sample()[0]
    assert proc.name == "intruder" and proc.cpu_pct == pytest.approx(100.0)
