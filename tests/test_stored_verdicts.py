"""Trace v3's verdict column: `record` (a file, a dataset) and `export --record` store the engine's raw verdict
of every tick, on the window `diagnose FILE` would hold there (afresh at each file and after a gap); a
diagnosis that fails costs that tick's verdict, never the tick."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpu_triage.commands.export import take
from gpu_triage.config import Config
from gpu_triage.export.monitor import Monitor
from gpu_triage.model import HostInfo, Tick
from gpu_triage.offline.judge import judge
from gpu_triage.recording.headless import record_source
from gpu_triage.recording.resilient import RetryingRecording
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.batches import iter_batches
from gpu_triage.trace.reader import open_trace

START = datetime(2026, 1, 5, 9, tzinfo=UTC)
SCHEDULE = [("healthy", 300.0), ("data_pipeline", 400.0), ("storage_io", 300.0)]  # seconds of each


def _phased(gpus: int = 2, start: datetime = START) -> SimulatedSource:
    return SimulatedSource(gpus=gpus, cores=8, seed=3, start=start, schedule=SCHEDULE)


class _Skipping:
    """A source whose clock jumps once (a machine suspended for 10 minutes) and some of whose ticks the
    engine cannot read (no per-core list: what a broken host reader could hand over); the writer can."""

    def __init__(self, inner: SimulatedSource, jump_at: int, broken: set[int]) -> None:
        self.inner, self.jump_at, self.broken, self.n = inner, jump_at, broken, 0
        self.name = inner.name

    def host_info(self) -> HostInfo:
        return self.inner.host_info()

    def status(self):  # noqa: ANN201 - the source protocol's
        return self.inner.status()

    def close(self) -> None:
        self.inner.close()

    def sample(self) -> Tick:
        tick = self.inner.sample()
        self.n += 1
        if self.n > self.jump_at:
            tick = dataclasses.replace(tick, ts=tick.ts + timedelta(minutes=10))
        if self.n in self.broken:
            tick = dataclasses.replace(tick, cpu_pct=None)  # type: ignore[arg-type]
        return tick


@pytest.fixture(scope="module")
def phased_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole phased source (1000 s, three regimes) recorded to one file with the defaults: read, never
    written, by the tests that take it (each writes its variants into its own tmp_path)."""
    path, _ = record_source(_phased(), tmp_path_factory.mktemp("run") / "run.parquet", 2.0, duration_s=1000,
                            fast=True, describe_machine=False, out=None, config=Config())
    return Path(path)


@pytest.fixture(scope="module")
def phased_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 s of the phased source recorded as a dataset with the defaults, from 08:56 with a rotation every 5
    minutes (3 files' worth of edges): read, never written (a test that adds to it copies it first)."""
    start = datetime(2026, 1, 5, 8, 56, tzinfo=UTC)
    root, _ = record_source(_phased(start=start), f"{tmp_path_factory.mktemp('dataset')}/fleet/", 2.0,
                            duration_s=600, fast=True, describe_machine=False, out=None, config=Config(), rotate_s=300)
    return Path(root)


def _stored(path: Path) -> list[tuple[str, str] | None]:
    rows = pq.read_table(path, columns=["verdict"]).column("verdict").to_pylist()
    return [None if v is None else (v["pattern"], v["bottleneck"]) for v in rows]


def _recomputed(path: Path, config: Config) -> list[tuple[str, str]]:
    """What `diagnose FILE` gives at every tick (its streamed engine at a stride of one)."""
    jd = judge(iter_batches(path), config.thresholds, config.window_s, stride=1)
    assert jd.points.tolist() == list(range(len(jd.raws)))
    return [(v.pattern, v.bottleneck) for v in jd.raws]


def test_record_stores_every_ticks_raw_verdict_as_diagnose_recomputes_it(phased_run: Path) -> None:
    config = Config()
    path = phased_run  # record_source of the phased source, 1000 s with the defaults
    stored = _stored(path)
    assert len(stored) == open_trace(path).n == 500 and None not in stored
    assert stored == _recomputed(path, config)
    assert {b for _, b in stored} >= {"none", "data_pipeline", "storage_io"}  # it saw the regimes change
    first = open_trace(path).tick(0).verdict
    assert first is not None and first.pattern == "collecting"  # the window starts with the file
    later = open_trace(path).tick(250).verdict  # mechanism, confidence word and cards come along
    assert later is not None and later.bottleneck == "data_pipeline" and later.confidence in ("likely", "possible")
    assert later.mechanism and later.gpus == [0, 1]


@pytest.mark.slow
def test_a_dataset_starts_each_files_window_afresh_as_diagnose_file_does(phased_dataset: Path) -> None:
    config = Config()
    root, ticks = phased_dataset, 300  # 600 s from 08:56, a rotation every 5 minutes
    files = sorted(Path(root).rglob("*.parquet"))
    assert len(files) >= 3
    for f in files:
        stored = _stored(f)
        assert stored[0] is not None and stored[0][0] == "collecting"
        assert stored == _recomputed(f, config), f
    assert sum(len(_stored(f)) for f in files) == ticks


def test_a_gap_restarts_the_window_and_a_failed_diagnosis_costs_only_that_ticks_verdict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = Config()
    source = _Skipping(_phased(), jump_at=200, broken={50, 51, 52})
    with caplog.at_level(logging.DEBUG, logger="gpu_triage"):
        path, ticks = record_source(source, tmp_path / "run.parquet", 2.0, duration_s=600, fast=True,
                                    describe_machine=False, out=None, config=config)
    assert ticks == 300 and open_trace(path).n == 300  # every tick recorded
    stored = _stored(path)
    assert [i for i, v in enumerate(stored) if v is None] == [49, 50, 51]
    failures = [r for r in caplog.records if "diagnosing the tick at" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR  # said once
    assert stored[200] is not None and stored[200][0] == "collecting"  # afresh after the 10-minute gap
    # after the gap the window holds what diagnose FILE's holds: the verdicts agree tick for tick
    assert stored[200:] == _recomputed(path, config)[200:]


def test_offline_verdicts_chain_the_engine_s_error_to_the_one_they_raise() -> None:
    """offline.judge.verdicts raises where a tick's diagnosis failed: its traceback carries the engine's own
    exception (``raise ... from``), not only its text."""
    from gpu_triage.offline.judge import verdicts

    config = Config()
    source = _Skipping(_phased(), jump_at=10**9, broken={5})
    ticks = [source.sample() for _ in range(8)]
    with pytest.raises(RuntimeError, match="diagnosing the tick at") as caught:
        verdicts(ticks, 2.0, config.thresholds, config.window_s, 8)
    cause = caught.value.__cause__
    assert cause is not None and type(cause).__name__ in str(caught.value)


def _exported(rec: RetryingRecording, source: SimulatedSource, n: int, config: Config) -> None:
    """``n`` ticks through export's own path: one judge for the metrics and the recording."""
    monitor = Monitor(source.host_info(), config, source.name, 2.0)
    for _ in range(n):
        take(monitor, rec, source.sample())
    rec.close()


def test_export_record_stores_verdicts_too(tmp_path: Path) -> None:
    source = _phased()
    _exported(RetryingRecording(str(tmp_path), source, 2.0, None, Config()), source, 40, Config())
    (f,) = sorted(tmp_path.rglob("*.parquet"))
    stored = _stored(f)
    assert len(stored) == 40 and None not in stored and stored[0] == ("collecting", "none")


# diagnose DIR --summary: stored verdicts read, the rest recomputed, and both agree


def _changes(root: Path) -> int:
    """How many times the stored bottleneck changes from one tick to the next, within each file."""
    total = 0
    for f in Path(root).rglob("*.parquet"):
        b = [v[1] for v in _stored(f) if v is not None]
        total += sum(1 for x, y in zip(b, b[1:], strict=False) if x != y)
    return total


@pytest.mark.slow
def test_the_summary_read_from_stored_verdicts_agrees_with_the_recomputed_one(tmp_path: Path) -> None:
    """Stored verdicts count every tick for its own verdict; the recomputation counts each 30 s span for the
    verdict at its last tick. The two differ only in the spans where the verdict changed: each change moves at
    most one span (STRIDE_S) from one bottleneck to another, so a bottleneck's share differs by at most
    changes x 30 s / the recorded time (plus the shares' rounding to 4 decimals, twice)."""
    from gpu_triage.fleet_history.summary import STRIDE_S, summarise

    config = Config()
    schedule = [("healthy", 1200.0), ("data_pipeline", 1500.0), ("storage_io", 900.0)]
    # 5 s ticks: the hour (and so the bound below) of 2 s ticks for 40 % of the recorder's cost; the 30 s stride
    # is 6 ticks
    source = SimulatedSource(gpus=4, cores=8, seed=5, interval_s=5.0, start=datetime(2026, 1, 5, 8, 40, tzinfo=UTC),
                             schedule=schedule)
    root, ticks = record_source(source, f"{tmp_path}/fleet/", 5.0, duration_s=3600, fast=True,
                                describe_machine=False, out=None, config=config, rotate_s=900)
    files = sorted(Path(root).rglob("*.parquet"))
    stored = summarise(str(root), config)
    recomputed = summarise(str(root), config, use_stored=False)
    assert stored["recomputed_files"] == 0 and recomputed["recomputed_files"] == len(files) >= 4
    (host,) = stored["hosts"]
    a, b = stored["hosts"][host], recomputed["hosts"][host]
    assert a["seconds"] == pytest.approx(b["seconds"], abs=1e-3) == pytest.approx(ticks * 5.0, abs=1e-3)
    assert a["files"] == b["files"] == len(files)
    bound = _changes(root) * STRIDE_S / a["seconds"] + 2e-4
    assert bound < 0.05  # regimes of minutes: the comparison is a tight one
    assert len(a["bottlenecks"]) >= 3, a["bottlenecks"]
    for name in set(a["bottlenecks"]) | set(b["bottlenecks"]):
        assert a["bottlenecks"].get(name, 0.0) == pytest.approx(b["bottlenecks"].get(name, 0.0), abs=bound), name
    # the same GPU-Util windows (read the same way whichever way the verdicts came)
    assert [(w["start"], w["gpu_util_pct"]) for w in a["worst_windows"]] == [
        (w["start"], w["gpu_util_pct"]) for w in b["worst_windows"]]
    assert set(a["owners"]) == set(b["owners"]) and a["owners"]
    for owner, o in a["owners"].items():
        assert o["seconds"] == pytest.approx(b["owners"][owner]["seconds"], abs=STRIDE_S * len(files))


def test_the_summary_says_which_files_it_recomputed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], phased_dataset: Path
) -> None:
    import shutil

    from gpu_triage.cli import main
    from gpu_triage.commands.summary import recomputed_line
    from gpu_triage.storage.dataset import DatasetWriter

    shutil.copytree(phased_dataset, tmp_path / "fleet")
    assert main(["diagnose", f"{tmp_path}/fleet", "--summary"]) == 0
    assert "no stored verdicts" not in capsys.readouterr().out  # every file has its verdicts
    source = SimulatedSource("storage_io", gpus=2, seed=1, start=START)
    writer = DatasetWriter(tmp_path / "fleet", source.host_info(), 2.0, hostname="old01")  # no verdicts
    for _ in range(200):
        writer.append(source.sample())
    writer.close()
    assert main(["diagnose", f"{tmp_path}/fleet", "--summary"]) == 0
    out = capsys.readouterr().out
    files = len(list((tmp_path / "fleet").rglob("*.parquet")))
    assert files == 4  # the phased dataset's three and old01's
    assert f"1 of {files} files has no stored verdicts, or verdicts judged with other settings: recomputed (" in out
    assert "old01: 0:06:40 of data in 1 files" in out and "storage_io" in out
    hint = recomputed_line(1, 2, 3.04, compact=True)
    assert hint.endswith("(3.0 s); `gpu-triage compact DIR` stores them for finished days")
    assert recomputed_line(1, 1, 3.0, compact=False).startswith(
        "its file has no stored verdicts, or verdicts judged with other settings: recomputed (3.0 s); ")
    assert recomputed_line(3, 25, 41.0, compact=False).startswith("3 of 25 files have no stored verdicts")


def test_a_v1_recording_is_recomputed_and_summarised_as_before() -> None:
    from gpu_triage.fleet_history.summary import summarise

    path = Path(__file__).parent / "data" / "h200-gen-2s.parquet"
    result = summarise(str(path), Config())
    assert result["recomputed_files"] == 1 and result["files"] == 1
    (host,) = result["hosts"].values()
    assert host["seconds"] == pytest.approx(174 * 2.0, rel=0.05)
    assert sum(host["bottlenecks"].values()) == pytest.approx(1, abs=1e-3)


def test_owners_from_dictionary_codes_are_the_general_paths_owners(tmp_path: Path) -> None:
    """The summary's fast owner pass (bit sets over the processes' dictionary codes) names each tick's owners
    exactly as owners.owner_ticks does: several jobs at once, pods, containers, users, ticks without any."""
    import polars as pl

    from gpu_triage.fleet_history.owners import owner_ticks, tick_owners
    from gpu_triage.fleet_history.perfile import _projected
    from gpu_triage.model import ProcSample
    from gpu_triage.trace.writer import TraceWriter

    kinds = [
        {"slurm_job": "4242", "user": "alice"},
        {"pod_uid": "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "pod_name": "bert-0", "pod_namespace": "ml"},
        {"container": "containerd://" + "a" * 64},
        {"user": "bob"},
        {},  # no owner at all
    ]
    source = SimulatedSource("healthy", gpus=2, seed=2, start=START)
    writer = TraceWriter(tmp_path / "owners.parquet", source.host_info(), 2.0)
    for i in range(300):
        tick = source.sample()
        picked = [kinds[(i // 7 + j) % len(kinds)] for j in range(i % 4)]  # 0 to 3 processes, shifting owners
        procs = [ProcSample(100 + j, j % 2, "python", **k) for j, k in enumerate(picked)]  # type: ignore[arg-type]
        writer.append(dataclasses.replace(tick, procs=procs))
    path = writer.close()
    table, _ = _projected(path, with_verdicts=False)
    fast = tick_owners(pl, table)
    general = owner_ticks(path, "").select("ts", "owner")
    assert fast.height > 100 and fast["owner"].str.contains(" + ", literal=True).any()
    assert fast.sort("ts").to_dicts() == general.sort("ts").to_dicts()


def test_collecting_ticks_count_for_the_verdict_after_them(tmp_path: Path) -> None:
    """The first ticks of each file read "collecting" (no verdict before the window holds warmup_s): they are
    no verdict, and count for the first one after them, as the recomputation counts them; a steady regime is
    then all its own bottleneck, not a sliver of "none" per file."""
    from gpu_triage.fleet_history.summary import summarise

    source = SimulatedSource("data_pipeline", gpus=2, seed=4, interval_s=5.0,  # 15 minutes in 180 ticks
                             start=datetime(2026, 1, 5, 8, 50, tzinfo=UTC))
    root, _ = record_source(source, f"{tmp_path}/fleet/", 5.0, duration_s=900, fast=True,
                            describe_machine=False, out=None, config=Config(), rotate_s=300)
    files = sorted(Path(root).rglob("*.parquet"))
    assert len(files) >= 3 and all(_stored(f)[0] == ("collecting", "none") for f in files)
    (host,) = summarise(str(root), Config())["hosts"].values()
    assert host["bottlenecks"] == {"data_pipeline": 1.0}


def test_a_stored_verdict_from_anyone_is_cleaned_and_a_misshapen_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], phased_run: Path
) -> None:
    """A recording is outside input: a bottleneck holding a terminal escape reaches the summary cleaned, and a
    verdict column of the wrong type is not taken as stored verdicts: the reader's one line, never a
    traceback."""
    import pyarrow as pa

    from gpu_triage.cli import main
    from gpu_triage.fleet_history.summary import summarise

    table = pq.read_table(phased_run)
    meta = table.schema.metadata
    verdict = table.column("verdict").combine_chunks()
    evil = pa.array(["none\x1b]0;owned\x07"] * len(verdict))
    fields = [evil if verdict.type.field(i).name == "bottleneck" else verdict.field(i)
              for i in range(verdict.type.num_fields)]
    planted = table.set_column(table.schema.get_field_index("verdict"), "verdict",
                               pa.StructArray.from_arrays(fields, fields=list(verdict.type)))
    pq.write_table(planted.replace_schema_metadata(meta), tmp_path / "evil.parquet")
    result = summarise(str(tmp_path / "evil.parquet"), Config())
    assert result["recomputed_files"] == 0
    (host,) = result["hosts"].values()
    assert all("\x1b" not in b and "\x07" not in b for b in host["bottlenecks"]), host["bottlenecks"]
    numbers = pa.StructArray.from_arrays([pa.array(range(len(verdict)))], names=["bottleneck"])
    misshapen = table.set_column(table.schema.get_field_index("verdict"), "verdict", numbers)
    pq.write_table(misshapen.replace_schema_metadata(meta), tmp_path / "odd.parquet")
    capsys.readouterr()
    assert main(["diagnose", str(tmp_path / "odd.parquet"), "--summary"]) == 2
    err = capsys.readouterr().err
    assert "odd.parquet" in err and "cannot be read" in err and "Traceback" not in err


# the settings a file's verdicts were judged with: the summary takes them only under the same settings


def _host_meta(path: Path) -> dict:
    import json

    return json.loads(pq.read_schema(path).metadata[b"gpu_triage.host"])


def _tuned() -> Config:
    from gpu_triage.diagnosis.thresholds import Thresholds

    return Config(thresholds=dataclasses.replace(Thresholds(), idle_util_pct=7.5))


def test_stored_verdicts_are_read_only_under_the_settings_that_judged_them(
    tmp_path: Path, phased_dataset: Path
) -> None:
    """`diagnose DIR --summary --window 600` or `--config tuned.toml` reads every file with its own settings:
    a file whose verdicts were judged with others is recomputed, as one without verdicts is."""
    from gpu_triage.fleet_history.summary import summarise
    from gpu_triage.verdicts.settings import settings, thresholds_digest

    root = phased_dataset
    files = sorted(Path(root).rglob("*.parquet"))
    for f in files:
        assert _host_meta(f)["verdicts"] == {"window_s": 300.0, "thresholds": thresholds_digest(Config().thresholds)}
    assert summarise(str(root), Config())["recomputed_files"] == 0
    assert summarise(str(root), Config(window_s=600.0))["recomputed_files"] == len(files)
    assert summarise(str(root), _tuned())["recomputed_files"] == len(files)
    assert thresholds_digest(_tuned().thresholds) != thresholds_digest(Config().thresholds)
    assert thresholds_digest(dataclasses.replace(Config().thresholds, idle_util_pct=5)) == thresholds_digest(
        Config().thresholds)  # "5" in a config file is the default 5.0
    # recorded with the tuned settings: read as stored under them, recomputed under the defaults
    tuned, _ = record_source(_phased(), tmp_path / "tuned.parquet", 2.0, duration_s=200, fast=True,
                             describe_machine=False, out=None, config=_tuned())
    assert _host_meta(tuned)["verdicts"] == settings(_tuned().thresholds, 300.0)
    assert summarise(str(tuned), _tuned())["recomputed_files"] == 0
    assert summarise(str(tuned), Config())["recomputed_files"] == 1


def test_verdicts_of_unknown_settings_are_read_only_under_the_defaults(tmp_path: Path, phased_run: Path) -> None:
    """A file recorded before the settings were written down (verdicts, no "verdicts" key): its settings are
    unknown, so its verdicts count only for a reader with the default ones."""
    import json

    from gpu_triage.fleet_history.summary import summarise

    table = pq.read_table(phased_run)
    meta = dict(table.schema.metadata)
    host = json.loads(meta[b"gpu_triage.host"])
    del host["verdicts"]
    meta[b"gpu_triage.host"] = json.dumps(host).encode()
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "old.parquet")
    old = str(tmp_path / "old.parquet")
    assert summarise(old, Config())["recomputed_files"] == 0
    assert summarise(old, Config(window_s=600.0))["recomputed_files"] == 1
    assert summarise(old, _tuned())["recomputed_files"] == 1


def test_export_and_the_dashboard_record_the_settings_too(tmp_path: Path) -> None:
    from gpu_triage.ui.app import TriageApp
    from gpu_triage.verdicts.settings import settings

    config = Config(window_s=120.0)
    source = _phased()
    _exported(RetryingRecording(str(tmp_path / "export"), source, 2.0, None, config), source, 10, config)
    (f,) = sorted((tmp_path / "export").rglob("*.parquet"))
    assert _host_meta(f)["verdicts"] == settings(config.thresholds, 120.0)

    dash = TriageApp(config, source=source, autostart=False)  # headless: never run, its ticks ingested by hand
    dash.recording.start(tmp_path / "dash.parquet")
    assert dash.recording.recorder is not None, dash.recording.error
    for _ in range(10):
        dash.ingest(source.sample(), draw=False)
    path = dash.recording.stop()
    assert path is not None and None not in _stored(path)
    assert _host_meta(path)["verdicts"] == settings(config.thresholds, 120.0)
    assert "verdicts" not in dash.host.extra  # the dashboard's own host is a copy


def _compact_day(root: Path) -> Path:
    from gpu_triage.storage.compact import Options, run

    res = run(root, Options(now=START + timedelta(days=2)))
    assert res.days == 1, res.lines
    (daily,) = sorted(root.rglob("date=*/*.parquet"))
    return daily


@pytest.fixture(scope="module")
def hours(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path, int, bool], None]:
    """Copies into a dataset the 5 minutes of the phased source recorded from ``hour`` with the tuned settings
    or the defaults; each (hour, settings) is recorded once for the module, as `record -o DIR/` writes it."""
    made: dict[tuple[int, bool], Path] = {}

    def copy_into(root: Path, hour: int, tuned: bool) -> None:
        import shutil

        if (hour, tuned) not in made:
            made[hour, tuned] = tmp_path_factory.mktemp(f"hour{hour}-{'tuned' if tuned else 'defaults'}")
            record_source(_phased(start=START + timedelta(hours=hour)), f"{made[hour, tuned]}/", 2.0,
                          duration_s=300, fast=True, describe_machine=False, out=None,
                          config=_tuned() if tuned else Config())
        shutil.copytree(made[hour, tuned], root, dirs_exist_ok=True)

    return copy_into


def test_compact_keeps_the_settings_its_files_agree_on(
    tmp_path: Path, hours: Callable[[Path, int, bool], None]
) -> None:
    from gpu_triage.fleet_history.summary import summarise
    from gpu_triage.verdicts.settings import settings

    root = tmp_path / "fleet"
    for hour in (0, 1):
        hours(root, hour, True)
    daily = _compact_day(root)
    assert _host_meta(daily)["verdicts"] == settings(_tuned().thresholds, 300.0)
    assert summarise(str(root), _tuned())["recomputed_files"] == 0
    assert summarise(str(root), Config())["recomputed_files"] == 1


def test_compact_of_files_judged_with_different_settings_keeps_their_verdicts_and_fits_no_reader(
    tmp_path: Path, hours: Callable[[Path, int, bool], None]
) -> None:
    """One hour judged with the defaults, the next with tuned thresholds: the day keeps every verdict, and its
    metadata says they are mixed, so the summary judges the day again whatever its settings."""
    from gpu_triage.fleet_history.summary import summarise

    root = tmp_path / "fleet"
    for hour, tuned in ((0, False), (1, True)):
        hours(root, hour, tuned)
    carried = [v for f in sorted(root.rglob("*.parquet")) for v in _stored(f)]
    daily = _compact_day(root)
    assert _stored(daily) == carried  # nothing carried is rewritten
    assert "mixed" in _host_meta(daily)["verdicts"]
    for config in (Config(), _tuned()):
        assert summarise(str(root), config)["recomputed_files"] == 1
