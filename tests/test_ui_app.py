"""The dashboard driven headless with Textual's pilot: layout at 80×24 and 200×60, keys, replay, recording."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpu_triage.config import Config
from gpu_triage.data import H200_TRACE_2S
from gpu_triage.model import ProcSample
from gpu_triage.trace.reader import open_trace
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.run import NO_GPU_BANNER, build_app
from tests.ui_prefill import listed, prefilled
from tests.ui_ticks import TickListSource, make_tick
from tests.waits import wait_for


def _app(gpus: int = 8, cores: int = 32, n: int = 40, **kw) -> TriageApp:
    if not {"prefill", "gpu_available", "lost"} & kw.keys():  # the plain server: its window judged once
        return prefilled(listed, gpus, cores, n, **kw)
    source = TickListSource(gpus, cores, **{k: kw.pop(k) for k in ("gpu_available", "lost") if k in kw})
    prefill = kw.pop("prefill", None) or [make_tick(i, gpus=gpus, cores=cores) for i in range(n)]
    return TriageApp(Config(), source=source, source_label="test", prefill=prefill, autostart=False, **kw)


def _visible_lines(app: TriageApp, pane: str) -> list[str]:
    """Lines of a pane that are really on screen (its region clipped to the terminal)."""
    widget = app.query_one(f"#{pane}")
    region = widget.region.intersection(app.screen.region)
    lines = widget.shown_plain.split("\n")
    return lines[: region.height] if widget.display else []


@pytest.mark.parametrize(("size", "gpus", "cores"), [((80, 24), 8, 32), ((200, 60), 16, 128)])
async def test_every_card_line_is_visible(size: tuple[int, int], gpus: int, cores: int) -> None:
    app = _app(gpus, cores)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        lines = _visible_lines(app, "gpu")
        card_lines = [ln for ln in lines[1:] if ln[1:3].strip().isdigit()]
        assert [int(ln[1:3]) for ln in card_lines] == list(range(gpus))
        assert all(len(ln) <= size[0] for ln in lines)
        # the verdict line and the key line are on screen too
        assert _visible_lines(app, "diag")
        assert app.query_one("#keys").region.bottom <= size[1]
        # nothing overlaps: panes are stacked in order
        regions = [app.query_one(f"#{p}").region for p in ("header", "gpu", "diag", "cpu", "disk", "procs")]
        shown = [r for r in regions if r.height]
        assert all(a.bottom <= b.y for a, b in zip(shown, shown[1:], strict=False))
        assert shown[-1].bottom <= app.query_one("#foot").region.y


async def test_few_cards_on_a_big_terminal_get_tall_graphs_with_a_y_axis() -> None:
    """1 card at 160x48: several rows of GPU-Util and of SM activity, 0/50/100 marked, nothing cut."""
    app = _app(1, 16)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        lines = _visible_lines(app, "gpu")
        assert [ln[1:3] for ln in lines[1:] if ln[1:3].strip().isdigit()] == [" 0"]
        axis = [ln[4:8] for ln in lines[1:]]
        assert axis.count("100┤") == 2 and axis.count("  0┤") == 2 and " 50┤" in axis  # util graph + SM graph
        assert len(lines) - 1 >= 6
        assert sum(1 for ln in lines if ln.startswith("act ")) == 1  # the SM activity graph
        assert all(len(ln) <= 160 for ln in lines)
        # card 0 alternates 95 % / 5 % every 2 ticks with 0-100 inside each tick: in the top row (87.5-100 %)
        # the busy ticks reach in (95 %: a 5/8 block), the idle ones show their 100 % peak as ░
        top = lines[1][8:]
        assert "▅▅░░▅▅░░" in top
        assert _visible_lines(app, "diag") and _visible_lines(app, "procs")
        # the same card at 80x24 stays on the compact form
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: max(map(len, app.query_one("#gpu").shown_plain.split("\n"))) <= 80,
                       "the frame laid out for 80x24")
        lines = _visible_lines(app, "gpu")
        assert [ln[1:3] for ln in lines[1:] if ln[1:3].strip().isdigit()] == [" 0"]
        assert not any("100┤" in ln for ln in lines)


@pytest.mark.parametrize(("size", "gpus"), [((160, 48), 2), ((200, 60), 4)])
async def test_tall_form_keeps_every_card_and_the_panes_below(size: tuple[int, int], gpus: int) -> None:
    app = _app(gpus, 32)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        lines = _visible_lines(app, "gpu")
        assert [int(ln[1:3]) for ln in lines[1:] if ln[1:3].strip().isdigit()] == list(range(gpus))
        assert sum(1 for ln in lines if "100┤" in ln) == 2 * gpus
        assert all(len(ln) <= size[0] for ln in lines)
        regions = [app.query_one(f"#{p}").region for p in ("header", "gpu", "diag", "cpu", "disk", "procs")]
        shown = [r for r in regions if r.height]
        assert all(a.bottom <= b.y for a, b in zip(shown, shown[1:], strict=False))
        assert shown[-1].bottom <= app.query_one("#foot").region.y


async def test_process_table_is_aligned_and_counts_what_does_not_fit() -> None:
    ticks = [make_tick(i, gpus=2, cores=4) for i in range(3)]
    extra = [
        ProcSample(pid=3000 + k, gpu_index=1, name="worker", gpu_mem_bytes=None, cpu_pct=None, workers=None)
        for k in range(30)
    ]
    many = ProcSample(pid=2999, gpu_index=0, name="train", gpu_mem_bytes=1 << 30, cpu_pct=50.0, workers=8,
                      workers_cpu_pct=[10.0, 12.0, 14.0, 11.0, 13.0, 12.0, 10.0, 14.0])
    ticks[-1].procs = [*ticks[-1].procs, many, *extra]
    app = _app(2, 4, prefill=ticks)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        lines = _visible_lines(app, "procs")
        head = lines[0]
        assert "+" in lines[-1] and "more" in lines[-1]
        shown_rows = len(lines) - 2
        assert int(lines[-1].split("+")[1].split()[0]) == 33 - shown_rows
        rows = lines[1:-1]
        # right-aligned numbers end under the end of their heading
        assert all(row[: head.index("PID") + 3].strip().isdigit() for row in rows)
        mem_end = head.index("GPU MEM") + len("GPU MEM")
        assert all(row[mem_end - 1] != " " for row in rows)
        row = next(r for r in rows if r.split()[0] == "2999")
        assert " 8 avg 12 max 14 " in row  # WORKERS 8, then their CPU in the column's 13 cells
        few = next(r for r in rows if r.split()[0] == "1000")
        assert "80 70 60 50 %" in few
        na = [r for r in rows if "worker" in r]
        assert na and all(r.count("n/a") >= 3 for r in na)  # no memory, CPU or worker count: n/a, not 0


@pytest.mark.slow
async def test_wide_screen_shows_every_core_with_its_percent() -> None:
    app = _app(16, 128)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        text = "\n".join(_visible_lines(app, "cpu"))
        assert "127" in text
        assert text.count("%") >= 128


async def test_full_and_empty_cards_look_different() -> None:
    ticks = [make_tick(i, gpus=4, cores=8) for i in range(20)]
    for t in ticks:
        t.gpus[1].util_pct, t.gpus[2].util_pct = 100.0, 0.0
    app = _app(4, 8, prefill=ticks)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        lines = _visible_lines(app, "gpu")
        full = next(ln for ln in lines if ln[1:3] == " 1")
        empty = next(ln for ln in lines if ln[1:3] == " 2")
        assert "█" * 10 in full and "█" not in empty
        assert "·" * 10 in empty


async def test_missing_values_show_na_not_zero() -> None:
    ticks = [make_tick(i, gpus=2, cores=4, no_power=True) for i in range(5)]
    app = _app(2, 4, prefill=ticks)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        gpu = "\n".join(_visible_lines(app, "gpu"))
        assert "n/aW" in gpu and " 0W" not in gpu
        assert "NV n/a" in gpu  # no NVLink on these cards
        disk = "\n".join(_visible_lines(app, "disk"))
        sda = next(ln for ln in disk.split("\n") if ln.startswith("sda"))
        assert "n/a" in sda and " 0%" not in sda


async def test_lost_card_is_shown_lost() -> None:
    ticks = [make_tick(i, gpus=4, cores=8) for i in range(10)] + [make_tick(10, gpus=4, cores=8, lost={2})]
    app = _app(4, 8, prefill=ticks, lost={2})
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        line = next(ln for ln in _visible_lines(app, "gpu") if ln[1:3] == " 2")
        assert "LOST" in line


async def test_no_gpu_banner_on_a_machine_without_driver() -> None:
    app = _app(
        0, 8, gpu_available=False, banner=NO_GPU_BANNER, prefill=[make_tick(i, gpus=0, cores=8) for i in range(3)]
    )
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause()
        header = app.query_one("#header").shown_plain
        assert "No NVIDIA GPU/driver found: showing host only" in header
        assert "gpu-triage demo" in header


async def test_live_pause_freezes_display_but_keeps_ingesting() -> None:
    app = _app(2, 4)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        before = app.query_one("#cpu").shown_plain
        await pilot.press("p")
        assert "PAUSED" in app.query_one("#header").shown_plain
        app.ingest(make_tick(100, gpus=2, cores=4))
        await pilot.pause()
        assert app.window.last.ts == make_tick(100).ts
        assert app.query_one("#cpu").shown_plain == before
        await pilot.press("p")
        await pilot.pause()
        assert app.query_one("#cpu").shown_plain != before


@pytest.mark.slow
async def test_help_detail_arrows_and_quit() -> None:
    app = _app(4, 8)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        await pilot.press("down", "down")
        assert app.selected == 2
        assert "▶ 2" in app.query_one("#gpu").shown_plain
        await pilot.press("enter")
        await pilot.pause()
        assert type(app.screen).__name__ == "DetailScreen" and app.screen.column == 2
        assert "GPU 2" in str(app.screen.query_one("#title").render())
        await pilot.press("escape")
        assert type(app.screen).__name__ == "Screen"
        await pilot.press("q")
    assert app.return_code == 0 or app.return_code is None
    assert not app.is_running


async def test_record_key_writes_a_valid_file(tmp_path: Path) -> None:
    config = Config(recording_dir=tmp_path)
    source = TickListSource(2, 4)
    app = TriageApp(config, source=source, source_label="test", autostart=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("r")
        assert app.recording.recorder is not None
        for _ in range(3):
            app.ingest(source.sample())
        await pilot.pause()
        app.redraw()
        assert "● REC" in app.query_one("#header").shown_plain
        await pilot.press("r")
        assert app.recording.recorder is None
    files = list(tmp_path.glob("*.parquet"))
    assert len(files) == 1
    trace = open_trace(files[0])
    assert trace.n == 3
    # each tick with the engine's raw verdict, as `record` stores it: what diagnose FILE recomputes there
    from gpu_triage.offline.judge import verdicts

    ticks = trace.ticks()
    again = verdicts(ticks, trace.interval_s, config.thresholds, config.window_s, trace.host.cpu_count)
    assert [(t.verdict.pattern, t.verdict.bottleneck) if t.verdict else None for t in ticks] == [
        (str(v.pattern), str(v.bottleneck)) for _, v, _ in again]


async def test_record_option_closes_file_on_exit(tmp_path: Path) -> None:
    target = tmp_path / "run.parquet"
    source = TickListSource(2, 4)
    app = TriageApp(Config(), source=source, source_label="test", autostart=False, record_path=target)
    async with app.run_test(size=(120, 30)) as pilot:
        app.ingest(source.sample())
        app.ingest(source.sample())
        await pilot.press("q")
    assert open_trace(target).n == 2


def _replay_app() -> TriageApp:
    return build_app("replay", argparse.Namespace(file=str(H200_TRACE_2S), speed=1.0, record=None), Config())


@pytest.mark.slow
async def test_replay_controls_move_the_position_and_the_shown_tick() -> None:
    app = _replay_app()
    trace = app.replay.trace
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")  # pause the playback: only keys move it now
        assert not app.replay.playing
        pos = app.replay.position

        def shown_time() -> str:
            return app.query_one("#bar").shown_plain

        await pilot.press("right")
        assert app.replay.position == pos + 1 and app.window.last.ts == trace.tick(pos + 1).ts
        await pilot.press("left", "left")
        await pilot.pause()
        assert app.replay.position == pos - 1 and app.window.last.ts == trace.tick(pos - 1).ts
        assert trace.tick(pos - 1).ts.strftime("%H:%M:%S") in shown_time()
        await pilot.press("left_square_bracket")
        assert trace.timestamps[pos - 1] - trace.timestamps[app.replay.position] == pytest.approx(30, abs=3)
        await pilot.press("g")
        assert app.replay.position == 0 and len(app.window) == 1
        await pilot.press("G")
        assert app.replay.position == trace.n - 1
        assert len(app.window) == min(trace.n, app.window.capacity)
        await pilot.press("plus")
        assert app.replay.speed == 2 and "x2" in app.query_one("#header").shown_plain


async def test_replay_of_the_h200_trace_shows_the_sawtooth() -> None:
    """At the sawtooth case of the real trace, GPU-Util cells hide bursts: shaded cells are drawn."""
    app = _replay_app()
    trace = app.replay.trace
    import json
    from datetime import datetime

    from gpu_triage.data import labels_for

    labels = json.loads(labels_for(H200_TRACE_2S).read_text())
    saw = next(lab for lab in labels if lab["scenario"] == "sawtooth_stall")
    end = datetime.fromisoformat(saw["end"]).timestamp()
    # 120x24: one compact line per card, bursts as shaded cells
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.press("space")
        app.replay.position = trace.index_at(end)
        app._rebuild_from_replay()
        app.redraw()
        await pilot.pause()
        pane = app.query_one("#gpu")
        assert any("on grey30" in str(span.style) for span in pane._shown.spans)
        card = next(ln for ln in pane.shown_plain.split("\n") if ln[1:3] == " 0")
        assert "█" in card and "·" in card  # bursts and zeros on one fixed scale
        # 120x40: one card gets the tall graph; the burst peaks above the mean bar are drawn as ░
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        app.redraw()
        await pilot.pause()
        lines = _visible_lines(app, "gpu")
        assert any("┤" in ln for ln in lines), lines  # the tall form
        assert any("░" in ln for ln in lines[1:]) and any("·" in ln for ln in lines[1:])


# -- the live source against a fake NVML module (the outside world), psutil real -----------------------
from gpu_triage.sources import live  # noqa: E402
from tests import fake_nvml  # noqa: E402


async def test_live_without_driver_starts_host_only_with_the_banner() -> None:
    source = live.LiveSource(nvml_module=fake_nvml.FakeNvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert not source.status().gpu_available
    app = TriageApp(Config(), source=source, source_label="live", banner=NO_GPU_BANNER, autostart=False)
    async with app.run_test(size=(200, 30)) as pilot:
        app.ingest(source.sample())
        await pilot.pause()
        assert "No NVIDIA GPU/driver found: showing host only" in app.query_one("#header").shown_plain
        assert "host only" in app.query_one("#gpu").shown_plain
        assert "cores" in app.query_one("#cpu").shown_plain  # the host is still shown
    source.close()


async def test_live_lost_card_is_shown_lost() -> None:
    nvml = fake_nvml.h200_box(4)
    source = live.LiveSource(nvml_module=nvml)
    app = TriageApp(Config(), source=source, source_label="live", autostart=False)
    async with app.run_test(size=(120, 30)) as pilot:
        app.ingest(source.sample())
        nvml.advance(2.0)
        nvml.lose_card(1)
        app.ingest(source.sample())
        await pilot.pause()
        line = next(ln for ln in app.query_one("#gpu").shown_plain.split("\n") if ln[1:3] == " 1")
        assert "LOST" in line
        others = [ln for ln in app.query_one("#gpu").shown_plain.split("\n") if ln[1:3] in (" 0", " 2", " 3")]
        assert len(others) == 3 and not any("LOST" in ln for ln in others)
    source.close()


def test_detail_x_axis_is_local_wall_clock_and_utc_on_request(monkeypatch) -> None:
    import time

    import numpy as np

    from gpu_triage.ui.detail_screen import time_ticks
    from gpu_triage.ui.formatters import zone_name

    t0 = make_tick(0).ts.timestamp()  # 12:00:00 UTC
    try:
        monkeypatch.setenv("TZ", "UTC")  # UTC on request
        time.tzset()
        positions, labels = time_ticks(np.array([t0, t0 + 100.0, t0 + 200.0]), count=3)
        assert positions == [-200.0, -100.0, 0.0]
        assert labels == ["12:00:00", "12:01:40", "12:03:20"] and zone_name(t0) == "UTC"
        monkeypatch.setenv("TZ", "Asia/Kolkata")  # local time by default: UTC+5:30, no summer time
        time.tzset()
        _, labels = time_ticks(np.array([t0, t0 + 100.0, t0 + 200.0]), count=3)
        assert labels == ["17:30:00", "17:31:40", "17:33:20"] and zone_name(t0) == "IST"
    finally:
        monkeypatch.undo()
        time.tzset()
