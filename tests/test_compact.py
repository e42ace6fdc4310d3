"""`gpu-triage compact DIR`: a host's finished days of hourly files become one daily trace file (each tick
once, in order, each with a verdict), the day's one stored copy, which DuckDB and polars query per card; a
killed run leaves every tick readable exactly once and the next run finishes it; `--keep-days` removes what
is older; anything dangerous is one line and exit 2."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.model import HostInfo, VerdictSample
from gpu_triage.offline.judge import verdicts
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.storage import compact_day
from gpu_triage.storage import compact_fs as fs
from gpu_triage.storage.compact import Options, run
from gpu_triage.trace.layout import META_SCHEMA, trace_metadata
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.schema import ticks_to_batch
from gpu_triage.trace.target import write_parquet_atomic
from gpu_triage.trace.writer import TraceWriter
from tests.two_users import User, as_user, needs_root, open_tmp, users

__all__ = ["open_tmp", "users"]  # fixtures, used by name

DAY = datetime(2026, 1, 5, tzinfo=UTC)
NOW = datetime(2026, 1, 8, 6, tzinfo=UTC)
INTERVAL = 10.0


def _ticks(start: datetime, n: int, scenario: str = "data_pipeline", gpus: int = 2, seed: int = 1) -> list:
    """``n`` simulated ticks from ``start``: the same for every host of a test's dataset, so simulated once per
    module; each call gets its own Tick objects (_hour_file sets their verdict)."""
    return [copy.copy(t) for t in _simulated(start, n, scenario, gpus, seed)]


@functools.cache
def _simulated(start: datetime, n: int, scenario: str, gpus: int, seed: int) -> tuple:
    source = SimulatedSource(scenario, gpus=gpus, seed=seed, interval_s=INTERVAL, start=start)
    return tuple(source.sample() for _ in range(n))


def _hour_file(root: Path, host: str, ticks: list, *, version: str = "3", verdict: VerdictSample | None = None,
               name: str | None = None) -> Path:
    """One hourly file as the recorder leaves it (v2: without trace v3's stacks and verdict columns)."""
    first = ticks[0].ts - timedelta(seconds=INTERVAL)
    folder = root / f"host={host}" / f"date={ticks[0].ts:%Y-%m-%d}"
    folder.mkdir(parents=True, exist_ok=True)
    for t in ticks:
        t.verdict = verdict
    info = HostInfo(hostname=host, cpu_count=32)
    table = pa.Table.from_batches([ticks_to_batch(ticks)])
    meta = trace_metadata(info, INTERVAL)
    if version == "2":
        table = table.drop_columns(["stacks", "verdict"])
        meta[META_SCHEMA] = b"2"
    path = folder / (name or f"{first:%H%M%S}-abcdef.parquet")
    write_parquet_atomic(table.replace_schema_metadata(meta), path)
    return path


def _day(root: Path, host: str = "gpu01", day: datetime = DAY, hours: int = 3, per_hour: int = 40,
         **kw: object) -> list[float]:
    """``hours`` hourly files of ``per_hour`` ticks on ``day``; returns every tick's timestamp."""
    out: list[float] = []
    for h in range(hours):
        ticks = _ticks(day + timedelta(hours=h, seconds=INTERVAL), per_hour)
        _hour_file(root, host, ticks, **kw)  # type: ignore[arg-type]
        out += [t.ts.timestamp() for t in ticks]
    return out


def _readable(root: Path) -> Counter:
    """Every tick a reader of the dataset's partitions (host=*/date=*/*.parquet) sees, with how often."""
    seen: Counter = Counter()
    for path in sorted(root.glob("host=*/date=*/*.parquet")):
        for t in open_trace(path).timestamps:
            seen[(path.parent.parent.name, float(t))] += 1
    return seen


def _opts(**kw: object) -> Options:
    return Options(now=NOW, **kw)  # type: ignore[arg-type]


def test_a_finished_day_becomes_one_daily_file_and_nothing_beside_it(tmp_path: Path) -> None:
    ts = _day(tmp_path)
    # the same tick in two files (a recovered leftover beside its hour): kept once
    repeat = _ticks(DAY + timedelta(hours=2, seconds=INTERVAL), 1)
    _hour_file(tmp_path, "gpu01", repeat, name="020000-ffffff.parquet")
    before = sum(p.stat().st_size for p in tmp_path.rglob("*.parquet"))

    res = run(tmp_path, _opts())

    part = tmp_path / "host=gpu01" / "date=2026-01-05"
    assert sorted(os.listdir(part)) == ["day.parquet"]
    daily = open_trace(part / "day.parquet")
    assert daily.timestamps.tolist() == sorted(ts)  # every tick, in order, once
    assert daily.n == len(ts) == 120
    assert (res.days, res.files_merged, res.ticks, res.duplicates) == (1, 4, 120, 1)
    assert res.bytes_before == before and res.bytes_after == (part / "day.parquet").stat().st_size
    assert pq.read_schema(part / "day.parquet").metadata[META_SCHEMA] == b"4"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet")) == [
        "host=gpu01/date=2026-01-05/day.parquet"]  # the day's one copy: no flat table beside it
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]  # no staging left

    again = run(tmp_path, _opts())  # compacted days are left alone
    assert again.days == 0 and daily.timestamps.tolist() == open_trace(part / "day.parquet").timestamps.tolist()


def test_today_a_fresh_day_and_a_recording_partition_are_left_alone(tmp_path: Path) -> None:
    _day(tmp_path, day=NOW.replace(hour=0), hours=1)  # today
    _day(tmp_path, host="late", day=DAY, hours=1)
    leftover = tmp_path / "host=gpu02" / "date=2026-01-05"
    _day(tmp_path, host="gpu02", hours=1)
    (leftover / "010000-abcdef.parquet.partial.arrows").write_bytes(b"")
    live = tmp_path / "host=gpu03" / "date=2026-01-05"
    _day(tmp_path, host="gpu03", hours=1)
    writer = TraceWriter(live / "020000-abcdef.parquet", HostInfo(hostname="gpu03"), INTERVAL)
    writer.append(_ticks(DAY + timedelta(hours=2, seconds=INTERVAL), 1)[0])
    try:
        early = run(tmp_path, Options(now=DAY + timedelta(days=1, minutes=5)))  # the day ended 5 minutes ago
        assert early.days == 0
        res = run(tmp_path, _opts())
    finally:
        writer.abort()
    assert res.days == 1  # host=late only
    assert (tmp_path / "host=late" / "date=2026-01-05" / "day.parquet").exists()
    assert not list(tmp_path.glob("host=gpu01/date=*/day.parquet"))  # today's
    assert len(list(leftover.iterdir())) == 2 and len(list(live.iterdir())) == 2
    said = "\n".join(res.lines)
    assert f"gpu-triage recover {leftover}/010000-abcdef.parquet.partial.arrows" in said
    assert "is being recorded by pid" in said


def test_verdicts_missing_from_older_files_are_computed_once_and_kept(tmp_path: Path) -> None:
    _day(tmp_path, hours=1, per_hour=60, version="2")  # v2: no verdict column
    stored = VerdictSample("compute_bound", "none", "sentinel", "likely", [0, 1])
    _day(tmp_path, host="gpu02", hours=1, per_hour=60, verdict=stored)

    res = run(tmp_path, _opts())

    assert res.recomputed == 60
    got = open_trace(tmp_path / "host=gpu01" / "date=2026-01-05" / "day.parquet")
    rows = got.table.column("verdict").to_pylist()
    ticks = _ticks(DAY + timedelta(seconds=INTERVAL), 60)
    want = verdicts(ticks, INTERVAL, Config().thresholds, Config().window_s, cpu_count=32)
    assert [(r["pattern"], r["bottleneck"]) for r in rows] == [(str(v.pattern), str(v.bottleneck)) for _, v, _ in want]
    assert Counter(r["bottleneck"] for r in rows).most_common(1)[0][0] == "data_pipeline"
    # each recomputed verdict keeps its headroom, as the recorder stores it (trace v4)
    assert [r["headroom_kind"] for r in rows] == [None if v.headroom is None else v.headroom.kind for _, v, _ in want]
    assert json.loads(pq.read_schema(got.path).metadata[b"gpu_triage.verdicts_recomputed"]) == 60
    kept = open_trace(tmp_path / "host=gpu02" / "date=2026-01-05" / "day.parquet").table.column("verdict")
    assert {r["mechanism"] for r in kept.to_pylist()} == {"sentinel"}  # a stored verdict is never recomputed


class Crash(BaseException):
    """A kill at that instant: nothing after it runs (BaseException: no `except OSError` catches it)."""


def _crash_on_call(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, call: int) -> None:
    real = getattr(owner, name)
    count = [0]

    def crashing(*a: object, **k: object) -> object:
        count[0] += 1
        if count[0] == call:
            raise Crash
        return real(*a, **k)

    monkeypatch.setattr(owner, name, crashing)


CRASH_POINTS = [
    (compact_day, "write_parquet_atomic", 1),  # writing the daily file
    (fs, "exchange", 1),  # the daily file written, not exchanged
    (compact_day, "_clear_old", 1),  # exchanged, the merged files not removed
    (fs, "remove_file", 2),  # one merged file removed, the others not
]


@pytest.mark.parametrize(("owner", "name", "call"), CRASH_POINTS, ids=[p[1] for p in CRASH_POINTS])
def test_a_run_killed_at_any_step_leaves_every_tick_readable_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: object, name: str, call: int
) -> None:
    _day(tmp_path)
    want = _readable(tmp_path)
    assert set(want.values()) == {1}
    with monkeypatch.context() as m:
        _crash_on_call(m, owner, name, call)
        with pytest.raises(Crash):
            run(tmp_path, _opts())
    assert _readable(tmp_path) == want
    res = run(tmp_path, _opts())  # the next run finishes the work
    assert _readable(tmp_path) == want
    assert os.listdir(tmp_path / "host=gpu01" / "date=2026-01-05") == ["day.parquet"]
    assert not [p for p in tmp_path.rglob(".*")]
    assert any("interrupted compact" in line for line in res.lines) or res.days == 1


@pytest.mark.parametrize("crash", [False, True])
def test_without_an_atomic_exchange_two_renames_do_it_and_a_kill_between_them_is_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: bool
) -> None:
    import errno

    _day(tmp_path)
    want = _readable(tmp_path)
    monkeypatch.setattr(fs, "_renameat2", lambda fd, a, b: errno.EINVAL)  # NFS, an old kernel
    if crash:
        _crash_on_call(monkeypatch, fs.os, "rename", 2)
        with pytest.raises(Crash):
            run(tmp_path, _opts())
        monkeypatch.undo()
        assert _readable(tmp_path) == Counter()  # the moment between the renames: documented
    res = run(tmp_path, _opts())
    assert _readable(tmp_path) == want
    assert not [p for p in tmp_path.rglob(".*")]
    assert crash or any("cannot exchange" in line for line in res.lines)


def test_a_file_that_arrives_during_the_run_or_cannot_be_read_is_never_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _day(tmp_path, hours=2)
    part = tmp_path / "host=gpu01" / "date=2026-01-05"
    (part / "050000-bad.parquet").write_bytes(b"PAR1 not really")
    odd = pa.table({"ts": pa.array([int((DAY + timedelta(hours=6)).timestamp() * 1e6)], pa.timestamp("us", tz="UTC")),
                    "gpus": pa.array([[{"index": 0, "util_pct": "busy", "mem_used_bytes": [1]}]])})
    pq.write_table(odd, part / "060000-odd.parquet")  # another tool's file: readable, but not the trace's types
    real = fs.exchange

    def late_file(host_fd: int, partition: str, staging: str) -> fs.Exchanged:
        (part / "notes.txt").write_text("written by someone else meanwhile")
        return real(host_fd, partition, staging)

    monkeypatch.setattr(fs, "exchange", late_file)
    res = run(tmp_path, _opts())
    assert sorted(os.listdir(part)) == ["050000-bad.parquet", "060000-odd.parquet", "day.parquet", "notes.txt"]
    assert (part / "notes.txt").read_text() == "written by someone else meanwhile"
    assert any("050000-bad.parquet" in line and "stays" in line for line in res.lines)
    assert any("060000-odd.parquet" in line and "do not fit the trace's types" in line for line in res.lines)
    assert res.files_merged == 2 and open_trace(part / "day.parquet").n == 80


def test_per_card_queries_over_the_daily_files_agree_in_duckdb_and_polars(tmp_path: Path) -> None:
    """The per-card questions docs/recording.md answers over the daily files (no flat copy beside them): mean
    GPU-Util per host, day and card, in DuckDB and polars, as the cards' own figures say."""
    import duckdb
    import polars as pl

    _day(tmp_path, hours=2)
    _day(tmp_path, host="gpu02", day=DAY + timedelta(days=1), hours=1)
    run(tmp_path, _opts())
    files = f"{tmp_path}/host=*/date=*/*.parquet"
    con = duckdb.connect()
    by_duck = con.sql(
        "SELECT host, date, g.index AS gpu, avg(g.util_pct) AS util, count(*) AS ticks "
        f"FROM (SELECT host, date, unnest(gpus) AS g FROM read_parquet('{files}', hive_partitioning = true)) "
        "GROUP BY ALL ORDER BY ALL").fetchall()
    by_polars = (pl.scan_parquet(files, hive_partitioning=True).select("host", "date", "gpus").explode("gpus")
                 .select("host", "date", pl.col("gpus").struct.field("index").alias("gpu"),
                         pl.col("gpus").struct.field("util_pct").alias("util"))
                 .group_by("host", "date", "gpu").agg(pl.col("util").mean(), pl.len().alias("ticks"))
                 .sort("host", "date", "gpu").collect())
    assert [(h, str(d), g, n) for h, d, g, _, n in by_duck] == [
        (h, str(d), g, n) for h, d, g, _, n in by_polars.rows()]
    assert [n for *_, n in by_duck] == [80, 80, 40, 40]
    want = {}
    for path in sorted(tmp_path.glob("host=*/date=*/day.parquet")):
        cards = pc.list_flatten(open_trace(path).table.column("gpus").combine_chunks())
        for i in (0, 1):
            util = cards.field("util_pct").to_numpy(zero_copy_only=False)[cards.field("index").to_numpy() == i]
            want[(path.parent.parent.name[5:], i)] = float(np.nanmean(util))
    assert np.allclose([u for *_, u, _ in by_duck], [want[(h, g)] for h, _, g, _, _ in by_duck])
    assert np.allclose(by_polars["util"].to_numpy(), [u for *_, u, _ in by_duck])


def test_a_day_to_be_removed_is_not_merged_first(tmp_path: Path) -> None:
    _day(tmp_path, day=DAY - timedelta(days=10), hours=2)
    res = run(tmp_path, Options(keep_days=3, now=DAY))
    assert (res.days, res.days_removed, res.files_removed) == (0, 1, 2)
    assert os.listdir(tmp_path / "host=gpu01") == []


def test_keep_days_removes_older_partitions_and_dry_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _day(tmp_path, day=DAY - timedelta(days=10), hours=1)
    _day(tmp_path, day=DAY, hours=1)
    kept = tmp_path / "host=gpu01" / "date=2025-12-25"
    _day(tmp_path, day=DAY - timedelta(days=11), hours=1)
    (kept / "000000-abcdef.parquet.partial.arrows").write_bytes(b"")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.parquet"
    outside.write_bytes(b"not ours")
    listing = sorted(str(p) for p in tmp_path.rglob("*"))

    assert main(["compact", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("would merge 1 files") == 2 and "dry run, nothing changed: would compact 2 host-days" in out
    then = DAY + timedelta(days=3, hours=1)
    dry = run(tmp_path, Options(keep_days=3, now=then, dry_run=True))
    assert [line.split(" (")[0] for line in dry.lines if "would remove" in line] == [
        f"would remove {tmp_path / 'host=gpu01' / 'date=2025-12-26'}"]
    assert sorted(str(p) for p in tmp_path.rglob("*")) == listing  # nothing changed

    assert run(tmp_path, Options(now=then)).days == 2  # both finished days
    for day in ("2025-12-26", "2026-01-05"):  # what an older layout left beside the daily files
        (tmp_path / "flat" / day).mkdir(parents=True)
        (tmp_path / "flat" / day / "gpu01.parquet").write_bytes(b"PAR1")
    res = run(tmp_path, Options(keep_days=3, now=then))
    assert sorted(os.listdir(tmp_path / "host=gpu01")) == ["date=2025-12-25", "date=2026-01-05"]
    assert os.listdir(tmp_path / "flat") == ["2026-01-05"]  # the old layout's day went with its recordings
    assert res.days_removed == 1 and res.files_removed == 2  # its daily file and the old layout's flat file
    assert any(f"rm -r {tmp_path / 'flat'}" in line for line in res.lines)  # the way to drop the rest at once
    assert len(os.listdir(kept)) == 2  # a stream not recovered yet is never removed
    assert any(str(kept) in line and "recover" in line for line in res.lines)
    assert outside.read_bytes() == b"not ours"


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("days", ["0", "-3", "x"])
def test_keep_days_below_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], days: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compact", str(tmp_path), f"--keep-days={days}"])
    assert exc.value.code == 2
    assert "--keep-days" in capsys.readouterr().err


def test_a_directory_that_is_no_dataset_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["compact", str(tmp_path), "--keep-days", "1"]) == 2
    assert "is not a gpu-triage dataset" in _one_line(capsys)
    assert main(["compact", str(tmp_path / "missing")]) == 2
    assert "missing" in _one_line(capsys)
    assert main(["compact", ""]) == 2
    assert "DIR: the directory name is empty" in _one_line(capsys)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("where", ["dir", "host", "date", "file", "flat"])
def test_symbolic_links_in_a_dataset_are_refused_before_anything_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    root = tmp_path / "ds"
    _day(root, hours=2)
    victim = tmp_path / "victim"
    (victim / "date=2026-01-01").mkdir(parents=True)
    (victim / "date=2026-01-01" / "precious.parquet").write_bytes(b"x")
    part = root / "host=gpu01" / "date=2026-01-05"
    target = {"dir": root, "host": root / "host=evil", "date": root / "host=gpu01" / "date=2026-01-01",
              "file": part / "evil.parquet", "flat": root / "flat"}[where]
    if where == "dir":
        target = tmp_path / "link"
        target.symlink_to(root)
    else:
        target.symlink_to(victim / "date=2026-01-01" if where == "date" else victim)
    listing = sorted(os.listdir(part))
    assert main(["compact", str(target if where == "dir" else root), "--keep-days", "1"]) == 2
    assert "symbolic link" in _one_line(capsys)
    assert sorted(os.listdir(part)) == listing
    assert (victim / "date=2026-01-01" / "precious.parquet").read_bytes() == b"x"


def test_the_command_says_what_it_did_in_one_summary_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _day(tmp_path, hours=2, version="2")
    assert main(["compact", str(tmp_path), "--progress"]) == 0
    cap = capsys.readouterr()
    assert "[1/1] host=gpu01 date=2026-01-05: 2 files" in cap.err
    (line,) = cap.out.splitlines()
    assert "1 host-days compacted: 2 files merged" in line and "80 verdicts recomputed and kept" in line
    assert "0 host-days removed" in line


def test_a_dataset_walker_tells_recordings_from_the_flat_table_and_staging(tmp_path: Path) -> None:
    from gpu_triage.storage.dataset import is_recording_path

    root = tmp_path / "fleet"
    assert is_recording_path(root / "host=a" / "date=2026-01-05" / "day.parquet", root)
    assert is_recording_path(root / "host=a" / "date=2026-01-05" / "130000-abcdef.parquet", root)
    assert not is_recording_path(root / "flat" / "2026-01-05" / "a.parquet", root)
    assert not is_recording_path(root / "host=a" / ".compact-2026-01-05-ab12cd34" / "day.parquet", root)
    assert not is_recording_path(root / "host=a" / "date=2026-01-05" / ".day.parquet.tmp-x1", root)


def test_the_summary_and_compare_read_no_flat_table_as_a_recording(tmp_path: Path) -> None:
    from gpu_triage.fleet_history.summary import dataset_files

    _day(tmp_path, hours=1)
    run(tmp_path, _opts())
    assert [p.name for p in dataset_files(str(tmp_path))] == ["day.parquet"]


def test_a_host_day_that_cannot_be_written_is_left_whole_and_the_rest_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    _day(tmp_path, host="full", hours=2)
    _day(tmp_path, host="fine", hours=2)
    want = _readable(tmp_path)
    real = compact_day.write_parquet_atomic

    def disk_full(table: pa.Table, target: Path) -> Path:
        if "host=full" in str(target):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, target)

    monkeypatch.setattr(compact_day, "write_parquet_atomic", disk_full)
    assert main(["compact", str(tmp_path)]) == 1
    cap = capsys.readouterr()
    assert "the disk is full" in cap.err and "Traceback" not in cap.err
    assert "1 host-days compacted" in cap.out and "1 host-days failed" in cap.out
    assert _readable(tmp_path) == want
    assert len(os.listdir(tmp_path / "host=full" / "date=2026-01-05")) == 2
    assert os.listdir(tmp_path / "host=fine" / "date=2026-01-05") == ["day.parquet"]
    assert not [p for p in tmp_path.rglob(".*")]


def test_a_second_compact_on_the_same_dataset_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import fcntl

    _day(tmp_path, hours=1)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running compact holds
        assert main(["compact", str(tmp_path)]) == 2
        assert "another `gpu-triage compact` is running" in _one_line(capsys)
        assert main(["compact", str(tmp_path), "--dry-run"]) == 0  # a dry run changes nothing: no lock needed
    finally:
        os.close(fd)
    assert main(["compact", str(tmp_path)]) == 0


@pytest.mark.slow
@pytest.mark.parametrize(("when", "workers"), [("staging", 1), ("daily", 1), ("staging", 2)])
def test_a_real_kill_during_the_run_loses_and_doubles_nothing(tmp_path: Path, when: str, workers: int) -> None:
    """Killed with SIGKILL (as the OOM killer or a timeout would), in one process or with worker processes,
    which die with the run (a worker left writing would race the next run, which then holds the lock)."""
    import signal
    import subprocess
    import sys
    import time

    hosts = ("a", "b", "c") if workers == 1 else ("a", "b", "c", "d", "e", "f")
    for host in hosts:
        _day(tmp_path, host=host, hours=3, per_hour=40)
    want = _readable(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "gpu_triage", "compact", str(tmp_path), "--workers",
                             str(workers)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = {"staging": lambda: any(tmp_path.glob("host=*/.compact-*")),
             "daily": lambda: any(tmp_path.glob("host=*/date=*/day.parquet"))}[when]
    deadline = time.monotonic() + 120
    while proc.poll() is None and not probe() and time.monotonic() < deadline:
        time.sleep(0.001)
    kids = psutil.Process(proc.pid).children()
    assert len(kids) >= (workers if workers > 1 else 0)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # killed mid-run, not finished
    gone, alive = psutil.wait_procs(kids, timeout=30)  # the workers die with it, unasked
    assert not alive
    assert _readable(tmp_path) == want  # whatever step it died in
    assert main(["compact", str(tmp_path), "--workers", "1"]) == 0  # the next run, in this process, finishes it
    assert _readable(tmp_path) == want
    assert sorted(p.name for p in tmp_path.glob("host=*/date=*/*")) == ["day.parquet"] * len(hosts)
    assert not [p for p in tmp_path.rglob(".*")]


def _days_ago(n: int) -> datetime:
    """Midnight UTC ``n`` days before today: for the command itself, which compacts by the real clock."""
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=n)


_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what must never reach a terminal from a name (tab, newline ours)


def test_names_someone_else_chose_reach_the_terminal_cleaned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = "gpu\x1b[31m01"
    day, old = _days_ago(2), _days_ago(20)
    _day(tmp_path, host=host, day=day, hours=1)
    part = tmp_path / f"host={host}" / f"date={day:%Y-%m-%d}"
    (part / "\x1b]0;PWN\x07x.parquet").write_bytes(b"not a trace")  # left out, named
    (part / "\x9b2Jc1.parquet").write_bytes(b"not a trace")  # a C1 CSI
    _day(tmp_path, host=host, day=old, hours=1)
    (tmp_path / f"host={host}" / f"date={old:%Y-%m-%d}" / "\x1b[2Jjunk").write_bytes(b"x")  # kept, named
    rec = tmp_path / "host=\x1b[2Jrec" / f"date={day:%Y-%m-%d}"
    rec.mkdir(parents=True)
    (rec / "\x1b]52;c;QUFB\x07.parquet.partial.arrows").write_bytes(b"")  # skipped, named

    for dry in (["--dry-run"], []):
        rc = main(["compact", str(tmp_path), "--keep-days", "10", "--progress", *dry])
        cap = capsys.readouterr()
        assert "Traceback" not in cap.err
        assert not _RAW.search(cap.out) and not _RAW.search(cap.err), (cap.out, cap.err)
        said = cap.out + cap.err
        assert "host=gpu\u241b[31m01" in said  # the progress lines name the host, made visible
        assert "\u241b]52;c;QUFB\u2407.parquet.partial.arrows" in said  # skipped: a recording not converted
        assert "\u241b[2Jjunk" in said  # an old partition kept for what else it holds
        if not dry:
            assert rc == 0
            assert "left out" in cap.err and "\u241b]0;PWN\u2407x.parquet" in cap.err
            assert "\ufffd2Jc1.parquet" in cap.err


def test_the_dry_run_says_a_partition_holding_other_entries_is_kept_as_the_real_run_does(tmp_path: Path) -> None:
    _day(tmp_path, day=DAY - timedelta(days=10), hours=1)
    part = tmp_path / "host=gpu01" / "date=2025-12-26"
    (part / "notes.txt").write_text("someone's")
    then = DAY + timedelta(days=3, hours=1)

    dry = run(tmp_path, Options(keep_days=3, now=then, dry_run=True))
    assert not [line for line in dry.lines if line.startswith(f"would remove {part}")]
    (said,) = [line for line in dry.lines if str(part) in line]
    assert said.startswith(f"would keep {part}: it holds 1 other entries (notes.txt") and "1 files" in said

    res = run(tmp_path, Options(keep_days=3, now=then))
    (done,) = [line for line in res.lines if str(part) in line]
    assert done.startswith(f"kept {part}: it holds 1 other entries (notes.txt")
    assert (dry.days_removed, dry.files_removed) == (res.days_removed, res.files_removed) == (0, 1)
    assert os.listdir(part) == ["notes.txt"]


def test_an_error_removing_the_merged_files_names_their_directory_under_its_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _day(tmp_path, hours=2)
    real = fs.exchange

    def moved_away(host_fd: int, partition: str, staging: str) -> fs.Exchanged:
        done = real(host_fd, partition, staging)
        os.rename(done.old, done.old + "-elsewhere", src_dir_fd=host_fd, dst_dir_fd=host_fd)
        return done

    monkeypatch.setattr(fs, "exchange", moved_away)
    res = run(tmp_path, _opts())
    (line,) = res.failed
    assert f"{tmp_path / 'host=gpu01' / '.compact-2026-01-05-'}" in line, line


@needs_root
def test_a_partition_compact_cannot_open_is_named_and_the_rest_is_done(
    users: tuple[User, User], open_tmp: Path, tmp_path: Path
) -> None:
    import contextlib
    import io
    import shutil

    a, _ = users
    day, old = _days_ago(2), _days_ago(20)
    warm = tmp_path / "warm"  # the same run once as root: every module the child needs is loaded before it drops
    _day(warm, day=day, hours=1)
    _day(warm, day=old, hours=1)
    assert main(["compact", str(warm), "--keep-days", "10"]) == 0
    root = open_tmp / "ds"
    for host in ("a", "b"):
        _day(root, host=host, day=day, hours=2)
        _day(root, host=host, day=old, hours=1)
    _day(root, host="b", day=_days_ago(3), hours=2)
    shut = root / "host=b" / f"date={_days_ago(3):%Y-%m-%d}"
    for p in [root, *root.rglob("*")]:
        os.chown(p, a.uid, a.gid)
    shut.chmod(0)

    def compact() -> list:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["compact", str(root), "--keep-days", "10"])
        return [rc, out.getvalue(), err.getvalue()]

    try:
        rc, out, err = as_user(a, compact)
    finally:
        shut.chmod(0o755)
    assert rc == 1, (out, err)
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if str(shut) in ln]
    assert "Permission denied" in line
    assert "2 host-days compacted" in out and "2 host-days removed" in out and "1 host-days failed" in out
    for host in ("a", "b"):
        assert os.listdir(root / f"host={host}" / f"date={day:%Y-%m-%d}") == ["day.parquet"]
        assert not (root / f"host={host}" / f"date={old:%Y-%m-%d}").exists()
    assert len(os.listdir(shut)) == 2  # left as it was
    shutil.rmtree(warm)


def _disk_bytes(root: Path) -> int:
    """Every regular file under the dataset: what it costs on disk, whatever the layout keeps."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_recorded_day_reads_the_same_after_compaction_and_is_stored_once(tmp_path: Path) -> None:
    """A dataset as `record -o DIR/` writes it (files rotated every 10 minutes, each tick with its stored
    verdict): the fleet summary says the same before and after compaction but for the count of files, every
    tick is in the daily file once with the figures and verdict it was recorded with, and the dataset on
    disk is no larger than 1.2 times what was recorded (one copy: smaller, as one file's footer replaces
    three)."""
    from gpu_triage.fleet_history.summary import summarise
    from gpu_triage.recording.headless import record_source

    root = tmp_path / "fleet"
    source = SimulatedSource("data_pipeline", gpus=2, seed=3, interval_s=INTERVAL,
                             start=DAY + timedelta(hours=22, minutes=50))
    record_source(source, f"{root}/", INTERVAL, duration_s=1800, fast=True, describe_machine=False, out=None,
                  rotate_s=600)
    hourly = sorted(root.glob("host=*/date=*/*.parquet"))
    assert len(hourly) == 3
    recorded = pa.concat_tables([open_trace(p).table for p in hourly])
    before_bytes = _disk_bytes(root)
    before = summarise(str(root), Config())

    res = run(root, _opts())

    assert res.days == 1 and res.files_merged == 3 and not res.failed
    (daily,) = root.glob("host=*/date=*/*.parquet")
    assert daily.name == "day.parquet"
    assert open_trace(daily).table.to_pylist() == recorded.to_pylist()  # every tick, figure and verdict, once
    after = summarise(str(root), Config())
    assert (before.pop("files"), after.pop("files")) == (3, 1)
    for host in before["hosts"]:
        assert (before["hosts"][host].pop("files"), after["hosts"][host].pop("files")) == (3, 1)
    assert after == before
    assert _disk_bytes(root) <= 1.2 * before_bytes
    assert _disk_bytes(root) == res.bytes_after < res.bytes_before == before_bytes


def test_compaction_stores_a_day_once_and_less_than_its_hourly_files(tmp_path: Path) -> None:
    """The bytes on disk after compaction, counted over every file under DIR: the daily file only, smaller
    than the hourly files it replaced (an older layout kept a per-card copy beside it: 1.65x the input)."""
    _day(tmp_path, hours=4, per_hour=60)
    _day(tmp_path, host="gpu02", hours=4, per_hour=60, version="2")  # verdicts computed and stored
    before = _disk_bytes(tmp_path)
    res = run(tmp_path, _opts())
    assert res.days == 2
    after = _disk_bytes(tmp_path)
    assert after == res.bytes_after and res.bytes_before == before
    assert after <= 1.2 * before
    assert after < before


@pytest.mark.slow
def test_worker_processes_compact_as_one_process_does(tmp_path: Path) -> None:
    """Host-days handed to worker processes: the same daily files (ticks, figures, verdicts, recomputed ones
    included) and the same counts as one process gives; a host-day a worker cannot do is said and left."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        for host in ("w1", "w2", "w3"):
            _day(root, host=host, hours=2, per_hour=10)
        _day(root, host="w4", hours=2, per_hour=10, version="2")
        _day(root, host="w5", hours=1, per_hour=1)
        (root / "host=w5" / "date=2026-01-05" / "010000-bad.parquet").write_bytes(b"PAR1 not really")
    one = run(a, _opts(workers=1))
    many = run(b, _opts(workers=2))
    for field in ("days", "files_merged", "bytes_before", "ticks", "duplicates", "recomputed"):
        assert getattr(one, field) == getattr(many, field), field
    assert many.days == 5 and many.recomputed == many.ticks == 81  # no verdict stored: each computed once
    assert sorted(one.lines) == sorted(line.replace(str(b), str(a)) for line in many.lines)
    for path in sorted(a.glob("host=*/date=*/day.parquet")):
        twin = b / path.relative_to(a)
        assert open_trace(twin).table.to_pylist() == open_trace(path).table.to_pylist()
    assert (b / "host=w5" / "date=2026-01-05" / "010000-bad.parquet").exists()


@pytest.mark.slow
def test_a_workers_lines_and_log_reach_the_terminal_cleaned_through_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Host-days done in worker processes: what a worker says and logs (a file it could not read, moved back)
    comes back to the run and reaches stderr and the log through the run's cleaning, never raw from the
    worker's own stderr."""
    import subprocess
    import sys

    day = _days_ago(2)
    for i in range(4):
        host = f"gpu\x1b[31m{i}"
        _day(tmp_path, host=host, day=day, hours=1, per_hour=5)
        (tmp_path / f"host={host}" / f"date={day:%Y-%m-%d}" / "\x1b]0;PWN\x07x.parquet").write_bytes(b"not a trace")
    out = subprocess.run([sys.executable, "-m", "gpu_triage", "compact", str(tmp_path), "--workers", "2",
                          "--progress", "--log-level", "info"], capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert not _RAW.search(out.stdout) and not _RAW.search(out.stderr), (out.stdout, out.stderr)
    assert out.stderr.count("\u241b]0;PWN\u2407x.parquet") >= 4  # left out, named: one line a host-day
    assert out.stderr.count("was not merged: moved back") == 4  # each worker's log, through the run's handler
    assert "4 host-days compacted" in out.stdout
    assert sorted(os.listdir(tmp_path / "host=gpu\x1b[31m0" / f"date={day:%Y-%m-%d}")) == [
        "\x1b]0;PWN\x07x.parquet", "day.parquet"]


@pytest.mark.slow
def test_ctrl_c_stops_a_run_with_workers_after_the_host_days_in_hand(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the run and its workers (one process group): the workers leave it to the
    run, which starts no further host-day, lets those in hand finish whole, and exits 130; the next run does
    the rest. (Before, the workers took the interrupt as one host-day's result and the run waited for all.)"""
    import signal
    import subprocess
    import sys
    import time

    hosts = [f"h{i:02d}" for i in range(12)]
    for host in hosts:
        _day(tmp_path, host=host, hours=3, per_hour=40)
    want = _readable(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "gpu_triage", "compact", str(tmp_path), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while proc.poll() is None and not any(tmp_path.glob("host=*/date=*/day.parquet")) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    done = len(list(tmp_path.glob("host=*/date=*/day.parquet")))
    assert 1 <= done < len(hosts)
    assert not [p for p in tmp_path.rglob(".*")]  # the host-days in hand were finished whole
    assert _readable(tmp_path) == want
    assert main(["compact", str(tmp_path), "--workers", "1"]) == 0  # the next run, in this process, does the rest
    assert len(list(tmp_path.glob("host=*/date=*/day.parquet"))) == len(hosts)
    assert _readable(tmp_path) == want
