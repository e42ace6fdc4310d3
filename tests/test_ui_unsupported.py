"""A card that reports nothing is "n/a" everywhere on screen, never LOST, never 0; empty detail charts say
so even on an 80-column terminal (plotext drops a title wider than its plot)."""

from __future__ import annotations

from dataclasses import replace

from gpu_triage.config import Config
from gpu_triage.model import GpuSample
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.formatters import NA_ON_CARD, fit_title
from tests.ui_ticks import TickListSource, make_tick


def _null_card_ticks(n: int) -> list:
    """Two cards whose every field is null (an old driver, no permission), and a host without memory figures."""
    return [
        replace(make_tick(i, gpus=2, cores=4), gpus=[GpuSample(index=0), GpuSample(index=1)],
                host_mem_used_bytes=None, host_mem_total_bytes=None)
        for i in range(n)
    ]


def _app(prefill: list) -> TriageApp:
    return TriageApp(Config(), source=TickListSource(2, 4), source_label="test", prefill=prefill, autostart=False)


async def test_a_card_that_never_reported_is_na_not_lost() -> None:
    app = _app(_null_card_ticks(20))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        gpu = app.query_one("#gpu").shown_plain
        cards = [ln for ln in gpu.split("\n")[1:] if ln[1:3] in (" 0", " 1")]
        assert len(cards) == 2
        assert not any("LOST" in ln for ln in cards), cards
        assert all("n/a" in ln and " 0%" not in ln for ln in cards), cards
        cpu = app.query_one("#cpu").shown_plain
        assert "mem n/a" in cpu and "n/a/n/a" not in cpu


async def test_a_card_that_went_silent_is_still_lost() -> None:
    ticks = [make_tick(i, gpus=2, cores=4) for i in range(10)]
    ticks.append(replace(make_tick(10, gpus=2, cores=4), gpus=[ticks[0].gpus[0], GpuSample(index=1)]))
    app = _app(ticks)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        lines = app.query_one("#gpu").shown_plain.split("\n")
        assert "LOST" in next(ln for ln in lines if ln[1:3] == " 1")
        assert "LOST" not in next(ln for ln in lines if ln[1:3] == " 0")


async def test_empty_detail_charts_say_na_on_a_small_terminal() -> None:
    app = _app(_null_card_ticks(20))
    async with app.run_test(size=(80, 30)) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert type(app.screen).__name__ == "DetailScreen"
        for name in ("util", "sm", "mem", "link", "power", "clock"):
            plot = app.screen.query_one(f"#p_{name}")
            rendered = plot.plt.build()
            assert NA_ON_CARD in rendered, name


def test_fit_title_keeps_short_titles_and_puts_na_first_when_cut() -> None:
    assert fit_title("power W", 40, missing=False) == "power W"
    assert fit_title("power W", 40, missing=True) == f"{NA_ON_CARD}: power W"
    long = "GPU-Util %: mean (green), min-max inside each tick (grey dots)"
    cut = fit_title(long, 30, missing=False)
    assert len(cut) == 30 and cut.endswith("…") and long.startswith(cut[:-1])
    cut_na = fit_title(long, 30, missing=True)
    assert len(cut_na) == 30 and cut_na.startswith(NA_ON_CARD)
