"""The inside evidence on the live path: the live source's ticks carry the stack samples of the processes
whose card waits, and `record` writes them. The driver is faked (the outside: a card at 0 % or at 97 %
running the process), the process and py-spy are real, as in tests/test_inside_stacks.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import fake_nvml
from gpu_triage.model import StackSample, Tick
from gpu_triage.sources.inside import InsideSampler
from gpu_triage.sources.live import LiveSource
from gpu_triage.sources.stacks import ACCESS_PROBLEMS, find_pyspy
from test_inside_stacks import SLOW_LOADER

needs_pyspy = pytest.mark.skipif(find_pyspy() is None and not os.environ.get("CI"), reason="py-spy not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy reads other processes as root here")

SLEEPER = """
    import time
    def wait_for_the_dataset():
        while True:
            time.sleep(0.2)
    print("ready", flush=True)
    wait_for_the_dataset()
"""


@pytest.fixture
def job() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SLEEPER)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _source(pid: int, util: float, inside: InsideSampler | None) -> LiveSource:
    card = fake_nvml.FakeCard(util=util, processes=[fake_nvml.FakeProcess(pid, usedGpuMemory=2 << 30)])
    return LiveSource(fake_nvml.FakeNvml([card]), inside=inside)


def _leading(samples: list[StackSample]) -> str:
    phases = [s.phase for s in samples]
    return max(set(phases), key=phases.count)


def _ticks_until(source: LiveSource, done: float, every_s: float = 0.25) -> list[Tick]:
    ticks = []
    deadline = time.monotonic() + done
    while time.monotonic() < deadline:
        time.sleep(every_s)
        ticks.append(source.sample())
        if sum(len(t.stacks) for t in ticks) >= 3:
            break
    return ticks


@needs_pyspy
@needs_root
def test_the_live_ticks_carry_what_the_waiting_cards_process_is_doing(job: subprocess.Popen[bytes]) -> None:
    source = _source(job.pid, 0.0, InsideSampler(every_s=0.2))
    try:
        ticks = _ticks_until(source, 20.0)
    finally:
        source.close()
    samples = [s for t in ticks for s in t.stacks]
    assert len(samples) >= 3, "a dump finished every few ticks"
    assert {s.pid for s in samples} == {job.pid} and {s.role for s in samples} == {"main"}
    # the sleeper wakes every 0.2 s: a dump may catch it on a CPU (python), most find it asleep
    assert all(s.error is None for s in samples) and _leading(samples) == "sleep"
    assert all(s.frames == "wait_for_the_dataset (<string>)" for s in samples)  # the frame that named it
    assert all(s.threads == 1 for s in samples)  # /proc: the sleeper's one thread
    seen = [id(s) for t in ticks for s in t.stacks]
    assert len(seen) == len(set(seen))  # each dump in one tick only


@needs_pyspy
@needs_root
def test_a_busy_card_is_never_dumped(job: subprocess.Popen[bytes]) -> None:
    inside = InsideSampler(every_s=0.05)
    source = _source(job.pid, 97.0, inside)
    try:
        # six ticks 0.1 s apart, past the sampler's 0.05 s: time in which a dump would have been taken (and
        # close() waits for a round under way: a dump started for the busy card would be counted)
        ticks = []
        for _ in range(6):
            time.sleep(0.1)
            ticks.append(source.sample())
    finally:
        source.close()
    assert not any(t.stacks for t in ticks)
    assert inside.stacks.cpu_s == 0.0 and inside.reports() == {}  # py-spy never ran


def test_without_py_spy_the_live_source_says_it_once_and_ticks_go_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("GPU_TRIAGE_PYSPY", str(tmp_path / "absent"))
    inside = InsideSampler(every_s=0.1)
    source = _source(os.getpid(), 0.0, inside)
    try:
        ticks = [source.sample() for _ in range(3)]
        for _ in range(3):
            said = source.status().messages
    finally:
        source.close()
    assert inside._thread is None  # no sampler thread without py-spy
    assert not any(t.stacks for t in ticks) and all(t.procs for t in ticks)
    assert said.count(f"no stacks: {ACCESS_PROBLEMS['no_pyspy']}") == 1, said  # the banner, once
    logged = [r.getMessage() for r in caplog.records]
    assert logged.count(f"inside evidence: no stacks: {ACCESS_PROBLEMS['no_pyspy']}") == 1, logged
    assert source.inside_notice() == f"no stacks: {ACCESS_PROBLEMS['no_pyspy']}"


def test_a_process_py_spy_may_not_read_gives_one_sample_saying_why(tmp_path: Path) -> None:
    """py-spy's own refusal (a stand-in binary that answers as py-spy does without the rights): said once,
    with the fix in the notice, not once per dump."""
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Permission denied (os error 13)' >&2\nexit 1\n")
    fake.chmod(0o755)
    from gpu_triage.sources.stacks import StackReader

    clock = [0.0]
    inside = InsideSampler(StackReader(str(fake)), every_s=1.0, clock=lambda: clock[0])
    inside.want([(os.getpid(), [])])
    drained: list[StackSample] = []
    for _ in range(4):
        clock[0] += 1.0
        inside.step()
        drained += inside.drain()
    assert [(s.pid, s.phase, s.error) for s in drained] == [(os.getpid(), "unknown", "permission")]
    assert inside.notice() == f"no stacks: {ACCESS_PROBLEMS['permission']}"


@pytest.mark.slow
@needs_pyspy
@needs_root
@pytest.mark.parametrize("flags", [[], ["--no-stacks"]], ids=["stacks", "no-stacks"])
def test_record_writes_the_stacks_and_reads_them_back(job: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, flags: list[str]) -> None:
    from gpu_triage.cli import main
    from gpu_triage.trace.reader import open_trace

    # the driver is faked (the job on a waiting card); the source, its sampler and py-spy are the real ones
    card = fake_nvml.FakeCard(util=0.0, processes=[fake_nvml.FakeProcess(job.pid, usedGpuMemory=2 << 30)])
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.FakeNvml([card]))
    monkeypatch.setenv("GPU_TRIAGE_PULSE_DIR", str(tmp_path / "pulse"))
    out = tmp_path / "run.parquet"
    assert main(["record", "-o", str(out), "--interval", "0.25", "--duration", "1.5", *flags]) == 0
    trace = open_trace(out)
    stacks = [s for t in trace.ticks(0, trace.n) for s in t.stacks]
    if flags:
        assert stacks == []
        return
    assert len(stacks) >= 2 and _leading(stacks) == "sleep"
    assert {(s.pid, s.role, s.frames) for s in stacks} == {(job.pid, "main", "wait_for_the_dataset (<string>)")}


def test_the_switch_is_the_config_unless_no_stacks_is_given() -> None:
    from gpu_triage.cli import build_parser
    from gpu_triage.config import Config, parse_config, stacks_wanted
    from gpu_triage.errors import UserError

    assert Config().inside_enabled and parse_config({"inside": {"enabled": False}}).inside_enabled is False
    with pytest.raises(UserError, match="inside.enabled"):
        parse_config({"inside": {"enabled": "yes"}})
    parser = build_parser()
    for argv in (["--no-stacks"], ["live", "--no-stacks"], ["record", "-o", "x.parquet", "--no-stacks"],
                 ["export", "--no-stacks"]):
        assert parser.parse_args(argv).no_stacks is True, argv
    assert stacks_wanted(Config(), no_stacks=False) and not stacks_wanted(Config(), no_stacks=True)
    assert not stacks_wanted(parse_config({"inside": {"enabled": False}}), no_stacks=False)


@pytest.mark.parametrize(("flags", "wanted"), [([], False), (["--record", "DIR"], True),
                                               (["--record", "DIR", "--no-stacks"], False)])
def test_export_reads_stacks_only_for_its_recording(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    flags: list[str], wanted: bool) -> None:
    """The metrics have no series for stacks: only `export --record` pays for them."""
    from gpu_triage.cli import main
    from gpu_triage.sources import spec

    asked: list[bool] = []

    def make(name: str, *, stacks: bool = False, **_: object) -> None:
        asked.append(stacks)
        raise RuntimeError("enough: the source was asked for")

    monkeypatch.setattr(spec, "make_source", make)
    argv = [str(tmp_path / "ds") if f == "DIR" else f for f in flags]
    with pytest.raises(RuntimeError, match="enough"):
        main(["export", "--listen", "127.0.0.1:0", "--source", "sim:healthy", *argv])
    assert asked == [wanted]


@needs_pyspy
@needs_root
def test_a_tick_a_few_ms_early_still_gets_its_dump(job: subprocess.Popen[bytes]) -> None:
    """A round follows each tick: at a 2 s tick one that came 10 ms early skipped every other tick's dump."""
    clock = [100.0]
    inside = InsideSampler(every_s=2.0, clock=lambda: clock[0])
    inside.want([(job.pid, [])])
    got = []
    for _ in range(4):
        inside.step()
        clock[0] += 0.5
        inside.step()  # a second round within the same tick: not another dump
        got.append(len(inside.drain()))
        clock[0] += 1.49
    assert got == [1, 1, 1, 1]


@pytest.mark.slow
@needs_pyspy
@needs_root
def test_a_real_dataloader_gives_its_main_thread_and_its_workers_samples() -> None:
    """A training loop waiting on slow DataLoader workers: the main thread's samples name the wait, and its
    workers (found by the process reader as its children) are dumped in turn, each tied to its trainer."""
    pytest.importorskip("torch")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SLOW_LOADER)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        source = _source(proc.pid, 0.0, InsideSampler(every_s=0.15))
        try:
            ticks: list[Tick] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and sum(s.role == "worker" for t in ticks for s in t.stacks) < 2:
                time.sleep(0.15)
                ticks.append(source.sample())
        finally:
            source.close()
    finally:
        proc.kill()
        proc.wait()
    samples = [s for t in ticks for s in t.stacks]
    main = [s for s in samples if s.role == "main"]
    workers = [s for s in samples if s.role == "worker"]
    assert main and all(s.pid == proc.pid and s.error is None for s in main)
    assert _leading(main) == "dataloader_wait"
    # the frame that named it, last, whole: the loader's own wait
    assert all(s.frames and s.frames.rsplit(" < ", 1)[-1] in {
        f"_MultiProcessingDataLoaderIter.{fn} (dataloader.py)" for fn in ("_next_data", "_get_data", "_try_get_data")}
        for s in main if s.phase == "dataloader_wait"), main
    assert len(workers) >= 2 and all(s.parent_pid == proc.pid and s.pid != proc.pid for s in workers)
    assert {s.phase for s in workers} <= {"worker_waiting", "worker_idle", "worker_busy"}
    assert all(s.frames and s.frames.endswith(("(fetch.py)", "(worker.py)")) for s in workers), workers


def test_a_samples_frames_end_with_the_one_that_named_it_and_are_bounded() -> None:
    from gpu_triage.sources.phases import Phase, naming_frames
    from gpu_triage.sources.stacks import Frame, ThreadStack

    deep = tuple(Frame("f" * 200 + str(i), "/home/x/" + "d" * 150 + ".py", i) for i in range(40))
    stack = ThreadStack(1, None, True, (*deep, Frame("Adam.step", "torch/optim/adam.py", 1),
                                        Frame("train", "train.py", 9)))
    text = naming_frames(stack, Phase.OPTIMIZER)
    assert text is not None and len(text) <= 300
    assert text.endswith(" < … < Adam.step (adam.py)") and text.count(" < ") == 4
    assert naming_frames(stack, Phase.PYTHON) == text.split(" < ")[0]  # no frame names it: where it is now
    assert naming_frames(ThreadStack(1, None, False, ()), Phase.SLEEP) is None


def test_an_unknown_py_spy_failure_is_kept_as_visible_text(tmp_path: Path) -> None:
    """py-spy's last line of stderr is the sample's error when no known reason fits: it goes to the recording
    and the screen, so its control characters are made visible first."""
    from gpu_triage.sources.stacks import StackReader

    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\nprintf 'Error: \\033]2;PWN\\007 odd\\n' >&2\nexit 1\n")
    fake.chmod(0o755)
    inside = InsideSampler(StackReader(str(fake)), every_s=1.0, clock=lambda: 100.0)
    inside.want([(os.getpid(), [])])
    inside.step()
    (sample,) = inside.drain()
    assert sample.error == "Error: ␛]2;PWN␇ odd" and sample.threads is not None and sample.threads >= 1
    assert inside.notice() is None  # one process's oddity, not the machine's: no notice


@needs_pyspy
@needs_root
def test_a_worker_pid_that_is_not_the_process_s_child_is_never_dumped_as_its_worker(
        job: subprocess.Popen[bytes]) -> None:
    """Worker pids come from a tick up to a few seconds old and workers re-spawn each epoch: a pid given as a
    worker that is not (or no longer) the training process's child, here another real Python process, is not
    dumped under it; the process's own main thread still is."""
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SLEEPER)], stdout=subprocess.PIPE)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == b"ready"
        clock = [100.0]
        inside = InsideSampler(every_s=1.0, clock=lambda: clock[0])
        inside.want([(job.pid, [other.pid])])
        inside.step()
        samples = inside.drain()
        assert [(s.pid, s.role) for s in samples] == [(job.pid, "main")]
    finally:
        other.kill()
        other.wait()
