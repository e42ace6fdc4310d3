"""`compare` of datasets counts each tick of a host once: a directory holding many copies of one recording (a
copy tool run twice, a hostile user filling a shared dataset) is that recording's time, not the sum of the
copies' ("10,000 copies of one 8 s file read as 80000 ticks, 22 h 23 min"). The cost of reading the copies is
bounded in the assertions, on the CLI as a child process."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.fleet_history.compare import compare_datasets
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.writer import TraceWriter
from rusage_run import run_cli

START = datetime(2026, 1, 5, 12, tzinfo=UTC)
COPIES = 400


def _recording(path: Path, ticks: int, start: datetime = START, scenario: str = "healthy") -> Path:
    src = SimulatedSource(scenario, gpus=2, seed=1, interval_s=2.0, start=start)
    writer = TraceWriter(path, src.host_info(), 2.0, convert_in_child=False)
    for _ in range(ticks):
        writer.append(src.sample())
    return writer.close()


def test_copies_of_one_file_count_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copies = tmp_path / "copies"
    copies.mkdir()
    one = _recording(copies / "run-0000.parquet", 4)  # 8 s at 2 s
    for i in range(1, COPIES):
        shutil.copyfile(one, copies / f"run-{i:04d}.parquet")
    other = _recording(tmp_path / "after.parquet", 4, scenario="data_pipeline")
    ran = run_cli(["compare", str(copies), str(other), "--json"], limit_s=300)
    assert ran.rc == 0 and not ran.killed, ran.err[-2000:]
    before = json.loads(ran.out)["before"]
    assert before["ticks"] == 4 and before["duration_s"] == 8.0, (before["ticks"], before["duration_s"])
    assert before["repeated_ticks"] == 4 * (COPIES - 1)
    assert "repeat ticks already read" in ran.err and ran.err.count("\n") <= 3  # said once, not 399 times
    # reading 400 small files, 399 of them copies: 5-21 s and 200-510 MiB peak on the shared 2-core box (the
    # process's whole peak, the judge and the bounded reader imported); what is bounded is that it does not grow
    # with the copies' 22 h of repeated time
    assert ran.seconds < 120 and ran.peak_mib < 800, (ran.seconds, ran.peak_mib)

    # the table of the same comparison, in this process: the child above was for its cost
    assert main(["compare", str(copies), str(other)]) == 0
    text = capsys.readouterr().out
    assert "(1 file from " in text and "4 ticks, 8 s" in text, text[:600]
    assert f"{4 * (COPIES - 1)} repeated ticks left out" in text


def test_files_that_overlap_in_part_keep_each_tick_once(tmp_path: Path) -> None:
    """Two recordings of one host, the second starting 10 s before the first ends: 20 + 20 ticks, 5 shared."""
    d = tmp_path / "overlap"
    d.mkdir()
    _recording(d / "a.parquet", 20)
    _recording(d / "b.parquet", 20, start=START + timedelta(seconds=30))
    other = _recording(tmp_path / "after.parquet", 4, scenario="data_pipeline")
    ran = run_cli(["compare", str(d), str(other), "--json"], limit_s=300)
    assert ran.rc == 0, ran.err[-2000:]
    before = json.loads(ran.out)["before"]
    assert before["ticks"] == 35 and before["repeated_ticks"] == 5


def test_a_copy_in_another_hosts_partition_is_that_hosts_time(tmp_path: Path) -> None:
    """The same bytes under two hosts' partitions (a file read once, its copies sharing its rows): each copy is
    its own host's, named by its own path, and nothing is counted as repeated across hosts."""
    fleet = tmp_path / "fleet"
    first = fleet / "host=a" / "date=2026-01-05" / "120000-x.parquet"
    first.parent.mkdir(parents=True)
    _recording(first, 4)
    for host in ("b", "c"):
        (fleet / f"host={host}" / "date=2026-01-05").mkdir(parents=True)
        shutil.copyfile(first, fleet / f"host={host}" / "date=2026-01-05" / first.name)
    (fleet / "host=c" / "date=2026-01-05" / "damaged.parquet").write_bytes(first.read_bytes()[:-300])
    other = _recording(tmp_path / "after.parquet", 4, scenario="data_pipeline")
    result = compare_datasets(str(fleet), str(other), Config())
    before = result["before"]
    assert before["hosts"] == ["a", "b", "c"] and before["files"] == 3
    assert before["ticks"] == 12 and before["repeated_ticks"] == 0
    assert {f"{h}:{i}" for h in "abc" for i in (0, 1)} <= set(result["cards"])  # and the after side's host's
    assert all(result["hosts"][h]["util_mean_pct"]["before"] == result["hosts"]["a"]["util_mean_pct"]["before"]
               for h in "bc")  # the same rows, each host's own
    assert [s["path"] for s in before["skipped"]] == [str(fleet / "host=c" / "date=2026-01-05" / "damaged.parquet")]
