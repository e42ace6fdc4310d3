"""The dashboard started on a window already full, judged once per test session.

Most dashboard tests start the app on a full window (150 ticks of a simulated server). Handed over as
``prefill``, each app diagnosed every one of those ticks again on mount: half a second of CPU, most of what
such a test costs, and the same for every test that starts on the same ticks. Here the ticks go through the
app's own prefill path once (:meth:`TriageApp.ingest` without drawing, on an app that is never mounted); what
it leaves (the source as sampled, the judged window and the verdicts shown so far) is kept pickled for the
session (tests/shared_cache.py) and each app starts on its own copy (``TriageApp(judged=...)``). The
snapshots (tests/test_ui_snapshots.py) are the proof that a copy draws what the prefill drew.

``make`` builds the source and its ticks: a function at the top level of a module (its name is the key of the
cache, with ``args``); :func:`sim` and :func:`listed` are the common ones."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any

from gpu_triage.config import Config
from gpu_triage.model import Tick
from gpu_triage.sources.base import Source
from gpu_triage.ui.app import TriageApp
from tests.shared_cache import shared
from tests.ui_ticks import TickListSource, make_tick

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
Make = Callable[..., tuple[Source, list[Tick]]]


def sim(scenario: str = "data_pipeline", gpus: int = 8, cores: int = 32) -> tuple[Source, list[Tick]]:
    """The simulated server (seed 0, from START), a full window of its ticks."""
    from gpu_triage.sources.sim import SimulatedSource

    config = Config()
    source = SimulatedSource(scenario, gpus=gpus, cores=cores, seed=0, interval_s=config.interval_s, start=START)
    return source, [source.sample() for _ in range(config.window_ticks)]


def listed(gpus: int = 8, cores: int = 32, n: int = 40) -> tuple[Source, list[Tick]]:
    """tests/ui_ticks.py's hand-made server, ``n`` ticks of it."""
    return TickListSource(gpus, cores), [make_tick(i, gpus=gpus, cores=cores) for i in range(n)]


@shared
def _judged(module: str, name: str, args: tuple[Hashable, ...]) -> bytes:
    make: Make = getattr(sys.modules[module], name)
    source, ticks = make(*args)
    app = TriageApp(Config(), source=source, autostart=False)
    for tick in ticks:
        app.ingest(tick, draw=False, record=False)  # what TriageApp.on_mount does with its prefill
    return pickle.dumps((source, app.verdicts), protocol=pickle.HIGHEST_PROTOCOL)


def prefilled(make: Make, *args: Hashable, config: Config | None = None, **app: Any) -> TriageApp:
    """A TriageApp (not started: ``autostart`` False) over ``make(*args)``'s source, its window full of its
    ticks, judged; ``app``: the app's other arguments (``source_label``, ``banner`` ...)."""
    config = config or Config()
    default = Config()
    # the judgement was made with the default settings of the judge: a config that changes them needs its own
    assert (config.thresholds, config.window_s, config.interval_s) == (
        default.thresholds, default.window_s, default.interval_s), "judged with other settings"
    source, judged = pickle.loads(_judged(make.__module__, make.__qualname__, tuple(args)))
    app.setdefault("source_label", "test")
    return TriageApp(config, source=source, judged=judged, autostart=False, **app)


async def resize_to(pilot: Any, app: TriageApp, size: tuple[int, int]) -> None:
    """The terminal resized to ``size``, and the dashboard's frame laid out for it drawn: one app through several
    sizes, each asserting its own screen, instead of an app started for each."""
    from tests.waits import wait_for

    await pilot.pause()  # a frame still due from before is drawn before the count below
    await pilot.resize_terminal(*size)
    # settled: the last frame was laid out for this size and none is on its way (a resize to the size already
    # drawn draws nothing, so a count of frames would wait for one that never comes)
    await wait_for(pilot, lambda: tuple(app.size) == size and app.settled, f"a frame at {size}")
    await pilot.pause()
