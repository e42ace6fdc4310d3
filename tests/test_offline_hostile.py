"""Offline diagnosis on hostile and long recordings (issue #9 items 4, 9, 10): metadata that lies about the
interval, absurd per-tick intervals, gaps, recordings that span days, ticks out of order, recordings long
enough to be judged at a stride, row groups streamed one at a time, and --progress into a pipe.

Recordings are written straight with pyarrow (what another tool, or a damaged file, could hold): the
project's writer would refuse most of these values."""

from __future__ import annotations

import dataclasses
import json
import re
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_triage.cli import main
from gpu_triage.compare.runs import compare_traces
from gpu_triage.compare.text import render_text
from gpu_triage.config import Config
from gpu_triage.model import Tick
from gpu_triage.offline.render import human_duration, render_timeline
from gpu_triage.offline.timeline import diagnose_trace, segments
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.batches import iter_batches
from gpu_triage.trace.layout import META_INTERVAL
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.schema import schema_with_metadata, ticks_to_batch

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def _sim_ticks(n: int, scenario: str = "data_pipeline", gpus: int = 2, start: datetime = T0) -> list[Tick]:
    src = SimulatedSource(scenario, gpus=gpus, cores=8, seed=4, interval_s=2.0, start=start)
    return [src.sample() for _ in range(n)]


def _write(path: Path, ticks: list[Tick], *, meta_interval: str = "2.0", row_group: int | None = None,
           intervals: list[float] | None = None) -> Path:
    table = pa.Table.from_batches([ticks_to_batch(ticks)])
    if intervals is not None:
        table = table.set_column(1, "interval_s", pa.array(intervals, type=pa.float64()))
    meta = dict(schema_with_metadata(SimulatedSource("healthy").host_info(), 2.0).metadata)
    meta[META_INTERVAL] = meta_interval.encode()
    pq.write_table(table.replace_schema_metadata(meta), path, row_group_size=row_group)
    return path


def _shifted(ticks: list[Tick], seconds: float) -> list[Tick]:
    """``ticks`` moved ``seconds`` later, as shallow copies: each caller's ticks are fresh from the simulator and
    used only through the copies, and the file they are written to stores them as float32 either way."""
    return [dataclasses.replace(t, ts=t.ts + timedelta(seconds=seconds)) for t in ticks]


# -- item 4: the metadata's interval is not believed over the timestamps ------------------------------------


@pytest.mark.parametrize("meta", ["1e-6", "1e-9"])
def test_tiny_metadata_interval_allocates_by_real_ticks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       meta: str) -> None:
    path = _write(tmp_path / "tiny.parquet", _sim_ticks(60), meta_interval=meta)
    tracemalloc.start()
    try:
        rc = main(["diagnose", str(path), "--json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rc == 0
    assert peak < 64 * 2**20  # 60 ticks: megabytes, not the window that 300 s / 1e-9 s would be
    captured = capsys.readouterr()
    obj = json.loads(captured.out)
    assert obj["interval_s"] == pytest.approx(2.0)  # the timestamps' step
    assert sum(s["ticks"] for s in obj["segments"]) == 60
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "interval_s" in err[0] and "using 2 s" in err[0]
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("meta", ["1e-6", "1e-9"])
def test_tiny_metadata_interval_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          meta: str) -> None:
    path = _write(tmp_path / "tiny.parquet", _sim_ticks(40), meta_interval=meta)
    good = _write(tmp_path / "good.parquet", _sim_ticks(40, "healthy"))
    assert main(["compare", str(good), str(path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["after"]["interval_s"] == pytest.approx(2.0)
    assert obj["after"]["duration_s"] == pytest.approx(80.0, abs=2.0)
    assert sum(c["after"] for c in obj["diagnosis"].values()) == pytest.approx(100.0)


@pytest.mark.parametrize("bad", [float("inf"), 1e30, -2.0, 0.0, 1e-12])
def test_absurd_per_tick_interval_is_ignored_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             bad: float) -> None:
    ticks = _sim_ticks(50)
    intervals = [2.0] * 50
    intervals[0] = bad  # the first tick's start comes from its interval: the OverflowError of issue #9
    intervals[20] = bad
    path = _write(tmp_path / "iv.parquet", ticks, intervals=intervals)
    assert main(["diagnose", str(path)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err.count("\n") == 1 and "interval_s" in captured.err
    assert "50 ticks of 2 s" in captured.out


# -- item 9: gaps, dates, order --------------------------------------------------------------------------


def _gapped(tmp_path: Path, gap_s: float) -> tuple[Path, list[Tick]]:
    first = _sim_ticks(60, "healthy")
    second = _shifted(_sim_ticks(60, "data_pipeline", start=T0), 120.0 + gap_s)
    return _write(tmp_path / "gap.parquet", first + second), first + second


def test_a_gap_splits_segments_and_is_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, ticks = _gapped(tmp_path, 3 * 3600 + 12 * 60)
    assert main(["diagnose", str(path)]) == 0
    out = capsys.readouterr().out
    assert "— gap 3 h 12 min —" in out
    assert "(-" not in out  # no negative duration anywhere
    assert "2026-01-01" in out  # not from today: dates are shown
    assert main(["diagnose", str(path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    (gap,) = obj["gaps"]
    assert gap["duration_s"] == pytest.approx(3 * 3600 + 12 * 60, abs=3.0)
    g0, g1 = datetime.fromisoformat(gap["start"]), datetime.fromisoformat(gap["end"])
    for s in obj["segments"]:
        a, b = datetime.fromisoformat(s["start"]), datetime.fromisoformat(s["end"])
        assert a < b
        assert b <= g0 or a >= g1, "a segment spans the gap"
    assert sum(s["ticks"] for s in obj["segments"]) == len(ticks)


def test_a_short_hiccup_is_not_a_gap(tmp_path: Path) -> None:
    first = _sim_ticks(60, "healthy")
    second = _shifted(_sim_ticks(30, "healthy", start=T0), 120.0 + 4.0)  # two ticks late
    path = _write(tmp_path / "hiccup.parquet", first + second)
    tl = diagnose_trace(iter_batches(path), Config().thresholds, 300.0)
    assert tl.gaps == []


def test_gaps_in_compare_leave_the_gap_out_of_durations(tmp_path: Path) -> None:
    path, _ticks = _gapped(tmp_path, 10 * 3600)
    good = _write(tmp_path / "good.parquet", _sim_ticks(120, "healthy"))
    result = compare_traces(open_trace(good), open_trace(path), Config())
    after = result["after"]
    assert after["duration_s"] == pytest.approx(240.0, abs=4.0)  # 120 ticks of 2 s, not 10 h
    assert after["gaps"] == 1 and after["gap_s"] == pytest.approx(10 * 3600, abs=3.0)
    assert "1 gap of 10 h left out" in render_text(result)
    shares = {k: v["after"] for k, v in result["diagnosis"].items()}
    assert sum(shares.values()) == pytest.approx(100.0)
    # half the recorded time each: the healthy hour before the gap, the starved one after
    assert shares.get("steady_high/none", 0.0) == pytest.approx(50.0, abs=15.0)


def test_dates_appear_only_when_needed() -> None:
    tl = segments(_sim_ticks(30, "healthy"), 2.0, Config().thresholds, 300.0)
    from gpu_triage.offline.timeline import Timeline

    timeline = Timeline(tl, [], 2.0, 30, 1)
    same_day = render_timeline(Path("x.parquet"), timeline, today=T0, tz=UTC)
    assert "2026-01-01" not in same_day and "10:00:" in same_day
    other_day = render_timeline(Path("x.parquet"), timeline, today=T0 + timedelta(days=3), tz=UTC)
    assert "2026-01-01 10:00:" in other_day
    midnight = segments(_sim_ticks(60, "healthy", start=T0.replace(hour=23, minute=59)), 2.0,
                        Config().thresholds, 300.0)
    spans = render_timeline(Path("x.parquet"), Timeline(midnight, [], 2.0, 60, 1),
                            today=T0.replace(hour=23, minute=59), tz=UTC)
    assert "2026-01-02 00:0" in spans


def test_the_header_counts_one_segment_in_the_singular() -> None:
    from gpu_triage.offline.timeline import Timeline

    timeline = Timeline(segments(_sim_ticks(30, "healthy"), 2.0, Config().thresholds, 300.0), [], 2.0, 30, 1)
    assert len(timeline.segments) == 1
    head = render_timeline(Path("x.parquet"), timeline, today=T0, tz=UTC).splitlines()[0]
    assert head == "x.parquet: 30 ticks of 2 s, 1 segment"


def test_times_are_local_by_default_with_the_zone_named_and_utc_on_request() -> None:
    from zoneinfo import ZoneInfo

    from gpu_triage.offline.timeline import Timeline

    timeline = Timeline(segments(_sim_ticks(30, "healthy"), 2.0, Config().thresholds, 300.0), [], 2.0, 30, 1)
    tokyo = render_timeline(Path("x.parquet"), timeline, today=T0, tz=ZoneInfo("Asia/Tokyo"))
    assert "19:00:" in tokyo and " JST (" in tokyo and "UTC" not in tokyo  # 10:00 UTC is 19:00 in Tokyo
    utc = render_timeline(Path("x.parquet"), timeline, today=T0, tz=UTC)
    assert "10:00:" in utc and " UTC (" in utc


def test_diagnose_cli_prints_local_time_and_utc_with_the_flag(tmp_path: Path, capsys, monkeypatch) -> None:
    import time

    path = _write(tmp_path / "run.parquet", _sim_ticks(30, "healthy"))
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert main(["diagnose", str(path)]) == 0
        local = capsys.readouterr().out
        assert main(["diagnose", str(path), "--utc"]) == 0
        utc = capsys.readouterr().out
        assert main(["diagnose", str(path), "--json"]) == 0
        as_json = capsys.readouterr().out
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert "19:00:" in local and "JST" in local
    assert "10:00:" in utc and " UTC (" in utc
    assert "2026-01-01T10:00:" in as_json  # JSON stays ISO 8601 UTC


def test_human_duration() -> None:
    assert human_duration(18) == "18 s"
    assert human_duration(3 * 3600 + 12 * 60 + 5) == "3 h 12 min"
    assert human_duration(315360026) == "3650 d (10.0 years)"
    assert human_duration(2 * 86400 + 5 * 3600) == "2 d 5 h"
    assert human_duration(-5) == "0 s"


def test_ticks_out_of_order_are_sorted_and_durations_stay_positive(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ticks = _sim_ticks(80)
    shuffled = ticks[40:] + ticks[:40] + ticks[10:12]  # two halves swapped, two duplicated timestamps
    path = _write(tmp_path / "order.parquet", shuffled)
    assert main(["diagnose", str(path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    starts = [datetime.fromisoformat(s["start"]) for s in obj["segments"]]
    assert starts == sorted(starts)
    assert all(datetime.fromisoformat(s["end"]) > datetime.fromisoformat(s["start"]) for s in obj["segments"])
    assert sum(s["ticks"] for s in obj["segments"]) == 80


# -- item 10: streaming and striding ---------------------------------------------------------------------


def test_row_groups_streamed_give_the_segments_of_the_whole(tmp_path: Path) -> None:
    # a card that appears late and a disk list that changes: the columns must keep their places across batches
    ticks = _sim_ticks(90, "periodic_stall", gpus=3)
    for t in ticks[:25]:
        t.gpus = t.gpus[:2]
    for t in ticks[50:]:
        t.disks = t.disks[::-1]
    path = _write(tmp_path / "rg.parquet", ticks, row_group=7)
    src = iter_batches(path, batch_rows=7)
    th = Config().thresholds
    streamed = diagnose_trace(src, th, 300.0).segments
    whole = segments(ticks, 2.0, th, 300.0, src.host.cpu_count)
    assert [s.to_json_obj() for s in streamed] == [s.to_json_obj() for s in whole]


@pytest.mark.slow
def test_long_recordings_are_judged_at_a_stride_that_covers_every_tick(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ticks = _sim_ticks(600, "healthy", gpus=1) + _shifted(_sim_ticks(1200, "data_pipeline", gpus=1), 1200.0)
    path = _write(tmp_path / "long.parquet", ticks, row_group=256)
    assert main(["diagnose", str(path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["judged_every_ticks"] == 2  # 1,800 ticks over a budget of 1,500 verdicts
    assert sum(s["ticks"] for s in obj["segments"]) == 1800
    keys = [(s["pattern"], s["bottleneck"]) for s in obj["segments"]]
    assert keys[0] == ("steady_high", "none") and ("sawtooth", "data_pipeline") in keys
    short = _write(tmp_path / "short.parquet", ticks[:120])  # every tick judged: 120 engine calls, not 1,800
    assert main(["diagnose", str(short), "--json", "--resolution", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["judged_every_ticks"] == 1
    assert main(["diagnose", str(path), "--json", "--resolution", "60"]) == 0
    coarse = json.loads(capsys.readouterr().out)
    assert coarse["judged_every_ticks"] == 30 and sum(s["ticks"] for s in coarse["segments"]) == 1800


def test_progress_on_demand_goes_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "p.parquet", _sim_ticks(40))
    assert main(["diagnose", str(path), "--json"]) == 0
    assert capsys.readouterr().err == ""  # not a terminal, not asked: silent
    assert main(["diagnose", str(path), "--json", "--progress"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout stays parseable
    assert captured.err.strip().endswith("diagnosing p.parquet: 40/40 ticks (100 %)")
    assert main(["compare", str(path), str(path), "--progress"]) == 0
    # compare leaves out the idle start and end, so each run's count may be a tick or two short of 40
    assert len(re.findall(r"diagnosing p\.parquet: (\d+)/\1 ticks \(100 %\)", capsys.readouterr().err)) == 2


@pytest.mark.parametrize("scenario", ["too_few_workers", "periodic_stall", "single_card_busy"])
def test_streamed_views_judge_like_the_rolling_window(scenario: str) -> None:
    """The columnar views (process lists converted lazily, a card that joins late) give, tick for tick, the
    verdicts of the dashboard's RollingWindow path."""
    from gpu_triage.offline.judge import verdicts
    from gpu_triage.offline.timeline import smoothed_keys

    ticks = _sim_ticks(120, scenario, gpus=3)
    for t in ticks[:30]:
        t.gpus = t.gpus[1:]
    th = Config().thresholds
    raws = [raw for _t, raw, _s in verdicts(ticks, 2.0, th, 300.0, 8)]
    want = smoothed_keys([t.ts.timestamp() for t in ticks], raws, th, 2.0)
    got = [(s.pattern, s.bottleneck) for s in segments(ticks, 2.0, th, 300.0, 8) for _ in range(s.ticks)]
    assert got == want


def test_streamed_batches_get_the_readers_range_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """diagnose streams Parquet batch by batch, not through open_trace: the values the reader nulls (issue #9
    item 8) must be nulled there too, and counted once for the whole file."""
    ticks = _sim_ticks(60, "healthy", gpus=1)
    for t in ticks[5:45]:
        t.gpus[0].util_pct = 1e6
    path = _write(tmp_path / "range.parquet", ticks, row_group=16)
    assert main(["diagnose", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("values out of range ignored") == 1 and "40 values" in captured.err
    assert "1000000" not in captured.out


@pytest.mark.parametrize("batch_rows", [7, 4096])
def test_streamed_views_carry_the_jobs_of_the_rolling_window(tmp_path: Path, batch_rows: int) -> None:
    """Tick by tick, the streamed view's job per tick equals RollingWindow's (issue #12's job column): a real
    2-card recording with the pulse, whose first ticks have no job, cut into batches that start with none."""
    real = Path(__file__).parent / "data" / "h200x2-pulse-2card-starved-1s.parquet"
    ticks = open_trace(real).ticks()
    assert any(t.job is None for t in ticks[:7]) and sum(t.job is not None for t in ticks) > 40
    _stream_beside_the_window(tmp_path / "jobs.parquet", ticks, batch_rows, "jobs", tail=3)


def _stream_beside_the_window(path: Path, ticks: list[Tick], batch_rows: int, column: str, tail: int) -> None:
    """Write ``ticks`` in row groups of ``batch_rows``, stream them back through the offline buffer, and check
    at every tick that the view's ``column`` (its last ``tail`` rows first: the judged stretch, then the whole
    window) equals what a RollingWindow fed the same ticks holds."""
    import numpy as np

    from gpu_triage.offline.columns import RecordingColumns
    from gpu_triage.trace.batches import iter_batches
    from gpu_triage.window import RollingWindow

    src = iter_batches(_write(path, ticks, row_group=batch_rows), batch_rows=batch_rows)
    capacity = 30  # the window slides, so rows leave the buffer as batches come
    window = RollingWindow(capacity)
    cols = RecordingColumns()
    seen = 0
    for batch in src.batches():
        cols.push(batch, np.full(batch.num_rows, np.nan), keep=capacity - 1)
        for p in range(seen, seen + batch.num_rows):
            window.append(ticks[p])
            want = getattr(window.view(), column)
            got = getattr(cols.view(max(0, p - capacity + 1), p + 1), column)
            assert list(got[-tail:]) == want[-tail:], p
            assert list(got) == want, p
        seen += batch.num_rows
    assert seen == len(ticks)


@pytest.mark.parametrize("batch_rows", [7, 4096])
def test_streamed_views_carry_the_processes_of_the_rolling_window(tmp_path: Path, batch_rows: int) -> None:
    """Tick by tick, the streamed view's process lists equal RollingWindow's (the buffer converts them from
    Arrow in runs, cut into rows by their counts): a real 2-card recording, with ticks that list no process,
    and processes with no worker lists, between batches."""
    real = Path(__file__).parent / "data" / "h200x2-joblog-2card-starved-1s.parquet"
    ticks = open_trace(real).ticks()
    assert sum(len(t.procs) for t in ticks) > len(ticks) and any(p.workers_cpu_pct for t in ticks for p in t.procs)
    for i in (0, 6, 7, 8, 30):
        ticks[i].procs = []
    busy = [t for t in ticks if len(t.procs) > 1]
    for t in (busy[3], busy[10], busy[-1]):
        t.procs[0].workers_cpu_pct, t.procs[-1].worker_pids = [], []
    _stream_beside_the_window(tmp_path / "procs.parquet", ticks, batch_rows, "procs", tail=5)


def test_diagnose_of_a_v1_file_without_a_job_column_has_no_job_facts(tmp_path: Path) -> None:
    ticks = _sim_ticks(40, "data_pipeline", gpus=1)
    table = pa.Table.from_batches([ticks_to_batch(ticks)]).drop_columns(["job"])
    meta = dict(schema_with_metadata(SimulatedSource("healthy").host_info(), 2.0).metadata)
    meta[b"gpu_triage.schema"] = b"1"
    path = tmp_path / "v1.parquet"
    pq.write_table(table.replace_schema_metadata(meta), path)
    segs = diagnose_trace(iter_batches(path), Config().thresholds, 300.0).segments
    assert segs and not any("job_samples_per_s" in s.facts for s in segs)
