"""Issue #13: the verdict with its first advice line is the last thing to lose room on the main screen.

For every simulated scenario at 80x24 (8 cards), 120x40 (8 cards) and 200x60 (16 cards) the headline, the
evidence that fits and the whole first advice line ("→ …", wrapped) are on screen, inside the terminal. The
8-card dashboard is started at 80x24 and then widened to 120x40 (a resize lays the screen out afresh:
tests/test_ui_resize.py), so one app per card count.

The window holds a full window of the scenario, of which only the newest ticks are judged one by one (as a
replay's seek judges the newest of its window, ui/replay.py), enough for the hold to settle: a tenth of the
engine's work, and for every scenario here the verdict that judging every tick of the window shows.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from gpu_triage.config import Config
from gpu_triage.scenarios import SCENARIOS
from gpu_triage.sources import sim
from gpu_triage.ui.app import TriageApp
from tests.waits import wait_for

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
CARDS = [(8, [(80, 24), (120, 40)]), (16, [(200, 60)])]  # the sizes one app of this many cards is shown at
TH = Config().thresholds
JUDGED = round(4 * TH.hold_s / Config().interval_s)  # the newest ticks judged: four holds (destructive advice's too)


def _sim_app(scenario: str, gpus: int) -> TriageApp:
    config = Config()
    source = sim.SimulatedSource(scenario, gpus=gpus, cores=32, seed=0, interval_s=config.interval_s, start=START)
    ticks = [source.sample() for _ in range(config.window_ticks)]
    app = TriageApp(config, source=source, source_label=f"demo: {scenario}", prefill=ticks[-JUDGED:],
                    autostart=False)
    for tick in ticks[:-JUDGED]:
        app.verdicts.add(tick)  # into the window unjudged; the prefill's ticks follow it, each judged
    return app


def _on_screen(app: TriageApp, pane: str) -> list[str]:
    widget = app.query_one(f"#{pane}")
    if not widget.display:
        return []
    bottom = app.query_one("#foot").region.y  # the key line and replay bar are drawn over the body
    height = max(0, min(widget.region.bottom, bottom) - widget.region.y)
    return widget.shown_plain.split("\n")[:height]


def _laid_out(app: TriageApp, frames: int, w: int, h: int) -> Callable[[], bool]:
    """The resize's frame is drawn (a frame after the ``frames`` th) and the screen laid out at ``w`` x ``h``
    (the key line at its bottom)."""
    foot = app.query_one("#foot")
    return lambda: app.redraws > frames and foot.region.bottom == h and foot.region.width == w


def _check(app: TriageApp, size: tuple[int, int]) -> None:
    shown = app.verdicts.shown
    lines = _on_screen(app, "diag")
    assert len(app.window) == Config().window_ticks
    assert lines and lines[0].startswith(f"VERDICT {shown.pattern} · {shown.bottleneck}")
    bullets = [ln for ln in lines if ln.startswith("• ")]
    want = len(shown.evidence) if size != (80, 24) else min(2, len(shown.evidence))
    assert len(bullets) >= want
    for bullet, evidence in zip(bullets, shown.evidence, strict=False):
        assert evidence.startswith(bullet[2:].removesuffix("…"))
    if shown.advice:
        start = next(i for i, ln in enumerate(lines) if ln.startswith("→ "))
        first = [lines[start][2:]] + [ln.strip() for ln in lines[start + 1 :] if ln.startswith("  ")]
        assert " ".join(first) == shown.advice[0]


@pytest.mark.slow
@pytest.mark.parametrize(("gpus", "sizes"), CARDS,
                         ids=["-".join(f"{w}x{h}" for w, h in sizes) for _, sizes in CARDS])
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_headline_evidence_and_first_advice_are_on_screen(
    scenario: str, gpus: int, sizes: list[tuple[int, int]]
) -> None:
    app = _sim_app(scenario, gpus)
    async with app.run_test(size=sizes[0]) as pilot:
        await pilot.pause()
        _check(app, sizes[0])
        for w, h in sizes[1:]:
            laid_out = _laid_out(app, app.redraws, w, h)
            await pilot.resize_terminal(w, h)
            await wait_for(pilot, laid_out, f"the {w}x{h} frame")
            await pilot.pause()
            _check(app, (w, h))


async def test_single_card_busy_shows_the_set_device_fix_at_80x24() -> None:
    app = _sim_app("single_card_busy", 8)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "torch.cuda.set_device(local_rank)" in "\n".join(_on_screen(app, "diag"))
