"""The sampler thread calls the source once per interval and survives a failing sample."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from gpu_triage.model import HostInfo, Tick
from gpu_triage.sampler import Sampler
from gpu_triage.sources.base import SourceStatus


class CountingSource:
    """An outside source that fails on its third call."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def host_info(self) -> HostInfo:
        return HostInfo()

    def sample(self) -> Tick:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("driver hiccup")
        return Tick(ts=datetime.now(UTC), interval_s=0.01)

    def status(self) -> SourceStatus:
        return SourceStatus()

    def close(self) -> None:
        pass


def test_ticks_arrive_off_the_calling_thread_and_errors_do_not_stop_it() -> None:
    source = CountingSource()
    got: list[Tick] = []
    threads: set[str] = set()
    errors: list[BaseException] = []
    enough = threading.Event()

    def on_tick(t: Tick) -> None:
        got.append(t)
        threads.add(threading.current_thread().name)
        if len(got) >= 5:
            enough.set()

    sampler = Sampler(source, 0.005, on_tick, errors.append)
    sampler.start()
    assert enough.wait(10), "the sampler stopped producing ticks"
    sampler.stop()
    assert not sampler.running
    assert threading.current_thread().name not in threads
    assert [str(e) for e in errors] == ["driver hiccup"]
    assert sampler.ticks >= 5


def test_stop_before_first_tick_produces_nothing() -> None:
    source = CountingSource()
    got: list[Tick] = []
    sampler = Sampler(source, 60.0, got.append)
    sampler.start()
    sampler.stop()
    assert got == [] and source.calls == 0


def test_first_tick_can_come_before_a_whole_interval() -> None:
    source = CountingSource()
    got = threading.Event()
    sampler = Sampler(source, 3600.0, lambda t: got.set(), first_after_s=0.0)
    sampler.start()
    try:
        assert got.wait(10), "the first tick waited for the whole hour-long interval"
    finally:
        sampler.stop()
    assert source.calls == 1


def test_failing_callbacks_do_not_end_sampling() -> None:
    """The receivers are ours, but a bug in one (the app once passed a keyword ``call_soon_threadsafe`` does
    not take) ended the thread and froze the screen: the sampler must keep calling the source."""
    source = CountingSource()
    got: list[Tick] = []
    enough = threading.Event()

    def on_tick(t: Tick) -> None:
        got.append(t)
        if len(got) == 1:
            raise ValueError("receiver bug")
        if len(got) >= 5:
            enough.set()

    def on_error(exc: BaseException) -> None:
        raise TypeError("error receiver bug")

    sampler = Sampler(source, 0.005, on_tick, on_error)
    sampler.start()
    assert enough.wait(10), "a failing callback ended the sampler"
    sampler.stop()
    assert source.calls >= 6  # the source failed once (call 3) and was called again after
