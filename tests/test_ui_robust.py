"""Issue #9, the dashboard's part: a source error never freezes the screen, a huge window is capped, the
overlays quit on q, a recording stopped at once says what happened, and small terminals are told so."""

from __future__ import annotations

import asyncio

from gpu_triage.config import Config
from gpu_triage.model import Tick
from gpu_triage.ui.app import TriageApp

from tests.ui_ticks import TickListSource, make_tick


class FailsOnceSource(TickListSource):
    """An outside source whose driver hiccups once (its second sample raises), then answers again."""

    def sample(self) -> Tick:
        self._i += 1
        if self._i == 2:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return make_tick(self._i, gpus=self.gpus, cores=self.cores, interval_s=0.05)


async def _until(pilot, condition, steps: int = 400) -> bool:
    """Let the app run until ``condition()`` holds (bounded by steps, not by a timed assertion)."""
    for _ in range(steps):
        if condition():
            return True
        await pilot.pause(0.02)
    return condition()


async def test_a_source_error_is_shown_and_the_screen_keeps_updating() -> None:
    app = TriageApp(Config(interval_s=0.05), source=FailsOnceSource(2, 4), source_label="test")
    app.redraw_min_s = 0.0
    async with app.run_test(size=(100, 30)) as pilot:
        assert await _until(pilot, lambda: app.source_errors >= 1), "the error never reached the screen"
        seen = app.ticks_ingested
        redraws = app.redraws
        assert await _until(pilot, lambda: app.ticks_ingested >= seen + 5), "the screen stopped after the error"
        assert await _until(pilot, lambda: app.redraws > redraws)
        header = app.query_one("#header").shown_plain
        assert "source error" in header and "NVML_ERROR_UNKNOWN" in header and "sampling goes on" in header
        assert any("NVML_ERROR_UNKNOWN" in str(n.message) for n in app._notifications)
        assert app._feed is not None and app._feed.sampler.running
    await asyncio.sleep(0)
