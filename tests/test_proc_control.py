"""Process details and signals (gpu_triage.proc_control): psutil and os.kill faked (the outside world)."""

from __future__ import annotations

import signal

from gpu_triage.proc_control import ProcControl


class NoSuchProcess(Exception):
    pass


class AccessDenied(Exception):
    pass


class ZombieProcess(NoSuchProcess):
    pass


class FakePsutil:
    NoSuchProcess = NoSuchProcess
    AccessDenied = AccessDenied
    ZombieProcess = ZombieProcess

    def __init__(self, table: dict[int, tuple[str, list[str]]]) -> None:
        self.table = table

    def Process(self, pid: int):  # noqa: N802 - psutil's name
        if pid not in self.table:
            raise NoSuchProcess(pid)
        user, argv = self.table[pid]

        class _P:
            def username(self) -> str:
                return user

            def cmdline(self) -> list[str]:
                return argv

        return _P()


class FakeKill:
    """os.kill: 100 is ours, 200 another user's, 300 gone."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []

    def __call__(self, pid: int, sig: int) -> None:
        if pid == 200:
            raise PermissionError(1, "Operation not permitted")
        if pid == 300:
            raise ProcessLookupError(3, "No such process")
        self.sent.append((pid, sig))


def _control() -> tuple[ProcControl, FakeKill]:
    kill = FakeKill()
    ps = FakePsutil({100: ("alice", ["python", "train.py", "--lr", "3e-4"]), 200: ("bob", ["python", "bob.py"])})
    return ProcControl(ps, kill, own_pid=42), kill


def test_details_are_the_user_and_the_full_command_line() -> None:
    control, _ = _control()
    d = control.details(100)
    assert (d.user, d.cmdline) == ("alice", "python train.py --lr 3e-4")
    gone = control.details(999)
    assert gone.user is None and gone.cmdline is None


def test_sigterm_and_sigkill_reach_a_process_we_may_signal() -> None:
    control, kill = _control()
    assert control.send(100, "SIGTERM") is None
    assert control.send(100, "SIGKILL") is None
    assert kill.sent == [(100, 0), (100, signal.SIGTERM), (100, 0), (100, signal.SIGKILL)]  # 0: the check first


def test_never_to_a_process_we_may_not_signal_and_say_why() -> None:
    control, kill = _control()
    reason = control.send(200, "SIGKILL")
    assert reason is not None and "may not signal PID 200" in reason and "bob" in reason
    assert control.send(300, "SIGTERM") == "PID 300 has already exited"
    assert "gpu-triage itself" in (control.send(42, "SIGTERM") or "")
    assert control.why_not(1) is not None
    assert all(sig == 0 for _, sig in kill.sent)  # nothing but the checks was sent


class _Times:
    def __init__(self, cpu_s: float) -> None:
        self.user, self.system = cpu_s * 0.75, cpu_s * 0.25


class _Proc:
    def __init__(self, pid: int, name: str, cpu_s: float | None, created: float = 1.0) -> None:
        times = None if cpu_s is None else _Times(cpu_s)  # None: hidden from us
        self.info = {"pid": pid, "name": name, "cpu_times": times, "create_time": created}


class IterPsutil:
    """psutil.process_iter over a table that the test changes between calls."""

    def __init__(self) -> None:
        self.procs: list[_Proc] = []

    def process_iter(self, attrs):
        return list(self.procs)


def test_host_only_lists_the_busiest_processes_since_the_last_tick() -> None:
    from gpu_triage.sources.procs import NO_CARD, BusiestProcesses

    now = [100.0]
    ps = IterPsutil()
    reader = BusiestProcesses(ps, clock=lambda: now[0], top=2)
    ps.procs = [_Proc(10, "idle", 5.0), _Proc(11, "trainer", 50.0), _Proc(12, "hidden", None), _Proc(13, "tar", 1.0)]
    assert reader.sample() == []  # no baseline yet: no figure rather than a wrong one
    now[0] += 2.0
    ps.procs = [_Proc(10, "idle", 5.0), _Proc(11, "trainer", 53.0), _Proc(12, "hidden", None), _Proc(13, "tar", 2.0),
                _Proc(13, "reused", 0.5, created=99.0)]
    top = reader.sample()
    assert [(p.pid, p.name, round(p.cpu_pct or 0)) for p in top] == [(11, "trainer", 150), (13, "tar", 50)]
    assert all(p.gpu_index == NO_CARD and p.gpu_mem_bytes is None for p in top)
