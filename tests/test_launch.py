"""`gpu-triage run -- CMD`: the job started as our child, its signals, exit status and lifetime passed through, its
pulse wired, the headless recording closed when it ends. Real processes throughout (a small Python job; no GPU:
the live source reads the host)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.trace.reader import open_trace

pytestmark = pytest.mark.slow

APP = str(Path(__file__).parents[1] / "app")


def _gpu_triage(*argv: str, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=APP + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "gpu_triage", *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # type: ignore[call-overload]


def _wait_for_line(proc: subprocess.Popen[str], want: str, bound_s: float = 60.0) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + bound_s
    for line in proc.stdout:
        if line.strip() == want:
            return
        assert time.monotonic() < deadline, f"no {want!r} within {bound_s} s"
    raise AssertionError(f"the output ended before {want!r}: rc={proc.wait()}, {proc.stderr.read()}")  # type: ignore[union-attr]


def _wait_for_a_tick(stream: Path, bound_s: float = 60.0) -> None:
    """Until the recorder's stream holds a tick: it grows past the schema it starts with (bounded)."""
    deadline = time.monotonic() + bound_s
    first = None
    while time.monotonic() < deadline:
        size = stream.stat().st_size if stream.exists() else None
        if first is None:
            first = size
        elif size is not None and size > first:
            return
        time.sleep(0.05)
    raise AssertionError(f"no tick in {stream} within {bound_s} s")


def test_the_job_gets_its_pulse_and_tracer_and_its_exit_status_is_ours(tmp_path: Path) -> None:
    seen = tmp_path / "seen.txt"
    job = textwrap.dedent(f"""
        import os, sys
        open({str(seen)!r}, "w").write(os.environ["GPU_TRIAGE_PULSE_DIR"] + "\\n" + os.environ["GPU_TRIAGE_TRACER"]
                                       + "\\n" + str(os.getpgid(0) == os.getpid()))
        sys.exit(3)
    """)
    out = tmp_path / "run.parquet"
    before = os.environ.get("GPU_TRIAGE_PULSE_DIR")
    try:
        assert main(["run", "--record", str(out), "--interval", "0.5", "--", sys.executable, "-c", job]) == 3
        pulse_dir, tracer, own_group = seen.read_text().splitlines()
        assert Path(pulse_dir).is_dir() and (Path(pulse_dir).stat().st_mode & 0o077) == 0  # private, as pulse wants
        assert pulse_dir == os.environ["GPU_TRIAGE_PULSE_DIR"]  # the monitor reads where the job writes
        assert int(tracer) == os.getpid() and own_group == "True"
    finally:
        if before is None:
            os.environ.pop("GPU_TRIAGE_PULSE_DIR", None)
        else:
            os.environ["GPU_TRIAGE_PULSE_DIR"] = before
    # a job that ended before the first tick leaves nothing to record: said, and its status is still ours


def test_sigterm_goes_to_the_jobs_whole_group_and_the_recording_closes(tmp_path: Path) -> None:
    """A launcher job (torchrun's shape: a parent and a child rank in one group) traps SIGTERM in both: gpu-triage
    forwards it to the group, records until the parent has ended, and exits with the parent's own status."""
    marks = tmp_path / "marks"
    marks.mkdir()
    job = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        rank = '''
        import os, signal, sys, time
        def bye(*_):
            open(os.path.join({str(marks)!r}, "rank"), "w").write("TERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("rank ready", flush=True)
        while True:
            time.sleep(0.1)
        '''
        child = subprocess.Popen([sys.executable, "-c", rank], stdout=subprocess.PIPE, text=True)
        child.stdout.readline()
        def bye(*_):
            child.wait(timeout=30)
            open(os.path.join({str(marks)!r}, "launcher"), "w").write("TERM")
            sys.exit(7)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        while True:
            time.sleep(0.1)
    """)
    out = tmp_path / "run.parquet"
    proc = _gpu_triage("run", "--record", str(out), "--interval", "0.2", "--", sys.executable, "-c", job)
    try:
        _wait_for_line(proc, "ready")
        _wait_for_a_tick(Path(str(out) + ".partial.arrows"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 7
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (marks / "rank").read_text() == "TERM" and (marks / "launcher").read_text() == "TERM"
    assert out.exists() and not Path(str(out) + ".partial.arrows").exists()
    assert open_trace(out).n >= 1


def test_a_job_killed_by_a_signal_gives_its_shell_status(tmp_path: Path) -> None:
    job = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    out = tmp_path / "run.parquet"
    # the status main returns is the one the process exits with (__main__ passes it to sys.exit)
    status = main(["run", "--record", str(out), "--interval", "0.5", "--", sys.executable, "-c", job])
    assert status == 128 + signal.SIGKILL


def test_a_command_that_cannot_start_and_a_missing_one_are_one_line_each(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.parquet"
    assert main(["run", "--record", str(out), "--", str(tmp_path / "no-such-trainer")]) == 127
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot start" in err[0] and "no-such-trainer" in err[0]
    assert main(["run", "--record", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "after --" in err[0]
    assert not out.exists()  # nothing was recorded for a job that never ran


def test_doctor_names_the_launcher_where_it_gives_stacks() -> None:
    from gpu_triage.doctor.facts import Facts, SoftwareFacts
    from gpu_triage.doctor.host_checks import check_stacks, stack_ways
    from gpu_triage.sources.stacks import StackAccess

    assert stack_ways(StackAccess("py-spy", 1000, False, 1)) == ["root", "launcher"]
    assert stack_ways(StackAccess("py-spy", 1000, False, 0)) == ["root", "same user", "launcher"]
    assert stack_ways(StackAccess("py-spy", 1000, False, 2)) == ["root"]
    assert stack_ways(StackAccess("py-spy", 0, True, 3)) == []
    found = check_stacks(Facts(software=SoftwareFacts(stacks=StackAccess("py-spy", 1000, False, 1))))
    assert found.status == "warn" and "gpu-triage run" in found.summary and "gpu-triage run" in found.advice
    assert found.data["stacks_with"] == ["root", "launcher"]


def test_on_a_terminal_the_dashboard_follows_the_job_and_closes_with_it(tmp_path: Path) -> None:
    """Without --record: the dashboard on a real pty, the job's output in its log file, the screen closed when
    the job ends and gpu-triage's status the job's. The job runs until the dashboard has drawn its first frame
    (told by a file the test writes then), however long the start takes on a busy box."""
    import pty
    import re
    import select

    log_file, drawn_file = tmp_path / "job.log", tmp_path / "drawn"
    job = textwrap.dedent(f"""
        import os, sys, time
        print('hello from the job', flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists({str(drawn_file)!r}) and time.monotonic() < deadline:
            time.sleep(0.02)
        sys.exit(5)
    """)
    env = dict(os.environ, PYTHONPATH=APP + os.pathsep + os.environ.get("PYTHONPATH", ""), TERM="xterm-256color",
               COLUMNS="120", LINES="40")
    pid, fd = pty.fork()
    if pid == 0:  # the child: gpu-triage on the pty
        os.chdir(tmp_path)
        os.execvpe(sys.executable, [sys.executable, "-m", "gpu_triage", "run", "--job-output", str(log_file),
                                    "--", sys.executable, "-c", job], env)
    deadline = time.monotonic() + 90
    status = None
    screen = b""
    try:
        while status is None and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    got = os.read(fd, 65536)  # the screen, drained so that the app never blocks on its terminal
                except OSError:  # the pty closed: gpu-triage has gone
                    got = b""
                if not drawn_file.exists():
                    screen += got
                    if b"\xe2\x97\x8f live" in re.sub(rb"\x1b\[[0-9;?<>=$]*[ -/]*[@-~]", b"", screen):
                        drawn_file.touch()  # the dashboard's header: it is on the screen while the job runs
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert drawn_file.exists(), "the dashboard never drew its header"
    assert status == 5
    assert log_file.read_text().strip() == "hello from the job"


def test_a_rank_that_imports_the_pulse_names_the_launcher_without_a_word() -> None:
    """GPU_TRIAGE_TRACER (set by gpu-triage run): importing gpu_triage.pulse asks Yama to let that pid read this
    process; where there is no Yama (this machine) or the value is not a pid, the import is silent all the same."""
    from gpu_triage.pulse import tracer_call

    for value in (str(os.getpid()), "not-a-pid", "-4"):
        env = dict(os.environ, PYTHONPATH=APP, GPU_TRIAGE_TRACER=value)
        done = subprocess.run([sys.executable, "-c", "import gpu_triage.pulse"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and done.stderr == "", (value, done.stderr)
    yama = Path("/proc/sys/kernel/yama/ptrace_scope").exists()
    call = tracer_call()
    assert call is not None and call(os.getpid()) is yama  # prctl(PR_SET_PTRACER) is Yama's: EINVAL without it


def test_a_duration_ends_the_recording_without_setting_the_callers_stop(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The caller's event is the caller's (gpu-triage run sets it when the job ends): the recorder's own tick limit
    stops the recording as the duration it is, and leaves that event alone."""
    import logging
    import threading

    from gpu_triage.recording.headless import record_source
    from gpu_triage.sources.sim import SimulatedSource

    caller = threading.Event()
    with caplog.at_level(logging.INFO, logger="gpu_triage.recording.headless"):
        _, ticks = record_source(SimulatedSource("healthy", gpus=1, cores=4, interval_s=0.1), tmp_path / "r.parquet",
                                 0.1, duration_s=0.3, stop=caller, describe_machine=False, out=open(os.devnull, "w"))
    assert ticks == 3 and not caller.is_set()
    assert "recording stopped (duration reached)" in caplog.text


FAKE_PYSPY = """#!{python}
import json, sys
pid = int(sys.argv[sys.argv.index("--pid") + 1])
with open(f"/proc/{{pid}}/stat", "rb") as f:
    stat = f.read()
ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
with open({log!r}, "a") as f:
    f.write(f"{{pid}} {{ppid}}\\n")
print(json.dumps([{{"os_thread_id": pid, "thread_name": "MainThread", "active": False, "owns_gil": False,
                   "frames": [{{"name": "wait_for_the_monitor", "short_filename": "job.py", "line": 1}}]}}]))
"""


def test_the_job_is_our_direct_child_and_the_stack_sampler_dumps_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What Yama's ptrace_scope=1 asks of the launcher that can be checked on a machine without Yama: the job is
    this process's own child (its parent pid is ours), it names us as its tracer, and when its card waits the
    stack sampler points py-spy at that very pid. The outside is faked: the driver (a card at 0 % GPU-Util that
    lists the job's pid once it runs) and py-spy (an executable that logs the pid it was given and that pid's
    parent, read from /proc at the dump). Whether Yama then lets py-spy read the job is the kernel's part: not
    checkable here (docs/recording.md, "gpu-triage run" under ptrace_scope=1)."""
    import threading

    import fake_nvml

    pid_file, log = tmp_path / "job.pid", tmp_path / "dumps.log"
    pyspy = tmp_path / "py-spy"
    pyspy.write_text(FAKE_PYSPY.format(python=sys.executable, log=str(log)))
    pyspy.chmod(0o755)
    monkeypatch.setenv("GPU_TRIAGE_PYSPY", str(pyspy))
    card = fake_nvml.FakeCard(util=0.0)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.FakeNvml([card]))
    job = textwrap.dedent(f"""
        import os, sys, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        deadline = time.monotonic() + 60
        def dumped():
            return len(open({str(log)!r}).read().splitlines()) if os.path.exists({str(log)!r}) else 0
        while dumped() < 3 and time.monotonic() < deadline:  # until the sampler has dumped us a few times
            time.sleep(0.02)
        sys.exit(0 if dumped() >= 3 else 4)
    """)

    def on_the_card() -> None:  # the driver lists the job's process once it has started
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        card.processes.append(fake_nvml.FakeProcess(int(pid_file.read_text()), usedGpuMemory=2 << 30))

    driver = threading.Thread(target=on_the_card, daemon=True)
    driver.start()
    out = tmp_path / "run.parquet"
    before = os.environ.get("GPU_TRIAGE_PULSE_DIR")
    try:
        assert main(["run", "--record", str(out), "--interval", "0.25", "--", sys.executable, "-c", job]) == 0
    finally:
        if before is None:
            os.environ.pop("GPU_TRIAGE_PULSE_DIR", None)
        else:
            os.environ["GPU_TRIAGE_PULSE_DIR"] = before
    driver.join(timeout=5)
    job_pid = int(pid_file.read_text())
    dumps = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert dumps and all(d == (job_pid, os.getpid()) for d in dumps), dumps
    samples = [s for t in open_trace(out).ticks() for s in t.stacks]
    assert any(s.pid == job_pid and s.role == "main" and s.error is None for s in samples)
