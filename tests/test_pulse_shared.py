"""The pulse on a shared server: another local user's directory, links, names and pids are hostile input.

Two real users (``useradd``, see tests/two_users.py) play the attacker A and the victim B.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_triage import pulse
from gpu_triage.sources import pulsereader
from gpu_triage.sources.job import JobMonitor
from gpu_triage.sources.pulsereader import MAX_PULSE_FILES, PulseReader
from tests.two_users import User, as_user, needs_root, open_tmp, users

pytestmark = needs_root
__all__ = ["open_tmp", "users"]  # fixtures, used by name


@pytest.fixture
def shared_tmp(open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A /tmp of our own (mode 1777, as /tmp is) as the default pulse directory's parent."""
    tmp = open_tmp / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("GPU_TRIAGE_PULSE_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(pulse, "_PULSE", None)
    monkeypatch.setattr(pulse, "PUBLISH_EVERY_S", 0.0)
    return tmp


def _valid(pid: int, **extra: Any) -> bytes:
    t = time.time()
    rec = {"v": 1, "pid": pid, "rank": 0, "t": t, "last_step": t, "steps": 10, "samples": 10_000_000,
           "wait_s": 0.0, "step_s": 1.0, "timed_steps": 10, **extra}
    return pulse.encode_record(rec)


def _publish_as_job() -> dict[str, Any]:
    """What a job does: a few steps; returns its counters and the warnings the pulse logged."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logging.getLogger("gpu_triage.pulse").addHandler(Keep(logging.WARNING))
    pulse._PULSE = None
    for _ in range(5):
        pulse.step(8)
    return {"errors": pulse.stats()["errors"], "said": said}


# -- the writer ---------------------------------------------------------------------------------------------


def test_a_directory_another_user_planted_is_refused_and_no_link_is_followed(
        users: tuple[User, User], shared_tmp: Path) -> None:
    a, b = users
    home = shared_tmp.parent / "b-home"
    home.mkdir(mode=0o700)
    victim = home / "precious.txt"
    victim.write_text("B's thesis\n")
    os.chown(home, b.uid, b.gid)
    os.chown(victim, b.uid, b.gid)
    planted = shared_tmp / f"gpu-triage-{b.uid}"

    def plant(child: int) -> None:  # A, ahead of B's job: a 0777 directory and a link for B's next pid
        def mk() -> None:
            os.mkdir(planted)
            os.chmod(planted, 0o777)
            os.symlink(victim, planted / f"pulse-{child}.json")

        as_user(a, mk)

    got = as_user(b, _publish_as_job, before=plant)
    assert victim.read_text() == "B's thesis\n"  # not truncated to a 512-byte record
    assert got["errors"] >= 1  # counted, never raised into the training
    assert len(got["said"]) == 1 and str(planted) in got["said"][0]
    assert f"belongs to uid {a.uid}" in got["said"][0]


def test_own_directory_open_to_others_is_refused(users: tuple[User, User], shared_tmp: Path) -> None:
    _a, b = users
    d = shared_tmp / f"gpu-triage-{b.uid}"

    def job() -> dict[str, Any]:
        os.mkdir(d)
        os.chmod(d, 0o777)
        return _publish_as_job()

    got = as_user(b, job)
    assert os.listdir(d) == []
    assert len(got["said"]) == 1 and "group or others may write to it (mode 777)" in got["said"][0]


def test_the_job_makes_its_directory_private_and_publishes(users: tuple[User, User], shared_tmp: Path) -> None:
    _a, b = users
    d = shared_tmp / f"gpu-triage-{b.uid}"

    def job() -> dict[str, Any]:
        out = _publish_as_job()
        out["names"] = os.listdir(d)
        out["pid"] = os.getpid()
        return out

    got = as_user(b, job)
    assert got["said"] == [] and got["errors"] == 0
    assert got["names"] == [f"pulse-{got['pid']}.json"]  # no temporary file beside it
    st = d.stat()
    assert st.st_uid == b.uid and st.st_mode & 0o777 == 0o700


def test_a_leftover_link_in_the_own_directory_is_replaced_not_written_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "pulse"
    d.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (d / f"pulse-{os.getpid()}.json").symlink_to(victim)
    monkeypatch.setenv("GPU_TRIAGE_PULSE_DIR", str(d))
    monkeypatch.setattr(pulse, "_PULSE", None)
    monkeypatch.setattr(pulse, "PUBLISH_EVERY_S", 0.0)
    pulse.step(4)
    assert victim.read_text() == "keep me"
    f = d / f"pulse-{os.getpid()}.json"
    assert not f.is_symlink() and pulse.decode_record(f.read_bytes())["steps"] == 1
    assert [n for n in os.listdir(d) if n != f.name] == []  # no temporary file left
    pulse._get().remove()


def _start_of(pid: int | str) -> int:
    """Field 22 of /proc/PID/stat: the process's start, in clock ticks since boot."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[19])


def test_the_record_carries_the_process_start_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_TRIAGE_PULSE_DIR", str(tmp_path / "p"))
    monkeypatch.setattr(pulse, "_PULSE", None)
    assert pulse.stats()["start_ticks"] == _start_of("self")


# -- the reader ---------------------------------------------------------------------------------------------


def _root_reader_sees(shared_tmp: Path) -> tuple[list, list[str]]:
    mon = JobMonitor()  # the default directory, as `export` and `record` run
    assert mon.pulse is not None and mon.pulse.directory == str(shared_tmp / "gpu-triage-0")
    job = mon.sample(now=time.time())
    return (job.ranks if job is not None else []), mon.messages()


@pytest.mark.parametrize("mode", [0o777, 0o700])
def test_root_ignores_a_pulse_directory_another_user_made(users: tuple[User, User], shared_tmp: Path,
                                                          mode: int) -> None:
    a, _b = users
    d = shared_tmp / "gpu-triage-0"

    def plant() -> None:
        os.mkdir(d)
        os.chmod(d, mode)
        (d / "pulse-1.json").write_bytes(_valid(1))

    as_user(a, plant)
    ranks, said = _root_reader_sees(shared_tmp)
    assert ranks == []  # no 1e7 samples/s for pid 1
    assert len(said) == 1 and str(d) in said[0] and "not read" in said[0]


def test_root_reads_its_own_private_directory(shared_tmp: Path) -> None:
    d = shared_tmp / "gpu-triage-0"
    d.mkdir(mode=0o700)
    (d / f"pulse-{os.getpid()}.json").write_bytes(_valid(os.getpid()))
    ranks, said = _root_reader_sees(shared_tmp)
    assert [r.pid for r in ranks] == [os.getpid()] and said == []


def test_links_and_non_canonical_names_are_not_read(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir(mode=0o700)
    me = os.getpid()
    elsewhere = tmp_path / "record"
    elsewhere.write_bytes(_valid(me))
    (d / f"pulse-{me}.json").symlink_to(elsewhere)  # as pulse-1.json -> /etc/shadow: never opened
    for name in (f"pulse-0{me}.json", f"pulse-+{me}.json", f"pulse- {me}.json", f"pulse-{me} .json"):
        (d / name).write_bytes(_valid(me))
    assert PulseReader(str(d)).sample(now=time.time(), interval_s=2.0) == []


def test_a_pid_beyond_any_pid_is_ignored_and_the_tick_survives(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir(mode=0o700)
    (d / "pulse-3000000000.json").write_bytes(_valid(3000000000))  # os.kill raised OverflowError
    (d / f"pulse-{os.getpid()}.json").write_bytes(_valid(os.getpid()))
    ranks = PulseReader(str(d)).sample(now=time.time(), interval_s=2.0)
    assert [r.pid for r in ranks] == [os.getpid()]


def test_files_read_per_tick_are_bounded_and_the_rest_said_once(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "p"
    d.mkdir(mode=0o700)
    extra = 300
    for pid in range(pulsereader.PID_MAX - extra + 1, pulsereader.PID_MAX + 1):
        (d / f"pulse-{pid}.json").write_bytes(b"x")
    (d / f"pulse-{os.getpid()}.json").write_bytes(_valid(os.getpid()))
    opened: list[str] = []
    real_open = os.open

    def spy(path: Any, *args: Any, **kw: Any) -> int:
        if str(path).startswith("pulse-"):
            opened.append(str(path))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(os, "open", spy)
    reader = PulseReader(str(d))
    for _ in range(2):
        ranks = reader.sample(now=time.time(), interval_s=2.0)
        assert [r.pid for r in ranks] == [os.getpid()]  # the live job is read first, not crowded out
    assert len(opened) == 2 * MAX_PULSE_FILES
    assert reader.messages == [f"pulse directory {d}: {extra + 1} pulse files, {extra + 1 - MAX_PULSE_FILES} "
                               f"not read (at most {MAX_PULSE_FILES} a tick)"]


def _sleeper(user: User | None = None) -> subprocess.Popen[bytes]:
    kw: dict[str, Any] = {} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}
    return subprocess.Popen(["sleep", "60"], **kw)  # noqa: S607 - coreutils sleep, any on the path


@pytest.mark.slow
def test_a_record_counts_only_for_a_process_of_the_file_owner(users: tuple[User, User], open_tmp: Path) -> None:
    _a, b = users
    d = open_tmp / "b-pulse"
    d.mkdir(mode=0o700)
    os.chown(d, b.uid, b.gid)
    job = _sleeper(b)
    try:
        def write() -> None:
            (d / "pulse-1.json").write_bytes(_valid(1))  # root's init, B's file: pid 1 does not publish for B
            (d / f"pulse-{os.getpid()}.json").write_bytes(_valid(os.getpid()))  # A's? no: root's pytest
            (d / f"pulse-{job.pid}.json").write_bytes(_valid(job.pid))  # B's own process

        as_user(b, write)
        ranks = PulseReader(str(d)).sample(now=time.time(), interval_s=2.0)  # root, told to read B's directory
        assert [r.pid for r in ranks] == [job.pid]

        # B's own reader: kill(1, 0) answers EPERM, which is no proof that pid 1 publishes for B
        def read() -> list[int | None]:
            return [r.pid for r in PulseReader(str(d)).sample(now=time.time(), interval_s=2.0)]

        assert as_user(b, read) == [job.pid]
    finally:
        job.kill()
        job.wait()


@pytest.mark.slow
def test_a_reused_pid_is_a_dead_job(tmp_path: Path) -> None:
    """A SIGKILLed job leaves its file; when an unrelated process gets its pid the file is not its."""
    d = tmp_path / "p"
    d.mkdir(mode=0o700)
    other = _sleeper()
    try:
        start = _start_of(other.pid)
        (d / f"pulse-{other.pid}.json").write_bytes(_valid(other.pid, start_ticks=start - 1))
        reader = PulseReader(str(d))
        assert reader.sample(now=time.time(), interval_s=2.0) == []
        (d / f"pulse-{other.pid}.json").write_bytes(_valid(other.pid, start_ticks=start))
        assert [r.pid for r in reader.sample(now=time.time(), interval_s=2.0)] == [other.pid]
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
def test_two_jobs_without_rank_are_two_series(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir(mode=0o700)
    other = _sleeper()
    try:
        for pid in (os.getpid(), other.pid):
            (d / f"pulse-{pid}.json").write_bytes(_valid(pid, rank=None, local_rank=None))
        reader = PulseReader(str(d))
        ranks = reader.sample(now=time.time(), interval_s=2.0)
        assert sorted(r.rank for r in ranks) == [0, 1]
        first = {r.pid: r.rank for r in ranks}
        # a process started with RANK=0 takes its number; the rankless ones keep distinct others
        third = _sleeper()
        try:
            (d / f"pulse-{third.pid}.json").write_bytes(_valid(third.pid, rank=0))
            again = reader.sample(now=time.time(), interval_s=2.0)
            by_pid = {r.pid: r.rank for r in again}
            assert by_pid[third.pid] == 0 and len(set(by_pid.values())) == 3
            kept = [pid for pid in first if first[pid] != 0]
            assert all(by_pid[pid] == first[pid] for pid in kept)  # a number, once given, stays
        finally:
            third.kill()
            third.wait()
    finally:
        other.kill()
        other.wait()


def _sleeper_with_pid(pid: int, tries: int = 50) -> subprocess.Popen[bytes] | None:
    """A ``sleep`` given ``pid`` (through ns_last_pid, as root), or None when another process took it first."""
    for _ in range(tries):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(["sleep", "60"])  # noqa: S607
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


@pytest.mark.slow
def test_a_sigkilled_job_whose_pid_is_reused_is_gone(tmp_path: Path) -> None:
    """A real job SIGKILLed: its file stays; an unrelated process given its pid does not revive it."""
    d = tmp_path / "p"
    code = ("import sys, time\nfrom gpu_triage import pulse\npulse.PUBLISH_EVERY_S = 0.0\n"
            "for _ in range(50):\n    pulse.step(8)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=str(Path(pulse.__file__).parents[1]), GPU_TRIAGE_PULSE_DIR=str(d))
    env.pop("RANK", None)
    job = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    assert job.stdout is not None and job.stdout.readline() == b"ready\n"
    reader = PulseReader(str(d))
    assert [r.pid for r in reader.sample(now=time.time(), interval_s=2.0)] == [job.pid]
    job.kill()
    job.wait()
    assert (d / f"pulse-{job.pid}.json").exists()  # no atexit after SIGKILL
    impostor = _sleeper_with_pid(job.pid)
    if impostor is None:
        pytest.skip(f"pid {job.pid} was taken by another process before a sleep could get it")
    try:
        assert reader.sample(now=time.time(), interval_s=2.0) == []
        assert PulseReader(str(d)).sample(now=time.time(), interval_s=2.0) == []  # a reader started later too
    finally:
        impostor.kill()
        impostor.wait()
