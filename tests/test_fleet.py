"""A fleet's recordings as one dataset: `record -o DIR/` and `export --record DIR` write Hive-partitioned
Parquet files that rotate on the clock and at midnight, each a complete trace; a killed recorder leaves a
stream per file; `diagnose DIR --summary` gives per host the share of time in each bottleneck and the
worst windows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.fleet_history.summary import summarise
from gpu_triage.model import HostInfo
from gpu_triage.recording.resilient import RetryingRecording
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.storage.dataset import DatasetWriter, file_end, host_partition, is_dataset_target
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter

LATE = datetime(2026, 1, 5, 22, 30, tzinfo=UTC)


def _write(
    root: Path,
    scenario: str,
    start: datetime,
    seconds: float,
    *,
    rotate_s: float = 3600,
    hostname: str | None = None,
    gpus: int = 2,
    interval_s: float = 2.0,
) -> DatasetWriter:
    source = SimulatedSource(scenario, gpus=gpus, seed=1, interval_s=interval_s, start=start)
    writer = DatasetWriter(root, source.host_info(), interval_s, rotate_s=rotate_s, hostname=hostname)
    for _ in range(round(seconds / interval_s)):
        writer.append(source.sample())
    writer.close()
    return writer


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 minutes of gpu01 in a data-pipeline stall and of gpu02 healthy, recorded without verdicts (the summary
    recomputes them): read, never written, by the tests that take it."""
    root = tmp_path_factory.mktemp("two-hosts")
    start = datetime(2026, 1, 5, 9, tzinfo=UTC)
    _write(root, "data_pipeline", start, 1200, hostname="gpu01")
    _write(root, "healthy", start, 1200, hostname="gpu02")
    return root


@pytest.fixture(scope="module")
def two_hosts_summary(two_hosts: Path) -> dict:
    """The summary of ``two_hosts`` in one process: read, never changed, by the tests that take it."""
    return summarise(str(two_hosts), Config(), workers=1)


@pytest.fixture(scope="module")
def storage_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 minutes of gpu07 waiting on storage: read, never written, by the tests that take it."""
    root = tmp_path_factory.mktemp("storage-host")
    _write(root, "storage_io", LATE, 1200, hostname="gpu07")
    return root


@pytest.mark.slow
def test_files_rotate_on_the_hour_and_at_midnight_each_a_complete_trace(tmp_path: Path) -> None:
    writer = _write(tmp_path, "healthy", LATE, 2.5 * 3600, interval_s=20.0)  # the rotation is on the clock
    files = sorted(tmp_path.rglob("*.parquet"))
    assert [f.relative_to(tmp_path).parent.as_posix() for f in files] == [
        "host=sim-h200x2/date=2026-01-05",
        "host=sim-h200x2/date=2026-01-05",
        "host=sim-h200x2/date=2026-01-06",
    ]
    assert [f.name[:6] for f in files] == ["223000", "230000", "000000"]
    assert not list(tmp_path.rglob("*.arrows"))  # every stream became its Parquet file
    ticks = 0
    ends = [datetime(2026, 1, 5, 23, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC), datetime(2026, 1, 6, 1, tzinfo=UTC)]
    for f, end in zip(files, ends, strict=True):
        trace = open_trace(f)
        assert trace.host.hostname == "sim-h200x2" and len(trace.host.gpus) == 2  # metadata in every file
        assert trace.timestamps.max() <= end.timestamp()
        assert trace.timestamps.min() > end.timestamp() - 3600
        ticks += trace.n
    assert ticks == writer.ticks == 450
    every = np.concatenate([open_trace(f).timestamps for f in files])
    assert np.allclose(np.diff(every), 20.0)  # nothing lost or doubled at a rotation


def test_a_sub_second_interval_rotates_on_the_hour_into_a_file_of_its_own_name(tmp_path: Path) -> None:
    """At 0.2 s a tick, a file opened within the second before the hour (named from its first tick's interval,
    22:59:59) and the next file (its first tick's interval also begins at 22:59:59) would share a name: the
    next is named from the hour it begins at, and every tick is kept."""
    source = SimulatedSource("healthy", gpus=1, seed=0, interval_s=0.2,
                             start=datetime(2026, 1, 5, 22, 59, 59, 500000, tzinfo=UTC))
    writer = DatasetWriter(tmp_path, source.host_info(), 0.2, hostname="gpu01")
    for _ in range(6):
        writer.append(source.sample())
    writer.close()
    files = sorted(tmp_path.rglob("*.parquet"))
    assert [f.name[:6] for f in files] == ["225959", "230000"]
    assert sum(open_trace(f).n for f in files) == 6 and not list(tmp_path.rglob("*.arrows"))


def test_a_rotation_that_does_not_divide_the_day_still_ends_at_midnight() -> None:
    # multiples of 7 h since the epoch fall at 23:00 and 06:00 around this midnight
    assert file_end(datetime(2026, 1, 5, 22, 0, 1, tzinfo=UTC), 7 * 3600) == datetime(2026, 1, 5, 23, tzinfo=UTC)
    assert file_end(datetime(2026, 1, 5, 23, 30, tzinfo=UTC), 7 * 3600) == datetime(2026, 1, 6, tzinfo=UTC)
    assert file_end(datetime(2026, 1, 5, 13, 0, 0, tzinfo=UTC), 3600) == datetime(2026, 1, 5, 14, tzinfo=UTC)
    assert file_end(datetime(2026, 1, 5, 13, 59, 59, tzinfo=UTC), 600) == datetime(2026, 1, 5, 14, tzinfo=UTC)


def test_host_partition_is_path_safe() -> None:
    assert host_partition("gpu01.cluster") == "gpu01.cluster"
    assert host_partition("a/b=c d") == "a_b_c_d"
    assert host_partition("") == host_partition(None) == "unknown"


def test_a_killed_recorder_leaves_the_open_files_stream(tmp_path: Path) -> None:
    source = SimulatedSource("healthy", gpus=2, seed=1, start=LATE, interval_s=20.0)
    writer = DatasetWriter(tmp_path, source.host_info(), 20.0)
    for _ in range(100):  # past the 23:00 rotation
        writer.append(source.sample())
    writer.abort()  # what a kill leaves: the closed file and the open one's stream
    assert len(list(tmp_path.rglob("*.parquet"))) == 1
    (stream,) = tmp_path.rglob("*.partial.arrows")
    assert open_trace(stream).n == 100 - 90  # readable in place, `gpu-triage recover` finishes it
    result = summarise(str(tmp_path), Config())
    assert result["leftovers"] == [str(stream)]


@pytest.mark.slow
def test_record_to_a_directory_writes_the_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "fleet"
    assert is_dataset_target(f"{target}/") and not is_dataset_target(target)
    assert (
        main(
            [
                "record",
                "--fast",
                "--source",
                "sim:storage_io",
                "--gpus",
                "2",
                "--duration",
                "7200",
                "--interval",  # 360 ticks, not 3,600: the rotation is in simulated time, each tick judged
                "20",
                "-o",
                f"{target}/",
                "--rotate",
                "1800",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    files = sorted(target.rglob("*.parquet"))
    assert 4 <= len(files) <= 5 and f"in {len(files)} files" in out
    frame = pl.scan_parquet(str(target / "**/*.parquet"), hive_partitioning=True).select("host", "date", "ts").collect()
    assert frame.height == 360 and frame["host"].unique().to_list() == ["sim-h200x2"]


@pytest.mark.parametrize(
    "command",
    [
        ["record", "--fast", "--source", "sim:healthy", "--duration", "10", "-o"],
        ["export", "--listen", "127.0.0.1:0", "--source", "sim:healthy", "--record"],
    ],
)
def test_an_unwritable_directory_is_one_line_and_exit_2(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert main([*command, f"{blocker}/fleet/"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot record a dataset into" in err and "a-file" in err


@pytest.mark.slow
def test_a_failed_write_pauses_the_recording_until_a_retry_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = SimulatedSource("healthy", gpus=2, seed=1, start=LATE, interval_s=20.0)
    recording = RetryingRecording(str(tmp_path / "fleet"), source, 20.0, None)
    for _ in range(10):
        recording.append(source.sample())
    # the disk goes away under the open file's partition: the next rotation cannot create its folder
    part = tmp_path / "fleet" / "host=sim-h200x2"
    blocker = part / "date=2026-01-06"
    blocker.write_text("in the way")
    for _ in range(370):  # crosses 23:00 and midnight
        recording.append(source.sample())
    assert not recording.up
    err = capsys.readouterr().err
    assert err.count("recording stopped, still serving metrics") == 1  # said once, retried at every tick
    blocker.unlink()
    recording.append(source.sample())
    assert recording.up
    assert "recording resumed" in capsys.readouterr().err
    recording.close()
    assert len(list((part / "date=2026-01-05").glob("*.parquet"))) == 2  # 22:00-23:00, then 23:00-midnight
    (resumed,) = (part / "date=2026-01-06").glob("*.parquet")
    assert not list(part.rglob("*.partial.arrows"))  # the retries that failed left nothing behind


@pytest.mark.slow
def test_summary_per_host_shares_and_worst_windows(two_hosts: Path, two_hosts_summary: dict) -> None:
    result = two_hosts_summary
    hosts = result["hosts"]
    assert set(hosts) == {"gpu01", "gpu02"}
    assert hosts["gpu01"]["bottlenecks"]["data_pipeline"] > 0.8
    assert hosts["gpu02"]["bottlenecks"]["none"] > 0.8
    for h in hosts.values():
        assert sum(h["bottlenecks"].values()) == pytest.approx(1.0)
        assert h["seconds"] == pytest.approx(1200, abs=2)
        assert 1 <= len(h["worst_windows"]) <= 3
        utils = [w["gpu_util_pct"] for w in h["worst_windows"]]
        assert utils == sorted(utils)
    worst_a = hosts["gpu01"]["worst_windows"][0]
    assert worst_a["gpu_util_pct"] < min(w["gpu_util_pct"] for w in hosts["gpu02"]["worst_windows"])
    assert worst_a["bottleneck"] == "data_pipeline"

    only = summarise(str(two_hosts / "host=gpu02" / "**" / "*.parquet"), Config())  # a glob narrows it
    assert set(only["hosts"]) == {"gpu02"}


@pytest.mark.slow
def test_worker_processes_summarise_as_one_process_does(two_hosts: Path, two_hosts_summary: dict) -> None:
    """The files read by spawned worker processes (what many files, or many ticks to recompute, get) give the
    summary one process gives, but for the seconds the recomputation took."""
    one = two_hosts_summary
    many = summarise(str(two_hosts), Config(), workers=2)
    assert one["recomputed_files"] == many["recomputed_files"] == 2
    assert {k: v for k, v in one.items() if k != "recompute_s"} == {k: v for k, v in many.items() if k != "recompute_s"}


@pytest.mark.slow
def test_summary_verdicts_are_the_dashboards_raw_verdicts_every_30_s(tmp_path: Path) -> None:
    """The summary streams each file in columns (offline.judge) instead of feeding ticks to a RollingWindow:
    the spans must be exactly what the window and the engine give tick by tick, as before that change."""
    from gpu_triage.diagnosis.engine import diagnose
    from gpu_triage.fleet_history.onefile import STRIDE_S, file_verdicts
    from gpu_triage.window import RollingWindow, window_capacity

    # one recorder that sees three regimes in turn: the spans change verdict, across a rotation (23:00, in the
    # middle of the second regime)
    writer = None
    for n, scenario in enumerate(("healthy", "data_pipeline", "storage_io")):
        source = SimulatedSource(scenario, gpus=4, seed=n, start=LATE + timedelta(seconds=1200 + 450 * n))
        writer = writer or DatasetWriter(tmp_path, source.host_info(), 2.0, hostname="gpu03")
        for _ in range(225):
            writer.append(source.sample())
    assert writer is not None
    writer.close()
    config = Config()
    seen = set()
    for path in sorted(tmp_path.rglob("*.parquet")):
        host, spans = file_verdicts(path, config)
        seen |= {(s.pattern, s.bottleneck) for s in spans}
        trace = open_trace(path)
        window = RollingWindow(window_capacity(config.window_s, trace.interval_s)[0])
        stride = round(STRIDE_S / trace.interval_s)
        expected = []
        start = None
        for i, tick in enumerate(trace.ticks(0, trace.n)):
            window.append(tick)
            start = start or tick.ts - timedelta(seconds=tick.interval_s or trace.interval_s)
            if (i + 1) % stride == 0 or i == trace.n - 1:
                v = diagnose(window.view(), config.thresholds, trace.host.cpu_count)
                expected.append((start, tick.ts, v.pattern, v.bottleneck))
                start = tick.ts
        assert host == "gpu03"
        assert [(s.start, s.end, s.pattern, s.bottleneck) for s in spans] == expected
    assert len(seen) > 2, seen  # the comparison covers changing verdicts, not one steady state
    assert len(list(tmp_path.rglob("*.parquet"))) == 2


def test_summary_of_plain_recordings_takes_the_host_from_their_metadata(tmp_path: Path) -> None:
    for i, scenario in enumerate(("launch_overhead", "healthy")):
        source = SimulatedSource(scenario, gpus=2, seed=i, start=LATE)
        host = source.host_info()
        host.hostname = f"box{i}"
        writer = TraceWriter(tmp_path / f"run{i}.parquet", host, 2.0)
        for _ in range(300):
            writer.append(source.sample())
        writer.close()
    result = summarise(str(tmp_path / "run*.parquet"), Config())
    assert set(result["hosts"]) == {"box0", "box1"}
    assert result["hosts"]["box0"]["bottlenecks"].get("launch_overhead", 0) > 0.5


def test_diagnose_a_directory_prints_the_summary(storage_host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(storage_host), "--summary"]) == 0
    out = capsys.readouterr().out
    assert "gpu07: 0:20:00 of data in 1 files" in out and "storage_io" in out and "worst episodes" in out
    assert out.index("what to fix first") < out.index("gpu07: 0:20:00")  # the ranking first, then the host
    assert main(["diagnose", str(storage_host), "--json"]) == 0  # a directory implies --summary
    assert json.loads(capsys.readouterr().out)["hosts"]["gpu07"]["files"] == 1


def test_summary_progress_counts_files_and_follows_the_flag(
    storage_host: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`diagnose DIR --summary --progress` reports on a pipe as `diagnose FILE --progress` does, in files."""
    assert main(["diagnose", str(storage_host), "--summary"]) == 0
    assert "summarising" not in capsys.readouterr().err  # not a terminal, no --progress: quiet
    assert main(["diagnose", str(storage_host), "--summary", "--progress"]) == 0
    assert "summarising: 1/1 files (100 %)" in capsys.readouterr().err


def test_summary_prints_local_time_like_diagnose_and_utc_with_the_flag(
    two_hosts: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    data = str(two_hosts / "host=gpu01")  # gpu01's data-pipeline stall, from 09:00 UTC
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # UTC+9, no daylight saving
    time.tzset()
    try:
        assert main(["diagnose", data, "--summary"]) == 0
        local = capsys.readouterr().out
        assert main(["diagnose", data, "--summary", "--utc"]) == 0
        utc = capsys.readouterr().out
        assert main(["diagnose", data, "--summary", "--json"]) == 0
        as_json = json.loads(capsys.readouterr().out)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    windows = as_json["hosts"]["gpu01"]["worst_windows"]
    assert windows and all(w["start"].startswith("2026-01-05T09:") and w["start"].endswith("Z") for w in windows)
    first = datetime.fromisoformat(windows[0]["start"])
    assert f"{first + timedelta(hours=9):%Y-%m-%d %H:%M} JST  GPU-Util" in local and " UTC " not in local
    assert f"{first:%Y-%m-%d %H:%M} UTC  GPU-Util" in utc


@pytest.mark.slow
def test_summary_leaves_out_a_damaged_file_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = _write(tmp_path, "storage_io", LATE, 360, rotate_s=120, hostname="gpu07")  # 3 files of 2 min
    data = bytearray(writer.files[1].read_bytes())
    data[len(data) // 2 : len(data) // 2 + 2000] = bytes(2000)  # a bad block in the middle
    bad = writer.files[1].with_name("damaged.parquet")
    bad.write_bytes(bytes(data))
    assert main(["diagnose", str(tmp_path), "--summary"]) == 0
    captured = capsys.readouterr()
    assert f"{bad} left out of the summary" in captured.err and "Traceback" not in captured.err
    assert f"left out (unreadable): {bad}:" in captured.out and "gpu07: 0:06:00 of data in 3 files" in captured.out
    only_bad = tmp_path / "only"
    only_bad.mkdir()
    bad.rename(only_bad / bad.name)
    assert main(["diagnose", str(only_bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("gpu-triage") and "cannot be read" in err


def test_diagnose_an_empty_directory_says_it_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("no recording here")
    assert main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a directory with no recording in it" in err


def test_diagnose_a_glob_that_matches_nothing_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(tmp_path / "nothing-*.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no file or directory matches" in err


def test_dataset_writer_refuses_a_file_as_root(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(UserError, match="it is a file"):
        DatasetWriter(f, HostInfo(hostname="h"), 2.0)


@pytest.mark.slow
def test_rotation_keeps_one_file_open() -> None:
    """Memory flat: closed files are on disk, only the open file's stream is the writer's."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        source = SimulatedSource("healthy", gpus=1, seed=1, start=LATE - timedelta(hours=3), interval_s=20.0)
        writer = DatasetWriter(d, source.host_info(), 20.0, rotate_s=600)
        opened = set()
        for _ in range(300):  # 100 minutes
            writer.append(source.sample())
            opened.add(writer.current)
        assert len(writer.files) == len(opened) - 1 == 9
        assert len(list(Path(d).rglob("*.partial.arrows"))) == 1
        writer.close()


@pytest.mark.slow
def test_summary_says_whose_time_each_bottleneck_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two Slurm jobs one after the other on one host (the simulator gives each phase its own job): the
    summary splits the host's time per owner, each with its own bottlenecks; a recording made before the
    owner fields existed (the bundled H200 one) has no owners, not a made-up one."""
    import shutil

    from gpu_triage.data import H200_TRACE_2S

    start = datetime(2026, 1, 5, 9, tzinfo=UTC)
    source = SimulatedSource.from_schedule([("data_pipeline", 600), ("healthy", 600)], gpus=2, seed=1, start=start)
    writer = DatasetWriter(tmp_path / "fleet", source.host_info(), 2.0, hostname="gpu01")
    for _ in range(600):
        writer.append(source.sample())
    writer.close()
    host = summarise(str(tmp_path / "fleet"), Config())["hosts"]["gpu01"]
    owners = host["owners"]
    assert list(owners) == ["slurm 100", "slurm 101"] or list(owners) == ["slurm 101", "slurm 100"]
    first, second = owners["slurm 100"], owners["slurm 101"]
    assert first["seconds"] == pytest.approx(600, abs=60) and second["seconds"] == pytest.approx(600, abs=60)
    assert first["seconds"] + second["seconds"] == pytest.approx(host["seconds"], abs=2)
    assert first["bottlenecks"]["data_pipeline"] > 0.7
    assert second["bottlenecks"].get("none", 0) > 0.7
    for o in owners.values():
        assert sum(o["bottlenecks"].values()) == pytest.approx(1.0)
    assert main(["diagnose", str(tmp_path / "fleet"), "--summary"]) == 0
    text = capsys.readouterr().out
    assert "whose time" in text and "slurm 100" in text and "data_pipeline" in text

    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(H200_TRACE_2S, old / "h200.parquet")
    assert all(h["owners"] == {} for h in summarise(str(old), Config())["hosts"].values())


@pytest.mark.slow
def test_diagnose_one_recording_says_whose_time_each_bottleneck_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    start = datetime(2026, 1, 5, 9, tzinfo=UTC)
    source = SimulatedSource.from_schedule([("data_pipeline", 300), ("healthy", 300)], gpus=2, seed=1, start=start)
    writer = TraceWriter(tmp_path / "run.parquet", source.host_info(), 2.0)
    for _ in range(300):
        writer.append(source.sample())
    path = writer.close()
    assert main(["diagnose", str(path), "--json"]) == 0
    owners = json.loads(capsys.readouterr().out)["owners"]
    assert set(owners) == {"slurm 100", "slurm 101"}
    assert owners["slurm 100"]["seconds"] == pytest.approx(300, abs=4)
    assert owners["slurm 100"]["bottlenecks"]["data_pipeline"] > 0.7
    assert owners["slurm 101"]["bottlenecks"].get("none", 0) > 0.7
    assert main(["diagnose", str(path)]) == 0
    text = capsys.readouterr().out
    assert "whose time" in text and "slurm 101" in text
