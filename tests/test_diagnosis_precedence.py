"""Evidence precedence (diagnosis/precedence.py): where the job's stacks were read, a mechanism they contradict
is not claimed, and what they show is said.

The recording is real (h200-inside-e-2s, its 80 ms Python-loop window read without its own stacks: one core,
no DataLoader workers, the card idle, which reads ``host_or_input`` from outside). The stack samples put on its
ticks are the outside input under test: one main-thread dump per 2 s tick, as the sampler takes them, with
the phases and frames real dumps of other jobs showed (a main thread in torch.cuda.synchronize, in the
DataLoader's fetch), and, for trace v4, each thread of the dump.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gpu_triage.config import Config
from gpu_triage.model import StackSample, Tick
from gpu_triage.offline.judge import verdicts
from tests import real_readings as rr

pytestmark = pytest.mark.slow

NAME, SCENARIO = "h200-inside-e-2s", "python_host_loop_ms80"

if "thread_list" in {f.name for f in dataclasses.fields(StackSample)}:  # trace v4 (the sampler's side)
    V4Sample: Any = StackSample
else:
    @dataclass(slots=True)
    class V4Sample(StackSample):  # type: ignore[no-redef]
        thread_list: list[Any] = field(default_factory=list)


@dataclass
class Thread:
    """One thread of a dump, as trace v4 records it (model.ThreadSample's fields)."""

    tid: int
    state: str
    phase: str
    name: str | None = None
    holds_gil: int | None = None
    cpu_pct: float | None = None
    frames: str | None = None


def _with_stacks(make: Any) -> tuple[list[Any], list[int]]:
    """The window's ticks with ``make(pid, k)``'s sample on each tick after the loop's first; the judged ticks."""
    lab = rr.label(NAME, SCENARIO)
    ticks: list[Tick] = rr.ticks(NAME, stripped=True)
    idx = rr.judged(NAME, lab)
    pid = next(p.pid for p in ticks[idx[0]].procs)
    first = next(i for i, t in enumerate(ticks) if t.ts.isoformat() >= lab["start"] and t.procs)
    out = [replace(t, stacks=[make(pid, k)]) if first <= k <= idx[-1] else t for k, t in enumerate(ticks)]
    cfg, tr = Config(), rr.trace(NAME)
    res = verdicts(out, tr.interval_s, cfg.thresholds, cfg.window_s, tr.host.cpu_count)
    return [res[i][1] for i in idx], idx


def _main(pid: int, phase: str, frames: str, busy: int = 1, threads: list[Thread] | None = None) -> Any:
    return V4Sample(pid=pid, role="main", phase=phase, frames=frames, busy_threads=busy, threads=4,
                    thread_list=threads or [])


SYNC = "synchronize (__init__.py) < train_step (train.py) < main (train.py)"
FETCH = "_MapDatasetFetcher.fetch (fetch.py) < _SingleProcessDataLoaderIter._next_data (dataloader.py)"


def test_without_stacks_the_window_reads_host_or_input() -> None:
    for i in rr.judged(NAME, rr.label(NAME, SCENARIO)):
        assert rr.raw(NAME, True)[i][1].bottleneck == "host_or_input"


def test_a_loader_reading_with_no_loading_frame_in_any_sample_is_not_claimed() -> None:
    """Every sample in torch.cuda.synchronize, none in a DataLoader: the one-core reading (which includes
    num_workers=0) is replaced by unexplained, which says what the stacks show and gives no loader advice."""
    got, _ = _with_stacks(lambda pid, k: _main(pid, "gpu_sync", SYNC))
    for v in got:
        assert (v.bottleneck, v.mechanism) == ("unexplained", "unexplained"), v.evidence
        assert any("no DataLoader, Dataset, collate or fetch frame in any of its" in e for e in v.evidence)
        assert any("main thread was in gpu_sync at synchronize (__init__.py) in" in e for e in v.evidence)
        assert not any("num_workers" in a or "pin_memory" in a for a in v.advice), v.advice


def test_one_loading_sample_keeps_the_loader_reading_and_most_name_it() -> None:
    some, _ = _with_stacks(lambda pid, k: _main(pid, "loading" if k % 4 == 0 else "gpu_sync",
                                                FETCH if k % 4 == 0 else SYNC))
    assert all(v.bottleneck == "host_or_input" for v in some), [v.evidence for v in some]
    most, _ = _with_stacks(lambda pid, k: _main(pid, "loading", FETCH))
    for v in most:
        assert (v.bottleneck, v.mechanism) == ("data_pipeline", "in_process_loader"), v.evidence
        assert any(a.startswith("DataLoader(num_workers=") for a in v.advice), v.advice


def test_another_thread_holding_the_gil_is_named_not_the_main_threads_phase() -> None:
    """Trace v4: the main thread off CPU in the optimizer while a thread of the job's own holds the GIL: that
    thread holds the step; the optimizer's advice (DeepSpeedCPUAdam) would be for another mechanism."""
    def make(pid: int, k: int) -> Any:
        return _main(pid, "optimizer", "adam (adam.py)", busy=3, threads=[
            Thread(pid, "idle", "optimizer", "MainThread", 0, frames="adam (adam.py)"),
            Thread(pid + 7, "active", "python", "Thread-2 (metrics_loop)", 1, frames="metrics_loop (train.py)")])
    got, _ = _with_stacks(make)
    assert any(v.mechanism == "other_thread" for v in got)
    for v in got:
        assert v.mechanism in ("other_thread", "start_up"), v.evidence
        if v.mechanism == "other_thread":
            assert v.bottleneck == "host_step"
            assert any("'Thread-2 (metrics_loop)' in python at metrics_loop (train.py) was on a CPU" in e
                       for e in v.evidence), v.evidence
            assert not any("optimizer steps on the CPU" in a for a in v.advice), v.advice


def test_cpu_arithmetic_whose_main_thread_waits_is_not_claimed() -> None:
    """Trace v4: the main thread in the optimizer but off CPU in every sample, no thread holding the GIL: the
    CPU-optimizer reading (host_compute, 3 threads busy) is not claimed; with the thread on a CPU it is."""
    def make(state: str) -> Any:
        return lambda pid, k: _main(pid, "optimizer", "adam (adam.py)", busy=3, threads=[
            Thread(pid, state, "optimizer", "MainThread", 1 if state == "active" else 0, frames="adam (adam.py)")])
    waiting, _ = _with_stacks(make("idle"))
    for v in waiting:
        assert v.bottleneck == "unexplained" and v.mechanism != "host_compute", v.evidence
        assert any("main thread was off CPU in" in e and "the CPU arithmetic is not its own" in e
                   for e in v.evidence), v.evidence
    computing, _ = _with_stacks(make("active"))
    assert all(v.mechanism == "host_compute" for v in computing), [v.evidence for v in computing]


def test_a_pin_memory_thread_the_loop_waits_for_is_the_input_pipeline() -> None:
    """Trace v4: the main thread off CPU waiting on a condition while the DataLoader's pin-memory thread copies on a
    CPU (real held-out pin_memory job: its wait recorded as 'waiting'): the data pipeline, named by its thread; a
    native thread on a CPU (no Python frames: autograd's device thread, an intra-op pool) holds nothing."""
    def make(pid: int, k: int) -> Any:
        return _main(pid, "waiting", "wait (threading.py)", threads=[
            Thread(pid, "idle", "waiting", "MainThread", 0, frames="wait (threading.py)"),
            Thread(pid + 3, "active", "python", "Thread-1 (_pin_memory_loop)", k % 2,
                   frames="pin_memory (pin_memory.py)"),
            Thread(pid + 4, "active", "unknown", None, 0)])
    got, _ = _with_stacks(make)
    for v in got:
        if v.mechanism == "start_up":
            continue
        assert (v.bottleneck, v.mechanism) == ("data_pipeline", "other_thread"), v.evidence
        assert any("'Thread-1 (_pin_memory_loop)' in python at pin_memory (pin_memory.py) was on a CPU" in e
                   for e in v.evidence), v.evidence
        assert "pinned memory" in v.advice[0], v.advice

    def native(pid: int, k: int) -> Any:
        return _main(pid, "backward", "_engine_run_backward (graph.py)", threads=[
            Thread(pid, "idle", "backward", "MainThread", 0, frames="_engine_run_backward (graph.py)"),
            Thread(pid + 4, "active", "unknown", None, 0)])
    assert all(v.mechanism != "other_thread" for v in _with_stacks(native)[0])


def test_a_job_s_own_fetch_function_is_not_the_input_pipeline() -> None:
    """torch's fetcher is known by its file; a job's own ``fetch_metrics`` is not a loading frame, so it cannot keep
    a loader reading alive that the stacks otherwise contradict."""
    from gpu_triage.diagnosis.threads import shows_loading

    assert shows_loading("model", "fetch (fetch.py) < _next_data (dataloader.py)")
    assert shows_loading("model", "fetch (fetch.py)")
    assert not shows_loading("model", "fetch_metrics (metrics.py) < train_step (train.py)")


def test_an_unexplained_reading_with_stacks_does_not_say_it_looked_from_outside_only() -> None:
    """Where the outside rules name nothing and the stacks were read (and name nothing either), the headline says
    both were looked at: "from outside the job" beside the stack samples' sentences contradicted itself (real
    h200-inside-b with its stacks: 27 such ticks)."""
    seen = 0
    for _tick, v, _ in rr.raw("h200-inside-b-2s-stacks"):
        if v.bottleneck == "unexplained" and any("sample" in e for e in v.evidence):
            seen += 1
            assert "from outside the job" not in v.evidence[0] and "from its stacks or from outside" in v.evidence[0]
    assert seen >= 10
