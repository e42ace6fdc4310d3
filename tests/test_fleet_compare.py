"""`compare` of datasets: each side a directory written by our recorder, a glob of its partitions, or a mix
of recordings; read as one recording each. A damaged file among many is left out and named; a side with
nothing readable is one line and exit 2."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from gpu_triage.cli import main
from gpu_triage.compare.runs import compare_traces
from gpu_triage.compare.text import render_text
from gpu_triage.config import Config
from gpu_triage.fleet_history.compare import compare_datasets
from gpu_triage.model import GpuSample, HostInfo, JobRank, JobSample, Tick
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.storage.dataset import DatasetWriter
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter

T0 = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)
LATE = T0 + timedelta(minutes=116)  # 23:56: 2-minute files 23:56-23:58, 23:58-00:00, 00:00-00:02


def _dataset(root: Path, scenario: str, start: datetime, seconds: float, host: str, gpus: int = 2,
             rotate_s: float = 3600, also: Path | None = None) -> list[Path]:
    """The scenario's ticks as a dataset; with ``also``, the very same ticks in that one file too."""
    source = SimulatedSource(scenario, gpus=gpus, seed=1, interval_s=2.0, start=start)
    writer = DatasetWriter(root, source.host_info(), 2.0, rotate_s=rotate_s, hostname=host)
    one = TraceWriter(also, source.host_info(), 2.0) if also is not None else None
    for _ in range(round(seconds / 2.0)):
        tick = source.sample()
        writer.append(tick)
        if one is not None:
            one.append(tick)
    writer.close()
    if one is not None:
        one.close()
    return writer.files


@pytest.fixture(scope="module")
def midnight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six minutes of gpu01 across midnight in three 2-minute files on two dates: ``before`` a data-pipeline
    stall, ``after`` healthy a day later. Read, never written, by the tests that take it (one that adds files
    to a side copies it first)."""
    root = tmp_path_factory.mktemp("midnight")
    before = _dataset(root / "before", "data_pipeline", LATE, 360, "gpu01", rotate_s=120)
    after = _dataset(root / "after", "healthy", LATE + timedelta(days=1), 360, "gpu01", rotate_s=120)
    assert len(before) == len(after) == 3  # files across midnight: one side is several files and two dates
    assert len({f.parent for f in before}) == 2
    return root


def _files(side: Path) -> list[Path]:
    return sorted(side.rglob("*.parquet"))


def _damage(path: Path, bad: Path | None = None) -> Path:
    """A copy of ``path`` (beside it, or at ``bad``) with its middle overwritten (a bad disk block)."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 2000] = bytes(2000)
    bad = bad or path.with_name(f"damaged-{path.name}")
    bad.write_bytes(bytes(data))
    return bad


@pytest.mark.slow
def test_two_dataset_directories_compare_as_two_recordings(midnight: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(midnight / "before"), f"{midnight / 'after'}/", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"before", "after", "job", "overall", "cards", "host", "diagnosis", "metadata_differences"} <= set(result)
    assert "hosts" not in result  # one host a side: cards by index, as for two files
    for side in ("before", "after"):
        assert result[side]["files"] == 3 and result[side]["hosts"] == ["gpu01"] and result[side]["skipped"] == []
        assert result[side]["ticks"] == 180 and result[side]["duration_s"] == pytest.approx(360)
    util = result["overall"]["util_mean_pct"]
    assert util["before"] < 50 and util["change"] > 40
    assert set(result["cards"]) == {"0", "1"}
    assert result["diagnosis"]["sawtooth/data_pipeline"]["before"] > 80
    assert result["diagnosis"]["sawtooth/data_pipeline"]["after"] == 0.0
    assert result["metadata_differences"] == {}

    assert main(["compare", str(midnight / "before"), str(midnight / "after")]) == 0
    text = capsys.readouterr().out
    assert f"before  {midnight / 'before'}  (3 files from gpu01, 180 ticks, 6 min at 2 s)" in text
    # both cards changed alike: one line for them (two files give the same)
    assert "cards 0, 1: as all cards" in text and "diagnosis: share of time %" in text


@pytest.mark.slow
def test_a_dataset_side_reports_its_run_as_a_comparison_of_its_first_files_does(
    tmp_path: Path, midnight: Path
) -> None:
    """What differs between the runs (cards, interval, host facts) is taken from the rows each side's reading
    began with, not from a second whole read of its first file, and says what comparing those files says."""
    before = _files(midnight / "after")  # healthy on 2 cards, 3 files
    after = _dataset(tmp_path / "after", "healthy", T0 + timedelta(days=1), 230, "gpu01", gpus=4, rotate_s=120)
    assert len(before) == 3 and len(after) == 2
    result = compare_datasets(str(midnight / "after"), str(tmp_path / "after"), Config())
    direct = compare_traces(open_trace(before[0]), open_trace(after[0]), Config())["metadata_differences"]
    # the one expected difference: a dataset side is named by the host its recorder was given
    assert direct.pop("hostname") == {"before": "sim-h200x2", "after": "sim-h200x4"}
    assert result["metadata_differences"] == direct
    assert result["metadata_differences"]["cards"] == {"before": 2, "after": 4}


def _job_recording(path: Path, rate: float) -> Path:
    """Two cards and a job pulse: the job figures come from the trace-v2 job column."""
    w = TraceWriter(path, HostInfo(hostname="h"), 2.0)
    for i in range(100):
        moving = 5 <= i < 95
        ranks = [JobRank(r, r, 2, 100 + r, rate / 2, rate / 128, 64 / rate, 10.0, 0.1) for r in range(2)]
        job = JobSample(source="pulse", samples_per_s=rate * moving, steps_per_s=rate / 128 * moving,
                        step_time_s=128 / rate, data_wait_pct=10.0, ranks=ranks)
        gpus = [GpuSample(g, util_pct=90.0 - 20 * (i % 7 == 0), sm_active_pct=70.0, power_w=500.0 + g)
                for g in range(2)]
        w.append(Tick(ts=T0 + timedelta(seconds=2 * i), interval_s=2.0, gpus=gpus, job=job, cpu_pct=[50.0, 20.0],
                      iowait_pct=1.0))
    return w.close()


@pytest.mark.slow
def test_a_one_file_dataset_gives_the_figures_of_the_file(tmp_path: Path) -> None:
    """A side is read as one recording: a directory holding one file gives exactly that file's figures."""
    a = _job_recording(tmp_path / "a.parquet", 1000.0)
    b = _job_recording(tmp_path / "b.parquet", 1500.0)
    for name, f in (("da", a), ("db", b)):
        (tmp_path / name).mkdir()
        shutil.copy(f, tmp_path / name / f.name)
    files = compare_traces(open_trace(a), open_trace(b), Config(), trim=False)  # a dataset is compared whole
    dirs = compare_datasets(str(tmp_path / "da"), str(tmp_path / "db"), Config())
    for key in ("job", "overall", "cards", "host", "diagnosis"):
        assert dirs[key] == files[key], key  # the same rows through the same code: equal, not close
    assert dirs["job"]["metrics"]["samples_per_s"]["after"] == pytest.approx(1500.0)
    assert dirs["before"]["ticks"] == files["before"]["ticks"] == 100


@pytest.mark.slow
def test_a_glob_over_hosts_gives_each_host_and_names_cards_by_host(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    assert len(_dataset(fleet, "data_pipeline", T0, 300, "a", rotate_s=180)) == 2  # 22:00-22:03, 22:03-22:06
    _dataset(fleet, "healthy", T0, 300, "b", rotate_s=180)
    _dataset(tmp_path / "before", "data_pipeline", T0 - timedelta(days=1), 300, "a")
    result = compare_datasets(str(tmp_path / "before"), str(fleet / "host=*" / "date=2026-11-29"), Config())
    assert result["after"]["hosts"] == ["a", "b"] and result["after"]["files"] == 4
    assert set(result["cards"]) == {"a:0", "a:1", "b:0", "b:1"}
    hosts = result["hosts"]
    assert hosts["b"]["util_mean_pct"]["after"] > 90 > hosts["a"]["util_mean_pct"]["after"]
    assert hosts["b"]["util_mean_pct"]["before"] is None  # host b is not in the before side: n/a, not 0
    assert result["cards"]["a:0"]["util_mean_pct"]["change"] == pytest.approx(0.0, abs=5)  # the same load on a
    text = render_text(result)
    assert "(4 files from 2 hosts" in text and "all cards of b" in text and "card a:0" not in text  # cards: --json

    only_a = compare_datasets(str(tmp_path / "before"), str(fleet / "host=a"), Config())
    assert "hosts" not in only_a and set(only_a["cards"]) == {"0", "1"}


@pytest.mark.slow
def test_a_damaged_file_among_many_is_left_out_and_named(
    tmp_path: Path, midnight: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(midnight / "before", tmp_path / "before")
    files = _files(tmp_path / "before")
    bad = _damage(files[1])
    foreign = files[0].with_name("notes.parquet")
    pl.DataFrame({"a": [1, 2]}).write_parquet(foreign)  # a Parquet file that is no recording
    assert main(["compare", str(tmp_path / "before"), str(midnight / "after")]) == 0
    captured = capsys.readouterr()
    assert f"{bad} left out of the comparison" in captured.err and f"{foreign} left out" in captured.err
    assert "Traceback" not in captured.err
    assert "(3 files from gpu01, 180 ticks" in captured.out  # the three good files still count
    assert f"left out (unreadable): {bad}:" in captured.out and f"left out (unreadable): {foreign}:" in captured.out

    assert main(["compare", str(tmp_path / "before"), str(midnight / "after"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {s["path"] for s in result["before"]["skipped"]} == {str(bad), str(foreign)}


@pytest.mark.parametrize("case", ["empty", "no-match", "only-damaged", "only-foreign"])
def test_a_side_with_nothing_readable_is_one_line_and_exit_2(
    tmp_path: Path, midnight: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    good = midnight / "after"
    side = tmp_path / "side"
    side.mkdir()
    spec = str(side)
    if case == "empty":
        (side / "README").write_text("nothing recorded here")
    elif case == "no-match":
        spec = str(tmp_path / "fleet" / "host=*" / "date=2026-11-2*")
    elif case == "only-damaged":
        _damage(_files(good)[0], side / "x.parquet")
    else:
        pl.DataFrame({"a": [1]}).write_parquet(side / "x.parquet")
    assert main(["compare", spec, str(good)]) == 2  # the bad side first: nothing else is read
    err = capsys.readouterr().err
    assert err.startswith("gpu-triage") and err.count("\n") <= 1 + (case.startswith("only")), err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert spec in last and ("no file or directory matches" in last or "no recording" in last
                             or "be read" in last), last


@pytest.mark.slow
def test_a_recording_whose_name_holds_glob_characters_is_one_file_not_a_glob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run[1].parquet` exists: compare and diagnose read it as the file it is (as before datasets came)."""
    from gpu_triage.data import H200_TRACE_2S
    from gpu_triage.fleet_history.summary import is_dataset_spec

    odd = tmp_path / "run[1].parquet"
    shutil.copy(H200_TRACE_2S, odd)
    assert not is_dataset_spec(str(odd)) and is_dataset_spec(str(tmp_path / "run[12].parquet"))
    assert is_dataset_spec(str(tmp_path)) and not is_dataset_spec("x" * 5000)  # too long: no error either
    assert main(["compare", str(odd), str(H200_TRACE_2S)]) == 0
    assert main(["diagnose", str(odd)]) == 0
    assert "no file or directory matches" not in capsys.readouterr().err


@pytest.mark.slow
def test_many_small_files_give_the_figures_of_the_same_ticks_in_one_file(tmp_path: Path) -> None:
    """Files of 5 ticks (read whole, projected across files) against the very same ticks in one file each."""
    sides = {}
    for name, scenario in (("before", "data_pipeline"), ("after", "healthy")):
        one = tmp_path / f"{name}.parquet"
        files = _dataset(tmp_path / name, scenario, T0, 250, "gpu01", rotate_s=10, also=one)
        assert len(files) >= 25 and max(pq.read_metadata(f).num_rows for f in files) <= 5
        assert open_trace(one).n == 125
        sides[name] = one
    bad = _damage(files[3])  # a damaged small file is left out and named, as a large one
    many = compare_datasets(str(tmp_path / "before"), str(tmp_path / "after"), Config())
    whole = compare_datasets(str(sides["before"]), str(sides["after"]), Config())
    assert many["after"]["skipped"][0]["path"] == str(bad)
    assert many["before"]["ticks"] == whole["before"]["ticks"] == 125
    assert many["after"]["ticks"] == whole["after"]["ticks"] == 125
    for key in ("overall", "cards", "host"):
        assert _flat(many[key]).keys() == _flat(whole[key]).keys()
        for where, value in _flat(whole[key]).items():
            assert _flat(many[key])[where] == (None if value is None else pytest.approx(value)), where


def _flat(tree: object, prefix: str = "") -> dict[str, object]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}/{key}").items()}
    return {prefix: tree}


def test_a_fifo_named_like_a_recording_is_left_out_not_waited_for(tmp_path: Path) -> None:
    import os
    import threading

    _dataset(tmp_path / "before", "healthy", T0, 60, "gpu01", rotate_s=10)
    _dataset(tmp_path / "after", "healthy", T0, 60, "gpu01")
    fifo = tmp_path / "before" / "host=gpu01" / "trap.parquet"
    os.mkfifo(fifo)
    result: list[dict] = []
    worker = threading.Thread(target=lambda: result.append(
        compare_datasets(str(tmp_path / "before"), str(tmp_path / "after"), Config())), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # release the blocked open so the test process can end, then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("compare opened a FIFO and waited on it")
    assert [s["path"] for s in result[0]["before"]["skipped"]] == [str(fifo)]
