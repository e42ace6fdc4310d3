"""Issue #9, the dashboard's part: a source error never freezes the screen, a huge window is capped, the
overlays quit on q, a recording stopped at once says what happened, and small terminals are told so."""

from __future__ import annotations

import asyncio

import pytest

from gpu_triage.config import Config
from gpu_triage.model import Tick
from gpu_triage.ui.app import TriageApp
from tests.ui_ticks import TickListSource, make_tick
from tests.waits import wait_for


class FailsOnceSource(TickListSource):
    """An outside source whose driver hiccups once (its second sample raises), then answers again."""

    def sample(self) -> Tick:
        self._i += 1
        if self._i == 2:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return make_tick(self._i, gpus=self.gpus, cores=self.cores, interval_s=0.05)


async def _until(pilot, condition) -> bool:
    """Let the app run until ``condition()`` holds (bounded: tests/waits.py)."""
    await wait_for(pilot, condition)
    return True


async def test_a_source_error_is_shown_and_the_screen_keeps_updating() -> None:
    app = TriageApp(Config(interval_s=0.05), source=FailsOnceSource(2, 4), source_label="test")
    app.pacer.min_s = 0.0
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


async def test_a_window_too_long_for_the_interval_is_capped_and_the_screen_says_so() -> None:
    from gpu_triage.window import MAX_WINDOW_TICKS

    config = Config(interval_s=0.05, window_s=604800)
    app = TriageApp(config, source=TickListSource(16, 8), source_label="test", autostart=False)
    assert app.window.capacity == MAX_WINDOW_TICKS
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert f"window capped at {MAX_WINDOW_TICKS} ticks (3 min at 0.05 s" in app.query_one("#header").shown_plain


async def test_record_then_quit_at_once_says_why_no_file(tmp_path) -> None:
    """`r` then `q` before the first tick: nothing can be written, and the terminal is told so."""
    config = Config(recording_dir=tmp_path)
    app = TriageApp(config, source=TickListSource(2, 4), source_label="test", autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r")
        assert app.recording.recorder is not None
        await pilot.press("q")
    assert list(tmp_path.glob("*.parquet")) == []
    assert len(app.exit_notes) == 1
    assert app.exit_notes[0].startswith("recording not saved: no tick was recorded before the stop")


async def test_record_then_quit_after_ticks_says_where_the_file_is(tmp_path) -> None:
    config = Config(recording_dir=tmp_path)
    app = TriageApp(config, source=TickListSource(2, 4), source_label="test", autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r")
        for i in range(3):
            app.ingest(make_tick(100 + i, gpus=2, cores=4))
        await pilot.press("q")
    files = list(tmp_path.glob("*.parquet"))
    assert len(files) == 1 and app.exit_notes == [f"recording saved: {files[0]}"]


@pytest.mark.parametrize("overlay", ["question_mark", "d"])
async def test_q_on_the_help_and_doctor_quits_and_escape_closes(overlay: str) -> None:
    """README: q quits. On the help and the doctor it only closed the overlay."""
    from gpu_triage.doctor.run import Report

    def loader() -> Report:
        raise RuntimeError("no driver here")  # the outside world: the doctor's gathering fails fast

    app = TriageApp(Config(), source=TickListSource(2, 4), source_label="test", autostart=False)
    app.doctor_loader = loader
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press(overlay)
        await pilot.pause()
        overlay_screen = type(app.screen).__name__
        assert overlay_screen in ("HelpScreen", "DoctorScreen")
        await pilot.press("escape")
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen" and app.is_running
        await pilot.press(overlay)
        await pilot.pause()
        assert type(app.screen).__name__ == overlay_screen
        await pilot.press("q")
        await pilot.pause()
    assert not app.is_running


async def test_long_toasts_wrap_and_stay_whole_at_80_columns() -> None:
    from textual.widgets._toast import Toast

    path = "/home/someone/.local/share/gpu-triage/recordings/gpu-triage-20261130T195259Z.parquet"
    message = (
        f"recording not saved: writing {path} failed ([Errno 28] No space left on device); the 1234 ticks are "
        f"kept in {path}.partial.arrows: `gpu-triage recover {path}.partial.arrows`"
    )
    app = TriageApp(Config(), source=TickListSource(2, 4), source_label="test", autostart=False)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.notify(message, severity="error")
        await pilot.pause()
        await pilot.pause()
        toast = app.screen.query_one(Toast)
        assert toast.region.bottom <= 24 and toast.region.right <= 80
        lines = ["".join(seg.text for seg in toast.render_line(y)) for y in range(toast.size.height)]
        assert "".join(ln.strip() for ln in lines).replace(" ", "") == message.replace(" ", "")  # [Errno 28] kept


@pytest.mark.slow
@pytest.mark.parametrize("key", ["enter", "d"])
async def test_detail_and_doctor_say_terminal_too_small_at_40x10(key: str) -> None:
    from gpu_triage.ui.layout import DETAIL_MIN_SIZE, DOCTOR_MIN_SIZE

    need = DETAIL_MIN_SIZE if key == "enter" else DOCTOR_MIN_SIZE
    app = TriageApp(Config(), source=TickListSource(2, 4), source_label="test", autostart=False,
                    prefill=[make_tick(i, gpus=2, cores=4) for i in range(10)])
    app.doctor_loader = lambda: (_ for _ in ()).throw(RuntimeError("no driver"))
    async with app.run_test(size=(40, 10)) as pilot:
        await pilot.press(key)
        await pilot.pause()
        small = app.screen.query_one("#too-small")
        assert small.display
        assert f"terminal too small (need {need[0]}x{need[1]}" in str(small.render())
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert not app.screen.query_one("#too-small").display
