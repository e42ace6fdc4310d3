"""The stack sampler's dump budget (sources/dumpbudget.py): however many jobs start waiting, and however often, it
starts at most ``dumps_per_min`` py-spy runs in any minute. py-spy is the outside here: a fake executable that
logs each run and answers as py-spy's ``dump --json`` does; the sampler, its paces, bursts and budget are the
real ones, driven by ticks as the live source drives them, on an injected clock."""

from __future__ import annotations

import os
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_triage.model import GpuSample, ProcSample, Tick
from gpu_triage.sources.dumpbudget import AT_ONCE, DUMPS_PER_MIN, WINDOW_S, DumpBudget, InsideSettings
from gpu_triage.sources.inside import BURST_DUMPS, InsideSampler
from gpu_triage.sources.stacks import StackReader

# pids above the kernel's largest pid_max (2**22): no real process is ever one of them
NO_PROCESS = 1 << 23

FAKE_PYSPY = """#!/bin/sh
pid=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--pid" ]; then pid="$2"; fi
  shift
done
echo "$pid" >> "{log}"
if [ -e "{torn}" ]; then
  echo "Error: Failed to get stack traces" >&2
  exit 1
fi
printf '[{{"os_thread_id": %s, "thread_name": "MainThread", "active": false, "owns_gil": false, ' "$pid"
printf '"frames": [{{"name": "sleep", "short_filename": "train.py", "line": 3}}]}}]'
"""


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def pyspy(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the fake py-spy, its log of runs, the file whose presence makes every read race the interpreter)."""
    log, torn = tmp_path / "runs.log", tmp_path / "torn"
    exe = tmp_path / "py-spy"
    exe.write_text(FAKE_PYSPY.format(log=log, torn=torn))
    exe.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return exe, log, torn


def _runs(log: Path) -> list[int]:
    return [int(x) for x in log.read_text().split()] if log.exists() else []


def _storm(sampler: InsideSampler, clock: _Clock, log: Path, minutes: float, every_s: float, lasts_s: float,
           steady: int = NO_PROCESS) -> list[tuple[float, int]]:
    """A new job on a waiting card every ``every_s`` (each on its own card, waiting from its first tick on, each
    gone after ``lasts_s``) beside the job ``steady`` that waits all along; a tick every 0.5 s, the sampler's
    round after each. (time, pid) of each py-spy run."""
    runs: list[tuple[float, int]] = []
    start, k = clock.t, 0
    while clock.t - start < minutes * 60:
        age = clock.t - start
        born = [j for j in range(int(age // every_s) + 1) if age - j * every_s < lasts_s]
        procs = [ProcSample(steady, 0)] + [ProcSample(NO_PROCESS + 1 + j, 1 + j) for j in born]
        gpus = [GpuSample(p.gpu_index, util_pct=20.0) for p in procs]
        sampler.follow(Tick(ts=datetime.now(UTC), interval_s=0.5, gpus=gpus, procs=procs))
        before = len(_runs(log))
        sampler.step()
        runs += [(clock.t, pid) for pid in _runs(log)[before:]]
        k += 1
        clock.t = start + 0.5 * k
    return runs


def _most_in_a_window(times: list[float]) -> int:
    return max((sum(1 for u in times if t <= u < t + WINDOW_S) for t in times), default=0)


@pytest.mark.skipif(sys.platform != "linux", reason="the sampler reads /proc")
def test_a_storm_of_new_waiting_jobs_stays_within_the_minute_s_budget(pyspy: tuple[Path, Path, Path]) -> None:
    """A new job every 5 s, each earning its own burst (the cooldown is per process), 4 minutes long: the
    paces alone would start well over 100 runs a minute; the budget lets at most DUMPS_PER_MIN through in any
    minute, and uses it. The job that waits all along is still dumped through the storm: the least recently dumped
    process goes first, so new ones cannot starve it."""
    exe, log, _ = pyspy
    clock = _Clock()
    sampler = InsideSampler(StackReader(str(exe)), every_s=2.0, clock=clock, proc_root="/nonexistent")
    runs = _storm(sampler, clock, log, minutes=4, every_s=5.0, lasts_s=22.0)
    times = [t for t, _ in runs]
    # within the budget, and near it: the runs come at the rounds' half seconds, so a minute may hold one less
    assert DUMPS_PER_MIN - 2 <= _most_in_a_window(times) <= DUMPS_PER_MIN
    assert len(runs) >= 4 * (DUMPS_PER_MIN - AT_ONCE)  # the pace's runs every minute: the budget is spent
    steady = [t for t, pid in runs if pid == NO_PROCESS]
    gaps = [b - a for a, b in zip(steady, steady[1:], strict=False)]
    assert steady and max(gaps) <= 20.0, gaps  # its turn comes while the storm goes on
    assert sampler.budget.refused > 0


@pytest.mark.skipif(sys.platform != "linux", reason="the sampler reads /proc")
def test_the_budget_counts_every_py_spy_run_the_second_read_of_a_torn_dump_too(
        pyspy: tuple[Path, Path, Path]) -> None:
    """Every read races the interpreter (py-spy's "Failed to get stack traces"): each dump runs py-spy twice
    while the budget allows; the second read is a run like any other, so the minute's runs stop at the budget.
    The job is this test's own process: a torn read is told from a process gone by its /proc entry."""
    exe, log, torn = pyspy
    torn.write_text("")
    clock = _Clock()
    sampler = InsideSampler(StackReader(str(exe)), every_s=2.0, clock=clock, proc_root="/nonexistent",
                            settings=InsideSettings(dumps_per_min=7))
    runs = _storm(sampler, clock, log, minutes=2, every_s=1e9, lasts_s=0.0, steady=os.getpid())
    times = [t for t, _ in runs]
    assert 5 <= _most_in_a_window(times) <= 7
    assert times[:2] == [times[0], times[0]]  # read again at once: the race is over in microseconds


@pytest.mark.skipif(sys.platform != "linux", reason="the sampler reads /proc")
def test_one_job_alone_keeps_its_burst_and_most_of_its_paces(pyspy: tuple[Path, Path, Path]) -> None:
    """The default budget is about what one waiting job's paces ask in its first minute (a burst, then a dump
    every 2 s up to KEEP, then every 4 s): its burst is whole, then about one dump every 3 s."""
    exe, log, _ = pyspy
    clock = _Clock()
    sampler = InsideSampler(StackReader(str(exe)), every_s=2.0, clock=clock, proc_root="/nonexistent")
    times = [t for t, _ in _storm(sampler, clock, log, minutes=3, every_s=1e9, lasts_s=0.0)]
    assert times[:BURST_DUMPS] == [times[0] + 0.5 * k for k in range(BURST_DUMPS)]
    assert DUMPS_PER_MIN - 3 <= _most_in_a_window(times) <= DUMPS_PER_MIN


def test_the_budget_gives_a_burst_at_once_then_the_rest_of_the_minute_paced() -> None:
    """24 a minute: 9 in a row, then the other 15 one every 4 s; never more than 24 in a minute."""
    clock = _Clock()
    budget = DumpBudget(24, clock)
    assert [budget.take() for _ in range(10)] == [True] * 9 + [False]
    clock.t += 4.0 - 0.01
    assert not budget.take() and budget.left() == 0
    clock.t += 0.01
    assert budget.left() == 1 and budget.take()
    times = []
    for k in range(1200):  # asked every 0.1 s for two minutes
        clock.t = 2000.0 + 0.1 * k
        if budget.take():
            times.append(clock.t)
    assert 23 <= _most_in_a_window(times) <= 24  # the 24th token comes back as the minute closes
    with pytest.raises(ValueError, match="at least 2"):
        DumpBudget(1, clock)


def test_the_sampler_sleeps_until_the_budget_allows_a_run_not_a_burst_s_pace(pyspy: tuple[Path, Path, Path]) -> None:
    """While the minute's runs are spent a round dumps nothing: the sampler's thread sleeps until the next run is
    allowed, not a burst's 0.5 s (a round for each, reading /proc to be refused); with runs left, the burst's pace."""
    exe, _, _ = pyspy
    clock = _Clock()
    sampler = InsideSampler(StackReader(str(exe)), every_s=2.0, clock=clock, proc_root="/nonexistent")
    sampler.want([(NO_PROCESS, [])], burst=[NO_PROCESS])
    assert sampler._pace() == 0.5  # a burst asked for, the budget full
    while sampler.budget.take():
        pass
    assert sampler._pace() == pytest.approx(60.0 / (DUMPS_PER_MIN - AT_ONCE))  # the next token: 4 s
    clock.t += 3.0
    assert sampler._pace() == pytest.approx(1.0)
    clock.t += 1.0
    assert sampler._pace() == 0.5


def test_the_budget_is_read_from_the_configuration(tmp_path: Path) -> None:
    from gpu_triage.config import inside_settings, load_config
    from gpu_triage.errors import UserError

    path = tmp_path / "c.toml"
    path.write_text("[inside]\ndumps_per_min = 12\n")
    assert inside_settings(load_config(path)).dumps_per_min == 12
    for bad in ("dumps_per_min = 1", "dumps_per_min = 601", "dumps_per_min = 2.5", "dumps_per_min = true"):
        path.write_text(f"[inside]\n{bad}\n")
        with pytest.raises(UserError, match="inside.dumps_per_min"):
            load_config(path)
