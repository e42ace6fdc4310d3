"""Process details and signals (gpu_triage.proc_control): psutil and os.kill faked (the outside world)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

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
        self.starts: dict[int, float] = {}  # pid -> start time (/proc/PID/stat's); 1.0 unless set
        self.created: dict[int, float] = {}  # pid -> create_time() (seconds since the epoch)
        self.rss: dict[int, int] = {}  # pid -> memory_info().rss; gone (NoSuchProcess) unless set

    def start_time(self, pid: int) -> float | None:
        """What /proc/PID/stat says of the table's processes: the start time, None for no process."""
        return self.starts.get(pid, 1.0) if pid in self.table else None

    def Process(self, pid: int):  # noqa: N802 - psutil's name
        if pid not in self.table:
            raise NoSuchProcess(pid)
        user, argv = self.table[pid]
        created, rss = self.created.get(pid, 0.0), self.rss.get(pid)

        class _P:
            def username(self) -> str:
                return user

            def cmdline(self) -> list[str]:
                return argv

            def create_time(self) -> float:
                return created

            def memory_info(self) -> Any:
                if rss is None:
                    raise NoSuchProcess(pid)
                return type("pmem", (), {"rss": rss})()

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
    return ProcControl(ps, kill, own_pid=42, start_time=ps.start_time), kill


def test_details_are_the_user_and_the_full_command_line() -> None:
    control, _ = _control()
    d = control.details(100)
    assert (d.user, d.cmdline) == ("alice", "python train.py --lr 3e-4")
    gone = control.details(999)
    assert gone.user is None and gone.cmdline is None


def test_sigterm_and_sigkill_reach_a_process_we_may_signal() -> None:
    control, kill = _control()
    for name in ("SIGTERM", "SIGKILL"):
        pinned = control.pin(100)
        assert not isinstance(pinned, str) and pinned.details.user == "alice"
        assert control.send(pinned, name) is None
    assert kill.sent == [(100, 0), (100, signal.SIGTERM), (100, 0), (100, signal.SIGKILL)]  # 0: the check first


def test_never_to_a_process_we_may_not_signal_and_say_why() -> None:
    control, kill = _control()
    reason = control.pin(200)
    assert isinstance(reason, str) and "may not signal PID 200" in reason and "bob" in reason
    assert control.pin(300) == "PID 300 has already exited"
    assert "gpu-triage itself" in str(control.pin(42))
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


# -- real processes, a real reused pid ------------------------------------------------------------------

def _in_new_pid_namespace(mode: str) -> dict:
    """tests/pidns_reuse.py in a pid namespace of its own, where ns_last_pid hands A's pid to B."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a pid namespace")
    script = Path(__file__).with_name("pidns_reuse.py")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script), mode],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pidfd", "proc_dir", "start"])
def test_a_pid_reused_after_the_confirmation_opened_gets_no_signal(mode: str) -> None:
    """A pinned (a pidfd; without pidfds an open /proc/PID and the start time; the start time alone), A
    exits, B gets A's pid: SIGKILL must not reach B, and the user is told the process has exited. Details
    are keyed by (pid, start): B's command line is B's, not A's cached one."""
    got = _in_new_pid_namespace(mode)
    assert got["reused"], "the namespace did not hand A's pid to B: the test proves nothing"
    assert got["b_alive"], "SIGKILL reached the process that got the pid later"
    assert "has exited" in got["error"] and "nothing sent" in got["error"]
    assert got["shown"] == "sleep 60" and got["after"] == "sleep 61"
    assert got["how"] == mode  # each path was the one taken


@pytest.mark.slow
def test_the_kill_dialog_never_signals_the_process_that_got_the_pid_later() -> None:
    """The dashboard's path: Tab, x (the dialog names A), A exits and B gets its pid, K."""
    got = _in_new_pid_namespace("ui")
    assert got["reused"]
    assert "sleep 60" in got["shown"]
    assert got["b_alive"], "SIGKILL reached the process that got the pid later"
    assert "has exited" in got["error"] and "SIGKILL sent" not in got["error"]


@pytest.mark.slow
def test_start_time_read_from_proc_names_one_process() -> None:
    import subprocess

    from gpu_triage.proc_control import proc_start_time

    child = subprocess.Popen(["sleep", "30"])
    try:
        start = proc_start_time(child.pid)
        assert start is not None and start == proc_start_time(child.pid)
        assert start >= (proc_start_time(os.getpid()) or 0)  # born after us
    finally:
        child.kill()
        child.wait()
    assert proc_start_time(child.pid) is None or proc_start_time(child.pid) != start


def test_a_start_time_that_changed_before_the_signal_stops_it() -> None:
    """Without pidfds or /proc directories (a fake /proc here): the start time is read again right before
    the signal; another one means another process, and nothing is sent."""
    kill = FakeKill()
    ps = FakePsutil({100: ("alice", ["python", "train.py"])})
    control = ProcControl(ps, kill, own_pid=42, start_time=ps.start_time)
    pinned = control.pin(100)
    assert not isinstance(pinned, str) and pinned.fd is None and pinned.proc_dir is None
    ps.starts[100] = 2.0  # 100 exited and another process got the pid
    ps.table[100] = ("mallory", ["sleep", "1000"])
    error = control.send(pinned, "SIGKILL")
    assert error is not None and "has exited" in error and "nothing sent" in error
    assert all(sig == 0 for _, sig in kill.sent)
    assert control.details(100).user == "mallory"  # the cache knows it is another process
