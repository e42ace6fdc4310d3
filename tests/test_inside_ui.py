"""The inside evidence on screen: the process table's detail line and the diagnosis pane's "inside" lines,
from the window's stack samples (live ticks or a replayed v3 recording), never a reused pid's old stacks,
and never another user's frame text as terminal codes or past the pane's width."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.model import ProcSample, StackSample, Tick
from gpu_triage.ui import inside_lines
from gpu_triage.ui.app import TriageApp
from gpu_triage.window import RollingWindow
from tests.ui_ticks import TickListSource, make_tick
from tests.waits import wait_for

ADAM = "_single_tensor_adam (adam.py) < Adam.step (adam.py)"
NASTY = ("\x1b", "\x07", "\x9b", "\x9d")


def _proc(pid: int, name: str = "python") -> ProcSample:
    return ProcSample(pid=pid, gpu_index=0, name=name, gpu_mem_bytes=30 << 30, cpu_pct=99.0, workers=1,
                      workers_cpu_pct=[5.0], worker_pids=[2000])


def _ticks(n: int = 6, *, procs: list[ProcSample] | None = None, frames: str | None = ADAM) -> list[Tick]:
    out = []
    for i in range(n):
        stacks = [StackSample(504, "main", "optimizer", frames=frames, busy_threads=16, threads=40)]
        if i == n - 1:
            stacks.append(StackSample(2000, "worker", "worker_idle", parent_pid=504,
                                      frames="_worker_loop (worker.py)", threads=3))
        out.append(dataclasses.replace(make_tick(i, gpus=2, cores=4), procs=list(procs or [_proc(504)]),
                                       stacks=stacks))
    return out


def _view(ticks: list[Tick]):  # type: ignore[no-untyped-def]
    window = RollingWindow(150)
    for t in ticks:
        window.append(t)
    return window.view()


def test_the_latest_sample_says_what_the_main_thread_and_a_worker_were_doing() -> None:
    view = _view(_ticks())
    assert inside_lines.detail_text(view, 504) == "main thread: optimizer (Adam.step), 16 threads busy"
    assert inside_lines.detail_text(view, 2000, parent=504) == "worker: worker_idle (_worker_loop)"
    assert inside_lines.pane_lines(view) == ["inside pid 504: optimizer 6/6 samples (Adam.step)"]
    assert inside_lines.detail_text(view, 1000) is None  # no sample of it: nothing said


def test_an_older_sample_says_its_age_and_an_error_its_fix() -> None:
    ticks = _ticks(4)
    ticks[-1].stacks = []
    ticks[-2].stacks = [StackSample(504, "main", "unknown", error="permission")]
    view = _view(ticks)
    text = inside_lines.detail_text(view, 504)
    assert text is not None and text.startswith("main thread: no stack (py-spy may not read this process")
    assert text.endswith(", 2 s ago")
    assert inside_lines.pane_lines(view) == ["inside pid 504: optimizer 2/2 samples (Adam.step)"]


def test_a_reused_pid_is_never_given_the_old_processs_stacks() -> None:
    ticks = _ticks(6)
    ticks[3].procs = []  # the process ended ...
    for t in ticks[4:]:
        t.procs = [_proc(504, name="other")]  # ... and its pid came back as another program
        t.stacks = []
    view = _view(ticks)
    assert inside_lines.detail_text(view, 504) is None
    assert inside_lines.pane_lines(view) == []
    # the same program again, the pid gone for one tick in between: still not the same process
    ticks = _ticks(6)
    ticks[4].procs = []
    ticks[5].stacks = []
    assert inside_lines.detail_text(_view(ticks), 504) is None


def test_without_samples_the_pane_says_why_none_are_read_while_a_card_waits() -> None:
    ticks = [dataclasses.replace(t, stacks=[]) for t in _ticks(3)]
    ticks[-1].gpus[0].util_pct = 3.0  # pid 504's card
    view = _view(ticks)
    assert inside_lines.pane_lines(view, "no stacks: py-spy is not installed") == [
        "inside: no stacks: py-spy is not installed"]
    assert inside_lines.pane_lines(view) == []
    ticks[-1].gpus[0].util_pct = 97.0  # every card with a process busy: nothing would be read, nothing said
    assert inside_lines.pane_lines(_view(ticks), "no stacks: py-spy is not installed") == []


def test_the_pane_calls_a_card_waiting_as_the_sampler_does_with_the_band() -> None:
    """The screen's "a card waits" is the sampler's band (sources/waiting.py), over the window's history: a card
    at 52 % after 40 % still waits (a bare 50 % line said busy, and the notice vanished while the sampler still
    looked); one at 48 % that never went under 45 % does not (the 50 % line said waiting)."""
    from gpu_triage.sources.waiting import WaitBand

    notice = "no stacks: py-spy is not installed"
    ticks = [dataclasses.replace(t, stacks=[]) for t in _ticks(3)]
    for t, util in zip(ticks, (80.0, 40.0, 52.0), strict=True):
        t.gpus[0].util_pct = util
    assert inside_lines.pane_lines(_view(ticks), notice) == [f"inside: {notice}"]
    for t, util in zip(ticks, (80.0, 60.0, 48.0), strict=True):
        t.gpus[0].util_pct = util
    assert inside_lines.pane_lines(_view(ticks), notice) == []
    # the configured band, not a copy of the default
    assert inside_lines.pane_lines(_view(ticks), notice, band=WaitBand(49.0, 60.0)) == [f"inside: {notice}"]


def test_hostile_and_long_frame_text_is_made_visible_and_bounded() -> None:
    evil = "x (a.py) < \x1b]2;PWN\x07\x1b[2J" + "A" * 5000 + " (\x9b.py)"
    view = _view(_ticks(frames=evil))
    text = inside_lines.detail_text(view, 504)
    assert text is not None and not any(c in text for c in NASTY)
    assert "␛]2;PWN␇␛[2J" in text and len(text) < 120
    (line,) = inside_lines.pane_lines(view)
    assert not any(c in line for c in NASTY) and len(line) < 120


def _app(ticks: list[Tick]) -> TriageApp:
    return TriageApp(Config(), source=TickListSource(2, 4), source_label="test", prefill=ticks, autostart=False)


def _shown(app: TriageApp, pane: str) -> str:
    return str(app.query_one(f"#{pane}").shown_plain)  # type: ignore[attr-defined]


async def test_the_dashboard_shows_the_detail_line_and_the_pane_line() -> None:
    app = _app(_ticks())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        diag = _shown(app, "diag")
        # the verdict's evidence cites the process: the pane's own count of it stands aside (one count each)
        assert "pid 504 (card 0)'s main thread was in optimizer at _single_tensor_adam (adam.py)" in diag
        assert "inside pid 504" not in diag
        await pilot.press("tab")
        await pilot.pause()
        assert "PID 504 python · main thread: optimizer (Adam.step), 16 threads busy · command" in _shown(app, "procs")
        await pilot.press("t", "down")  # the tree: the worker's own row
        await pilot.pause()
        assert "PID 2000 worker of 504 · worker: worker_idle (_worker_loop) · command" in _shown(app, "procs")


async def test_hostile_frames_reach_neither_the_panes_nor_the_terminal_as_codes() -> None:
    evil = "\x1b]2;PWN\x07\x1b[2J" * 200 + " (\x9b.py)"
    app = _app(_ticks(frames=evil))
    async with app.run_test(size=(100, 50)) as pilot:
        await pilot.press("tab")
        await pilot.pause()
        for pane in ("diag", "procs"):
            text = _shown(app, pane)
            assert not any(c in text for c in NASTY)
            assert all(len(line) <= 100 for line in text.split("\n"))
        diag = _shown(app, "diag")
        assert "␛]2;PWN" in diag  # shown as text, where the evidence quotes the frame
        assert max(len(line) for line in diag.split("\n")) <= 100 and diag.count("PWN") < 40  # quoted, bounded
        assert not any(c in app.export_screenshot() for c in NASTY)


def test_a_recorded_dump_error_is_quoted_bounded_in_the_verdict() -> None:
    """A recording is anyone's: a stack sample's error of a megabyte is one short quote in the evidence."""
    from gpu_triage.diagnosis.engine import diagnose

    ticks = _ticks(8)
    for t in ticks:
        t.stacks = [StackSample(504, "main", "unknown", error="E" * 1_000_000)]
    verdict = diagnose(_view(ticks), Config().thresholds, 4)
    (line,) = [f["text"] for f in verdict.evidence_facts if f["metric"] == "stack_dumps_failed"]
    assert len(line) < 200 and "EEEE" in line


async def test_a_replayed_v3_recording_shows_the_same_lines(tmp_path: Path) -> None:
    from gpu_triage.trace.writer import TraceWriter
    from gpu_triage.ui.run import build_app
    from tests.ui_ticks import make_host

    writer = TraceWriter(tmp_path / "inside.parquet", make_host(2, 4), 2.0)
    for tick in _ticks(8):
        writer.append(tick)
    path = writer.close()
    app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("space", "G")  # shorter than the window, it opens at its start: to its end
        await pilot.pause()
        assert "pid 504 (card 0)'s main thread was in optimizer" in _shown(app, "diag")
        await pilot.press("tab")
        await pilot.pause()
        assert "main thread: optimizer (Adam.step), 16 threads busy" in _shown(app, "procs")


async def test_a_real_h200_replay_cites_the_optimizer_once_in_the_verdict_not_twice() -> None:
    """A real trace-v3 recording (our recorder's py-spy sampler on an H200: AdamW stepping on the CPU), paused
    inside that job's window: the verdict's evidence names the process's main thread, and the pane's own
    "inside" line for the same process stands aside, since two counts of one process's samples over two spans
    side by side read as a contradiction."""
    import re

    from gpu_triage.ui.run import build_app

    path = Path(__file__).parent / "data" / "h200-inside-c-2s.parquet"
    app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
    async with app.run_test(size=(140, 42)) as pilot:
        await pilot.press("space", "g", "right_square_bracket", *["right"] * 6)  # 00:55:39, in cpu_offload_adamw_t8
        cites = r"pid (\d+) \(card 0\)'s main thread was in optimizer at _multi_tensor_adam"
        await wait_for(pilot, lambda: re.search(cites, _shown(app, "diag")), "the seek's frame")
        diag = _shown(app, "diag")
        cited = re.search(cites, diag)
        assert cited is not None, diag
        assert f"inside pid {cited.group(1)}:" not in diag
        await pilot.press("tab")
        await pilot.pause()
        assert "main thread: optimizer (_multi_tensor_adam)" in _shown(app, "procs")


class _NoPySpy(TickListSource):
    """A live-like source that cannot read stacks here (what LiveSource.inside_notice says without py-spy)."""

    def inside_notice(self) -> str | None:
        return "no stacks: py-spy is not installed: pip install 'gpu-triage[stacks]'"


async def test_the_pane_says_why_no_stacks_are_read_under_the_job_wrapper_too() -> None:
    from gpu_triage.sources.job import JobMonitor, WithJob

    ticks = [dataclasses.replace(t, stacks=[]) for t in _ticks(4)]
    for t in ticks:
        t.gpus[0].util_pct = 3.0
    for source in (_NoPySpy(2, 4), WithJob(_NoPySpy(2, 4), JobMonitor(use_pulse=False), 2.0)):
        app = TriageApp(Config(), source=source, source_label="test", prefill=ticks, autostart=False)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause()
            assert "inside: no stacks: py-spy is not installed: pip install 'gpu-triage[stacks]'" in _shown(app, "diag")
