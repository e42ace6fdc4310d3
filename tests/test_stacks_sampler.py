"""The stack sampler's every-thread samples (trace v4), its waiting band (hysteresis) and its burst of dumps when a
card starts waiting: real Python processes dumped by the real py-spy, the driver's GPU-Util given as ticks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_triage.model import GpuSample, ProcSample, StackSample, Tick
from gpu_triage.sources.inside import BURST_COOLDOWN_S, BURST_DUMPS, InsideSampler
from gpu_triage.sources.phases import MAX_THREAD_SAMPLES
from gpu_triage.sources.stacks import find_pyspy
from gpu_triage.sources.waiting import WaitBand, WaitingCards

needs_pyspy = pytest.mark.skipif(find_pyspy() is None and not os.environ.get("CI"), reason="py-spy not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy reads other processes as root here")

# Another thread of the process holds the GIL in pure Python while the main thread waits for it: the case of
# issue 34 where the recording kept only the main thread ("idle") and a count of busy threads.
GIL_HOG = """
    import threading, time
    def hog_the_interpreter():
        n = 0
        while True:
            n += sum(i * i for i in range(2000))
    threading.Thread(target=hog_the_interpreter, name="metrics-hook", daemon=True).start()
    def training_step():
        time.sleep(0.001)
    time.sleep(0.3)
    print("ready", flush=True)
    while True:
        training_step()
"""
SLEEPER = """
    import time
    print("ready", flush=True)
    while True:
        time.sleep(0.2)
"""


@pytest.fixture
def job(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(request.param)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _tick(util: float | None, pid: int = 10, card: int = 0) -> Tick:
    return Tick(ts=datetime.now(UTC), interval_s=2.0, gpus=[GpuSample(card, util_pct=util)],
                procs=[ProcSample(pid, card, worker_pids=[pid + 1])])


# -- every thread of a dump ---------------------------------------------------------------------------------

@needs_pyspy
@needs_root
@pytest.mark.parametrize("job", [GIL_HOG], indirect=True, ids=["gil-hog"])
def test_each_sample_keeps_every_python_thread_with_its_state_gil_and_phase(job: subprocess.Popen[bytes]) -> None:
    clock = _Clock()
    sampler = InsideSampler(every_s=2.0, clock=clock, burst_dumps=0)
    sampler.want([(job.pid, [])])
    samples: list[StackSample] = []
    for _ in range(6):  # py-spy's GIL flag is a moment's reading: a few dumps see the hog holding it
        sampler.step()
        samples += [s for s in sampler.drain() if s.error is None]
        clock.t += 2.0
    assert samples
    hog_seen = hog_on_cpu = 0
    for s in samples:
        assert s.thread_list[0].tid == job.pid  # the main thread first
        assert s.thread_list[0].name == "MainThread"
        others = [t for t in s.thread_list if t.tid != job.pid]
        (hog,) = others
        assert hog.name == "metrics-hook"
        # on a CPU its own Python; a dump that finds it off one (waiting for the GIL the main thread took, or
        # not scheduled on a loaded box) reads that moment honestly: idle, and no rule names its stack
        assert (hog.state, hog.phase) in {("active", "python"), ("idle", "waiting")}, (hog.state, hog.phase)
        hog_on_cpu += hog.state == "active"
        assert hog.frames is not None and "hog_the_interpreter" in hog.frames
        assert hog.cpu_pct is None or hog.cpu_pct >= 0
        hog_seen += hog.holds_gil == 1
        assert s.thread_list[0].holds_gil in (0, 1)
    assert hog_seen >= 1, [(t.name, t.state, t.holds_gil) for s in samples for t in s.thread_list]
    assert hog_on_cpu > len(samples) // 2, [(t.name, t.state, t.phase) for s in samples for t in s.thread_list]
    # from the second read on, /proc gives each thread's CPU share (over the sampler's clock, faked here)
    assert all(t.cpu_pct is not None for s in samples[1:] for t in s.thread_list)
    # and the process's report (snapshot, the process table) names the thread that starves the main one
    report = sampler.reports()[job.pid]
    assert report.gil_holder is not None and report.gil_holder[0] == "metrics-hook"
    assert "thread metrics-hook held the GIL in" in report.sentence()


@needs_pyspy
@needs_root
def test_a_process_with_many_threads_keeps_a_bounded_list_led_by_its_main_thread() -> None:
    code = f"""
        import threading, time
        for k in range({MAX_THREAD_SAMPLES + 8}):
            threading.Thread(target=time.sleep, args=(600,), name=f"pool-{{k}}", daemon=True).start()
        print("ready", flush=True)
        while True:
            time.sleep(0.2)
    """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        sampler = InsideSampler(every_s=2.0, clock=_Clock())
        sampler.want([(proc.pid, [])])
        sampler.step()
        (s,) = sampler.drain()
        assert s.error is None and len(s.thread_list) == MAX_THREAD_SAMPLES
        assert s.thread_list[0].tid == proc.pid and s.threads is not None and s.threads > MAX_THREAD_SAMPLES
        assert all(t.state == "idle" for t in s.thread_list)
    finally:
        proc.kill()
        proc.wait()


def test_a_recording_keeps_each_thread_and_a_v3_file_reads_with_none(tmp_path: Path) -> None:
    from gpu_triage.model import HostInfo, ThreadSample
    from gpu_triage.trace.reader import open_trace
    from gpu_triage.trace.writer import TraceWriter

    threads = [ThreadSample(10, "idle", "waiting", name="MainThread", holds_gil=0, frames="wait (threading.py)"),
               ThreadSample(11, "active", "python", name="metrics-hook", holds_gil=1, cpu_pct=99.5)]
    tick = _tick(20.0)
    tick.stacks = [StackSample(10, "main", "waiting", threads=2, thread_list=threads)]
    w = TraceWriter(tmp_path / "r.parquet", HostInfo(), 2.0)
    w.append(tick)
    back = open_trace(w.close()).ticks()
    assert back[0].stacks[0].thread_list == threads
    # the bundled v3 recording (no thread_list in its stacks): every sample reads, with no threads
    v3 = sorted((Path(__file__).parent / "data").glob("h200-inside-e-2s.parquet"))
    for path in v3:
        stacks = [s for t in open_trace(path).ticks() for s in t.stacks]
        assert stacks and all(s.thread_list == [] for s in stacks)


# -- which cards wait: hysteresis ---------------------------------------------------------------------------

def test_a_card_waits_below_the_band_and_stops_only_above_it() -> None:
    cards = WaitingCards(WaitBand(45.0, 55.0))
    seen = []
    for util in (60.0, 49.0, 44.0, 51.0, 48.0, 54.9, None, 55.1, 50.0, 44.9):
        procs, started = cards.update(_tick(util))
        seen.append((bool(procs), bool(started)))
    assert seen == [(False, False), (False, False), (True, True), (True, False), (True, False), (True, False),
                    (True, False), (False, False), (False, False), (True, True)]
    assert cards.update(_tick(10.0))[0] == [(10, [11])]
    # a new process on a card that waits already is news too (a job started on an idle card)
    assert cards.update(_tick(10.0, pid=20)) == ([(20, [21])], {20})
    # a card that leaves the tick is forgotten: back, it starts waiting afresh
    cards.update(Tick(ts=datetime.now(UTC), interval_s=2.0))
    assert cards.update(_tick(10.0))[1] == {10}


def test_the_band_is_read_from_the_configuration(tmp_path: Path) -> None:
    from gpu_triage.config import load_config, wait_band
    from gpu_triage.errors import UserError

    path = tmp_path / "c.toml"
    path.write_text("[inside]\nwaiting_enter_pct = 30\nwaiting_leave_pct = 40.5\n")
    assert wait_band(load_config(path)) == WaitBand(30.0, 40.5)
    for bad in ("waiting_enter_pct = 60", "waiting_leave_pct = 101", "waiting_enter_pct = true"):
        path.write_text(f"[inside]\n{bad}\n")
        with pytest.raises(UserError, match="inside.waiting_"):
            load_config(path)


# -- a burst of dumps when a card starts waiting ------------------------------------------------------------

@needs_pyspy
@needs_root
@pytest.mark.parametrize("job", [SLEEPER], indirect=True, ids=["sleep"])
def test_a_card_that_starts_waiting_gets_a_burst_then_the_ordinary_pace(job: subprocess.Popen[bytes]) -> None:
    clock = _Clock()
    sampler = InsideSampler(every_s=2.0, clock=clock)
    dumps = []

    def at(t: float, util: float) -> None:
        clock.t = 1000.0 + t
        sampler.follow(_tick(util, pid=job.pid))
        sampler.step()
        dumps.extend(t for s in sampler.drain() if s.role == "main")

    at(0.0, 80.0)  # busy: nothing dumped
    for k in range(BURST_DUMPS + 2):  # waits from t=1: a dump every 0.5 s for BURST_DUMPS dumps, then 2 s apart
        at(1.0 + 0.5 * k, 30.0)
    last = 1.0 + 0.5 * (BURST_DUMPS - 1)
    assert dumps == [1.0 + 0.5 * k for k in range(BURST_DUMPS)]
    at(last + 2.0, 30.0)
    assert dumps[-1] == last + 2.0
    # it stops and starts waiting again within the cooldown: the ordinary pace, no second burst
    at(20.0, 90.0)
    at(21.0, 30.0)
    at(21.5, 30.0)
    at(22.0, 30.0)
    assert dumps[BURST_DUMPS + 1:] == [21.0]
    # past the cooldown a new wait earns a new burst
    at(30.0, 90.0)
    base = 1.0 + BURST_COOLDOWN_S  # the cooldown counts from the first burst's start
    for k in range(3):
        at(base + 0.5 * k, 30.0)
    assert dumps[-3:] == [base, base + 0.5, base + 1.0]


def test_a_loop_waiting_for_its_workers_reads_so_with_py_spy_0_4_2s_bare_names() -> None:
    """py-spy 0.4.2 names methods bare ("_get_data"), 0.4.3 qualified ("_MultiProcessingDataLoaderIter._get_data"):
    a real 0.4.2 dump of a loop waiting on its 2 workers (taken here, kept as it came) reads dataloader_wait. On
    the H200 a pin-memory job's main thread read "waiting" in 11 of 16 such dumps before (h200-inside-f)."""
    from gpu_triage.sources.phases import Phase, classify
    from gpu_triage.sources.stacks import parse_dump

    payload = (Path(__file__).parent / "data" / "inside-stacks" / "pyspy-0.4.2-loader-dump.json").read_text()
    dump = parse_dump(1, 0.0, 0.0, payload)
    main = next(t for t in dump.threads if t.name == "MainThread")
    assert [f.name for f in main.frames][5:7] == ["_try_get_data", "_get_data"]
    assert classify(main) is Phase.DATALOADER_WAIT
    assert all(t.owns_gil is False for t in dump.threads)  # 0.4.2 says owns_gil: read, not None


def test_a_batch_made_anywhere_under_the_single_process_iterator_is_loading() -> None:
    """num_workers=0: the main thread drawing the batch's indices from a Python sampler, or pinning it, is making
    its batch as much as in fetch or collate (the frames under _SingleProcessDataLoaderIter._next_data, innermost
    first as py-spy 0.4.3 gives them); the workers' iterator waiting for a batch stays dataloader_wait."""
    from gpu_triage.sources.phases import Phase, classify
    from gpu_triage.sources.stacks import Frame, ThreadStack

    below = {"sampler": Frame("MySampler.__iter__", "train.py", 12),
             "pin": Frame("pin_memory", "torch/utils/data/_utils/pin_memory.py", 70)}
    loop = (Frame("_SingleProcessDataLoaderIter._next_data", "torch/utils/data/dataloader.py", 789),
            Frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py", 733), Frame("main", "train.py", 40))
    for first in below.values():
        assert classify(ThreadStack(1, "MainThread", True, (first, *loop))) is Phase.LOADING
    waiting = (Frame("_MultiProcessingDataLoaderIter._get_data", "torch/utils/data/dataloader.py", 1285),
               Frame("_MultiProcessingDataLoaderIter._next_data", "torch/utils/data/dataloader.py", 1440),
               Frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py", 733))
    assert classify(ThreadStack(1, "MainThread", False, waiting)) is Phase.DATALOADER_WAIT


@needs_pyspy
@needs_root
@pytest.mark.parametrize("job", [SLEEPER], indirect=True, ids=["sleep"])
def test_a_wait_that_lasts_is_dumped_half_as_often_past_its_first_dumps(job: subprocess.Popen[bytes]) -> None:
    from gpu_triage.sources.inside import KEEP, SETTLED_FACTOR

    clock = _Clock()
    sampler = InsideSampler(every_s=2.0, clock=clock, burst_dumps=0)
    sampler.want([(job.pid, [])])
    taken = []
    for k in range(2 * KEEP + 10):
        clock.t = 1000.0 + 2.0 * k
        sampler.step()
        taken += [clock.t - 1000.0 for s in sampler.drain() if s.role == "main"]
    gaps = [b - a for a, b in zip(taken, taken[1:], strict=False)]
    assert gaps[:KEEP - 1] == [2.0] * (KEEP - 1)
    assert set(gaps[KEEP:]) == {2.0 * SETTLED_FACTOR}


def test_a_foreign_files_threads_are_read_with_care() -> None:
    """A recording is outside input: a thread without its tid, state or phase is no thread, a CPU share no thread
    can have reads as unknown, and a name holding escape codes is made visible."""
    from gpu_triage.trace.row_codec import stack_from_row

    row = {"pid": 10, "role": "main", "phase": "python", "thread_list": [
        {"tid": 10, "state": "active", "phase": "python", "name": "Main\x1b[2J", "cpu_pct": 1e9, "holds_gil": 1},
        {"tid": None, "state": "idle", "phase": "waiting"},
        {"tid": 11, "state": "idle", "phase": "waiting", "cpu_pct": float("nan")},
        None, 5, "x",
    ]}
    assert stack_from_row({**row, "thread_list": 7}).thread_list == []
    assert stack_from_row({**row, "thread_list": "abc"}).thread_list == []
    s = stack_from_row(row)
    assert [t.tid for t in s.thread_list] == [10, 11]
    assert s.thread_list[0].cpu_pct is None and s.thread_list[1].cpu_pct is None
    assert "\x1b" not in (s.thread_list[0].name or "")


def test_frames_named_without_end_are_cut_and_never_kept_whole() -> None:
    """Another user's program may name its functions and files at any length (py-spy passes up to megabytes):
    each frame reads cut to MAX_TEXT, and the table of frames kept from dump to dump holds no name longer than
    that, so a job making a new 1 MB name each dump cannot grow the monitor by a megabyte a dump."""
    import json

    from gpu_triage.sources import stacks

    stacks._FRAMES.clear()
    for k in range(20):
        huge = f"f{k}" + "x" * 1_000_000
        payload = json.dumps([{"os_thread_id": 1, "thread_name": "MainThread", "active": True, "owns_gil": True,
                               "frames": [{"name": huge, "filename": "/" + huge, "short_filename": huge + ".py",
                                           "line": 3},
                                          {"name": "main", "filename": "/t/train.py", "short_filename": "train.py",
                                           "line": 9}]}])
        dump = stacks.parse_dump(7, float(k), 0.01, payload)
        top = dump.threads[0].frames[0]
        assert top.name.startswith(f"f{k}x") and len(top.name) <= stacks.MAX_TEXT
    assert max(len(n) + len(f) for n, f, _ in stacks._FRAMES) <= 2 * stacks.MAX_TEXT
    assert any(n == "main" for n, _, _ in stacks._FRAMES)  # what is short is still kept
