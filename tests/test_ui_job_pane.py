"""The job pane: samples/s on the cards' time axis, step time and data wait per rank, no progress, n/a."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_triage.config import Config
from gpu_triage.model import JobRank, JobSample, ProcSample
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.glyphs import BLOCKS
from gpu_triage.ui.gpu_pane import gpu_pane
from gpu_triage.ui.job_pane import NA_TEXT, NA_TEXTS, job_lines, job_pane
from gpu_triage.ui.panes import Colours
from gpu_triage.window import RollingWindow
from tests.ui_ticks import TickListSource, make_tick

COLOURS = Colours()


def _job(i: int, since: float = 0.1, wait0: float = 82.0) -> JobSample:
    ranks = [JobRank(0, 0, 2, 500, 320.0 + i, 5.0, 0.2, wait0, since),
             JobRank(1, 1, 2, 501, 320.0 + i, 5.0, 0.2, 4.0, since)]
    return JobSample(source="pulse", samples_per_s=640.0 + 2 * i, steps_per_s=5.0, step_time_s=0.2,
                     data_wait_pct=wait0, since_progress_s=since, ranks=ranks)


def _view(n: int = 40, job=_job, gpus: int = 2):
    w = RollingWindow(150)
    for i in range(n):
        t = make_tick(i, gpus=gpus, cores=8)
        t = dataclasses.replace(t, job=job(i) if job else None,
                                procs=[ProcSample(pid=500, gpu_index=0), ProcSample(pid=501, gpu_index=1)])
        w.append(t)
    return w.view()


@pytest.mark.parametrize("width", [80, 160])
def test_samples_waveform_shares_the_cards_time_axis(width: int) -> None:
    view = _view()
    cards = gpu_pane(view, width, 1, COLOURS).plain.split("\n")
    job = job_pane(view, width, job_lines(view), COLOURS).plain.split("\n")
    card = cards[1]
    wave = job[1]
    # the card's waveform starts after its 4-character head and ends where its figures begin
    left = 4
    def drawn(ch: str) -> bool:  # a block, the zero dot, or a braille cell (two ticks, narrow terminals)
        return ch in BLOCKS[1:] + "·" or "\u2800" < ch <= "\u28ff"

    card_cells = [i for i, ch in enumerate(card[:width]) if drawn(ch)]
    wave_cells = [i for i, ch in enumerate(wave[:width]) if drawn(ch)]
    assert card_cells and wave_cells
    assert wave_cells == card_cells and min(wave_cells) >= left  # the same cells: one time axis
    per_cell = 2 if any(ch > "\u2800" for ch in card) else 1
    assert len(wave_cells) == min(-(-view.n // per_cell), len(card_cells))
    assert all(len(line) <= width for line in job)


def test_rates_step_time_and_data_wait_per_rank_with_their_cards() -> None:
    view = _view()
    text = job_pane(view, 160, job_lines(view), COLOURS).plain
    lines = text.split("\n")
    assert lines[0].startswith("JOB  samples/s") and "source: pulse · 2 ranks" in lines[0]
    assert "718/s step 200 ms wait 82%" in lines[1]  # the newest tick: 640 + 2 * 39
    assert lines[2].split() == ["rank", "0", "gpu0", "359/s", "step", "200", "ms", "data", "wait", "82%"]
    assert lines[3].split()[:3] == ["rank", "1", "gpu1"] and lines[3].endswith("data wait   4%")
    assert "no progress" not in text


def test_a_stopped_job_says_so_and_shows_no_stale_rate() -> None:
    def stuck(i: int) -> JobSample:
        j = _job(i, since=float(max(0, i - 20) * 2))
        if i > 20:
            j.samples_per_s = 0.0
            for r in j.ranks:
                r.samples_per_s = 0.0
        return j

    view = _view(job=stuck)
    lines = job_pane(view, 120, job_lines(view), COLOURS).plain.split("\n")
    assert lines[0].startswith("JOB  NO PROGRESS for 38 s  samples/s")  # the state first, not at the end
    assert " 0.00/s stalled" in lines[1] and "step 200 ms" not in lines[1]  # no stale step time beside 0/s
    assert lines[2].endswith("no progress for 38 s") and "stalled" in lines[2] and "200 ms" not in lines[2]
    text = job_pane(view, 120, job_lines(view), COLOURS)
    badge = text.plain.index("NO PROGRESS")
    assert any(sp.start <= badge < sp.end and "reverse" in str(sp.style) for sp in text.spans)
    narrow = job_pane(view, 60, job_lines(view), COLOURS).plain.split("\n")[0]
    assert narrow.startswith("JOB  NO PROGRESS for 38 s ")  # kept whole at any width


def test_without_a_job_source() -> None:
    view = _view(job=None)
    assert job_lines(view) == 1
    assert job_pane(view, 200, 1, COLOURS).plain == NA_TEXT
    assert job_pane(view, 80, 1, COLOURS).plain == NA_TEXTS[1]  # whole at 80 columns: "…pulse` in th" was cut
    assert len(NA_TEXTS[1]) <= 80
    assert job_pane(view, 40, 1, COLOURS).plain == "JOB  n/a: no job source"
    assert job_pane(view, 200, 1, COLOURS, source_configured=False).plain == ""


async def test_the_dashboard_shows_the_pane_only_with_job_data() -> None:
    prefill = [dataclasses.replace(make_tick(i, gpus=2, cores=8), job=_job(i)) for i in range(30)]
    app = TriageApp(Config(), source=TickListSource(2, 8), source_label="test", prefill=prefill, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        pane = app.query_one("#job")
        assert pane.display and pane.region.height == 4
        assert pane.shown_plain.split("\n")[0].startswith("JOB  samples/s")
        assert app.query_one("#gpu").region.bottom <= pane.region.y <= app.query_one("#diag").region.y
    plain = TriageApp(Config(), source=TickListSource(2, 8), source_label="test",
                      prefill=[make_tick(i, gpus=2, cores=8) for i in range(30)], autostart=False)
    async with plain.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not plain.query_one("#job").display  # no job source, no job data: the screen as before


def test_live_with_job_log_checks_the_path_before_the_screen(tmp_path) -> None:
    import argparse

    from gpu_triage.errors import UserError
    from gpu_triage.sources.job import WithJob
    from gpu_triage.ui.run import build_app

    bad = argparse.Namespace(job_log=str(tmp_path / "nodir" / "train.log"), batch_size=None, record=None)
    with pytest.raises(UserError, match=r"--job-log .*nodir.*cannot follow it"):
        build_app("live", bad, Config())
    log = tmp_path / "train.log"
    log.write_text("")
    app = build_app("live", argparse.Namespace(job_log=str(log), batch_size=32, record=None), Config())
    try:
        assert isinstance(app.source, WithJob) and app.source.monitor.log is not None
        assert app.source.monitor.log.batch_size == 32
    finally:
        app.source.close()


def test_the_job_sources_notice_is_on_the_pane() -> None:
    view = _view()
    notice = "job log /tmp/train.log has vanished: waiting for it to come back"
    n = job_lines(view, notice)
    assert n == job_lines(view) + 1
    lines = job_pane(view, 160, n, COLOURS, notice=notice).plain.split("\n")
    assert len(lines) == n and lines[-1] == "  " + notice and lines[2].startswith("  rank 0")
    assert job_pane(view, 160, 1, COLOURS, notice=notice).plain.startswith("JOB  samples/s")  # no room: title
    empty = _view(job=None)
    assert job_pane(empty, 160, 1, COLOURS, notice=notice).plain == "JOB  n/a: " + notice


def test_monitor_notices_follow_the_log(tmp_path) -> None:
    from gpu_triage.sources.job import JobMonitor

    log = tmp_path / "train.log"
    mon = JobMonitor(log_path=log, use_pulse=False)
    mon.sample(now=0.0)
    assert mon.current_notice() == f"waiting for the job log {log} to appear"
    log.write_text(" 10%| | 10/100 [00:01<00:09, 10.00it/s]\n")
    mon.sample(now=2.0)
    assert mon.current_notice() is None
    log.unlink()
    mon.sample(now=4.0)
    assert mon.current_notice() == f"job log {log} has vanished: waiting for it to come back"
    log.write_text("".join(f"warming up {i}\n" for i in range(30)))
    mon.sample(now=6.0)
    assert mon.current_notice() is None  # back, and its last progress line still stands
