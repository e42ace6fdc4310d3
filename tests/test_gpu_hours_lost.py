"""GPU-hours lost (docs/diagnosis.md, "GPU-hours lost"): the one definition (diagnosis/lost.py), the summary's
columnar count of it (fleet/lost.py) on real recordings, and `diagnose DIR --summary` as the lead asks it: ranked
first, a period, several paths and brace globs, jobs across hosts as one, episodes instead of adjacent windows."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.data import H200_TRACE_2S
from gpu_triage.diagnosis.knobs import KNOBS
from gpu_triage.diagnosis.lost import lost_gpu_seconds
from gpu_triage.diagnosis.vocab import Bottleneck
from gpu_triage.fleet_history.summary import expand_braces, summarise
from gpu_triage.model import Tick
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.storage.dataset import DatasetWriter

DATA = Path(__file__).parent / "data"
START = datetime(2026, 1, 5, 9, tzinfo=UTC)


def _write(root: Path, schedule: list[tuple[str, float]], *hosts: str, gpus: int = 2, seed: int = 1) -> None:
    """The schedule's ticks recorded for each of ``hosts``: the same ticks (one seed), simulated once."""
    source = SimulatedSource.from_schedule(schedule, gpus=gpus, seed=seed, start=START)
    writers = [DatasetWriter(root, source.host_info(), 2.0, hostname=host) for host in hosts]
    for _ in range(round(sum(s for _, s in schedule) / 2.0)):
        tick = source.sample()
        for writer in writers:
            writer.append(tick)
    for writer in writers:
        writer.close()


# -- the definition -------------------------------------------------------------------------------------------


def test_a_tick_loses_the_idle_share_of_the_cards_its_verdict_covers() -> None:
    util = {0: 100.0, 1: 20.0, 2: 0.0, 3: None}
    assert lost_gpu_seconds("none", [0, 1], util, 2.0) == 0.0  # no bottleneck: nothing lost
    assert lost_gpu_seconds(None, [], util, 2.0) == 0.0  # no verdict yet
    assert lost_gpu_seconds("data_pipeline", [1], util, 2.0) == pytest.approx(2.0 * 0.8)  # its own cards only
    assert lost_gpu_seconds("data_pipeline", [], util, 2.0) == pytest.approx(2.0 * (0.8 + 1.0))  # none named: all
    # placement: the verdict names the busy card; the loss is the idle ones beside it (a card with no reading adds
    # nothing: the sum over the cards that read, a floor)
    assert lost_gpu_seconds("placement", [0], util, 2.0) == pytest.approx(2.0 * (0.0 + 0.8 + 1.0))
    # a hang loses the whole tick on every card, whatever GPU-Util reads (its kernels spin)
    assert lost_gpu_seconds("hung_collective", [0], util, 2.0) == pytest.approx(2.0 * 4)
    assert lost_gpu_seconds("data_pipeline", [1], util, None) == 0.0  # no time, nothing lost


def test_a_tick_none_of_whose_covered_cards_reads_has_no_figure_not_zero() -> None:
    """Unsupported GPU-Util (MIG, vGPU: None), NaN or a value no card reports: the tick's loss is unknown (None,
    shown n/a), not 0; nothing lost where no bottleneck is named stays 0; a sum of figures is n/a only where it
    knows of nothing lost beside an unknown."""
    assert lost_gpu_seconds("data_pipeline", [1], {1: 250.0}, 2.0) is None  # no card reads 250 %: no reading
    assert lost_gpu_seconds("data_pipeline", [], {0: None, 1: float("nan")}, 2.0) is None
    assert lost_gpu_seconds("placement", [0], {0: None, 1: None}, 2.0) is None
    assert lost_gpu_seconds("data_pipeline", [3], {0: 10.0}, 2.0) is None  # it covers no card of the tick
    assert lost_gpu_seconds("none", [0], {0: None}, 2.0) == 0.0 and lost_gpu_seconds(None, [], {0: None}, 2.0) == 0.0
    assert lost_gpu_seconds("hung_collective", [0], {0: None}, 2.0) == pytest.approx(2.0)  # the whole tick
    from gpu_triage.diagnosis.lost import total

    assert total([None, 0.0]) is None and total([None, 3.0]) == 3.0 and total([0.0, 0.0]) == 0.0


def test_every_bottleneck_has_a_knob() -> None:
    assert set(KNOBS) == {str(b) for b in Bottleneck}
    assert all(KNOBS[b] for b in Bottleneck if b != Bottleneck.NONE)


@pytest.mark.parametrize("name", ["h200-inside-f-0.5s.parquet", "h200-inside-g-2s.parquet"])
def test_the_summarys_columnar_count_is_the_definition_tick_by_tick_on_real_recordings(name: str) -> None:
    """fleet/lost.py counts the stored verdicts of a real H200 recording on its columns; each tick's figure is
    what diagnosis/lost.py (the exporter's counter) gives for that tick read as ticks."""
    import polars as pl

    from gpu_triage.fleet_history.lost import lost_per_row, named_lists
    from gpu_triage.fleet_history.perfile import _projected
    from gpu_triage.trace.reader import open_trace

    path = DATA / name
    table, _ = _projected(path, True)
    trace = open_trace(path)
    ticks = list(trace.ticks(0, trace.n))
    bottlenecks = [t.verdict.bottleneck if t.verdict else None for t in ticks]
    named = [list(t.verdict.gpus) if t.verdict else [] for t in ticks]
    seconds = np.asarray([t.interval_s or 0.0 for t in ticks])
    fast = lost_per_row(table, bottlenecks, named_lists(named), seconds)
    slow = [lost_gpu_seconds(b, n, {g.index: g.util_pct for g in t.gpus}, s)
            for b, n, t, s in zip(bottlenecks, named, ticks, seconds, strict=True)]
    assert fast == pytest.approx([np.nan if v is None else v for v in slow], abs=1e-6, nan_ok=True)
    assert sum(v or 0.0 for v in slow) > 0 and pl.Series(bottlenecks).n_unique() > 2  # real losses, several verdicts


def test_real_recordings_lose_what_their_mechanism_says() -> None:
    """h200x2-cuda0: both ranks on card 0, card 1 idle (placement): at least the idle card's whole time is lost.
    h200x2-stuck: rank 1 hung, rank 0 spinning in all_reduce: both cards' whole time while the hang is judged.
    The fixed loader loses nothing."""
    config = Config()
    cuda0 = summarise(str(DATA / "h200x2-cuda0-1s.parquet"), config, workers=1)["hosts"]["vm"]
    placement_s = cuda0["bottlenecks"]["placement"] * cuda0["seconds"]
    assert cuda0["lost_by_bottleneck"]["placement"] * 3600 >= 0.95 * placement_s  # the idle card, all of it
    assert cuda0["gpu_hours_lost"] <= cuda0["gpu_hours"]
    stuck = summarise(str(DATA / "h200x2-stuck-1s.parquet"), config, workers=1)["hosts"]["vm"]
    hung_s = stuck["bottlenecks"]["hung_collective"] * stuck["seconds"]
    assert stuck["lost_by_bottleneck"]["hung_collective"] * 3600 == pytest.approx(2 * hung_s, rel=0.02)
    fixed = summarise(str(DATA / "h200x2-pulse-2card-fixed-1s.parquet"), config, workers=1)
    assert fixed["gpu_hours_lost"] == 0.0 and fixed["ranking"]["hosts"][0]["bottleneck"] == "none"


# -- the summary the lead asks for ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_summary_ranks_hosts_and_jobs_across_hosts_by_gpu_hours_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two hosts run the same Slurm jobs (100 starved, then 101 healthy), a third its job 100 healthy: the ranking
    comes first, the starved hosts on top with data_pipeline and its knob, job 100 one row over its three hosts."""
    _write(tmp_path, [("data_pipeline", 900), ("healthy", 900)], "gpu01", "gpu02")
    _write(tmp_path, [("healthy", 1800)], "gpu03", seed=3)
    result = summarise(str(tmp_path), Config())
    hosts = result["ranking"]["hosts"]
    assert [h["host"] for h in hosts][2] == "gpu03" and hosts[2]["gpu_hours_lost"] < 0.1 * hosts[0]["gpu_hours_lost"]
    assert {h["host"] for h in hosts[:2]} == {"gpu01", "gpu02"}
    assert hosts[0]["bottleneck"] == "data_pipeline" and hosts[0]["knob"] == KNOBS["data_pipeline"]
    assert result["gpu_hours_lost"] == pytest.approx(sum(h["gpu_hours_lost"] for h in hosts), abs=1e-3)
    job = result["ranking"]["owners"][0]
    assert job["owner"] == "slurm 100" and job["hosts"] == ["gpu01", "gpu02", "gpu03"]
    assert job["bottleneck"] == "data_pipeline"
    # the job's loss is its two hosts' data_pipeline loss, within what the healthy phase's edge adds
    assert job["gpu_hours_lost"] == pytest.approx(
        sum(result["hosts"][h]["lost_by_bottleneck"]["data_pipeline"] for h in ("gpu01", "gpu02")), rel=0.1)
    # one data_pipeline episode of ~15 minutes, not three adjacent 5-minute windows of it
    (first, *_) = result["hosts"]["gpu01"]["worst_windows"]
    assert first["bottleneck"] == "data_pipeline" and first["seconds"] >= 600
    starts = [w["start"] for w in result["hosts"]["gpu01"]["worst_windows"]]
    assert len(set(starts)) == len(starts)
    # its healthy half is no "worst" episode beside the starved one; a host with nothing else shows its own
    assert all(w["bottleneck"] != "none" for w in result["hosts"]["gpu01"]["worst_windows"])
    assert result["hosts"]["gpu03"]["worst_windows"][0]["bottleneck"] == "none"

    assert main(["diagnose", str(tmp_path), "--summary", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert out.index("what to fix first") < out.index("slurm 100 (3 hosts)") < out.index(f"{hosts[0]['host']}: ")
    assert f"{hosts[1]['host']}: " not in out  # --top 1: one host detailed
    assert "2 more hosts not detailed: --top 3 for each, --json for all" in out
    assert len(out.splitlines()) < 25


@pytest.mark.slow
def test_the_summary_takes_a_period_several_paths_and_brace_globs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, [("storage_io", 1200)], "gpu01", "gpu02", "gpu03")
    config = Config()
    whole = summarise(str(tmp_path), config)["hosts"]["gpu01"]["seconds"]
    half = summarise(str(tmp_path), config, since=START + timedelta(seconds=600))["hosts"]["gpu01"]["seconds"]
    assert half == pytest.approx(whole / 2, abs=35)  # a recomputed span counts by its end: 30 s either side
    braces = str(tmp_path / "host={gpu01,gpu03}" / "**" / "*.parquet")
    assert set(summarise(braces, config)["hosts"]) == {"gpu01", "gpu03"}
    two = [str(tmp_path / "host=gpu02"), str(tmp_path / "host=gpu03")]
    assert set(summarise(two, config)["hosts"]) == {"gpu02", "gpu03"}

    assert main(["diagnose", braces, "--since", "2026-01-05 09:10", "--utc", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["period"] == {"since": "2026-01-05T09:10:00Z", "until": None} and set(got["hosts"]) == {"gpu01", "gpu03"}
    assert main(["diagnose", *two, "--until", "2026-01-05T09:10Z"]) == 0
    assert "2 hosts" in capsys.readouterr().out
    for argv, words in (
        (["--since", "last tuesday"], "--since 'last tuesday': not a time: give a date"),
        (["--since", "2026-01-06", "--until", "2026-01-05"], "is not before --until"),
        (["--since", "2027-01-01"], "none of its 3 files is from since 2027-01-01"),
        (["--since", "999999w"], "--since '999999w': reaches before 1970"),  # past year 1: no OverflowError
    ):
        assert main(["diagnose", str(tmp_path), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert main(["diagnose", str(H200_TRACE_2S), "--since", "7d"]) == 2
    assert "--since is for a dataset's summary" in capsys.readouterr().err


def test_brace_globs_expand_as_the_shell_does() -> None:
    assert expand_braces("h{1,2}/*.parquet") == ["h1/*.parquet", "h2/*.parquet"]
    assert expand_braces("h{a,b{1,2}}x") == ["hax", "hb1x", "hb2x"]
    assert expand_braces("{a,b}{c,d}") == ["ac", "ad", "bc", "bd"]
    assert expand_braces("run{1}.parquet") == ["run{1}.parquet"]  # no comma: not a group


def test_a_brace_glob_past_its_bounds_is_one_short_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A spec of a thousand groups (a recursion a level deep for each) or of a path's length is refused before
    it is expanded, and the line names it cut short."""
    for spec in ("{a,b}" * 1100, "{a,b}" * 12 + "x" * 5000):
        assert main(["diagnose", spec, "--summary"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and len(err[0]) < 300 and "narrow it" in err[0], err


# -- the exporter's counter -----------------------------------------------------------------------------------


def test_the_exporters_counter_adds_up_what_its_recording_summarises(tmp_path: Path) -> None:
    """`export --record`: the monitor judges each tick once for the metrics and the recording. The counter
    gpu_triage_gpu_lost_seconds_total{bottleneck} (every bottleneck from the first tick, no pid label) holds the
    GPU-seconds the summary of that recording counts from its stored verdicts."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpu_triage.export.collector import TriageCollector
    from gpu_triage.export.lost_metric import LOST_BOTTLENECKS
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.verdicts.settings import with_settings

    config = Config()
    source = SimulatedSource.from_schedule([("healthy", 240), ("single_card_busy", 600)], gpus=4, seed=2,
                                           start=START)
    monitor = Monitor(source.host_info(), config, source.name)
    host = with_settings(source.host_info(), config.thresholds, config.window_s)
    writer = DatasetWriter(tmp_path, host, 2.0, hostname="gpu09")
    for _ in range(420):
        tick = source.sample()
        monitor.ingest(tick, source.status(), fresh=writer.opens_file(tick.ts))
        assert monitor.judged is not None
        writer.append(monitor.judged.stamped())
    writer.close()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot))
    counter = {s.labels["bottleneck"]: s.value / 3600
               for fam in text_string_to_metric_families(generate_latest(registry).decode())
               for s in fam.samples if s.name == "gpu_triage_gpu_lost_seconds_total"}
    assert set(counter) == set(LOST_BOTTLENECKS)  # bounded: the vocabulary, each from the first tick
    summary = summarise(str(tmp_path), config)
    assert summary["recomputed_files"] == 0  # read from the stored verdicts, as the recording holds them
    h = summary["hosts"]["gpu09"]
    assert h["lost_by_bottleneck"]["placement"] > 0.5 * 600 * 3 / 3600  # 3 of 4 cards idle, most of 10 minutes
    assert sum(counter.values()) == pytest.approx(h["gpu_hours_lost"], abs=1e-3)
    for b, hours in h["lost_by_bottleneck"].items():
        assert counter[b] == pytest.approx(hours, abs=1e-3)


def _no_gpu_util(tick: Tick) -> Tick:
    """The tick the NVML reader gives once the cards' GPU-Util answers NOT_SUPPORTED (MIG turned on, a vGPU):
    every other field as it was, GPU-Util None."""
    return dataclasses.replace(tick, gpus=[dataclasses.replace(g, util_pct=None) for g in tick.gpus])


def _lost_counters(monitor: Any) -> dict[str, float]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpu_triage.export.collector import TriageCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot))
    return {s.labels.get("bottleneck", s.name): s.value
            for fam in text_string_to_metric_families(generate_latest(registry).decode())
            for s in fam.samples if s.name.startswith("gpu_triage_gpu_lost_")}


def test_a_host_whose_cards_read_no_gpu_util_loses_na_not_zero_and_ranks_after_a_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two starved hosts under `export --record`; gpu02's cards stop answering GPU-Util halfway, and its verdict,
    judged over the window, still names data_pipeline. From then on the exporter's counter does not grow (the
    seconds of no figure do), and the summary of that half says n/a (text) and null (JSON) for the host, its
    owner there and its episode, and ranks it after gpu01, whose cards read, in both of its ways."""
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.verdicts.settings import with_settings

    config = Config()
    half = 150  # ticks of 2 s: the cards stop reading at 5 min, inside the 5-minute window of data_pipeline
    counters: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    source = SimulatedSource.from_schedule([("data_pipeline", 600)], gpus=2, seed=1, start=START)
    simulated = [source.sample() for _ in range(2 * half)]  # both hosts' ticks (one seed), simulated once
    for name, stops in (("gpu01", None), ("gpu02", half)):
        monitor = Monitor(source.host_info(), config, source.name)
        writer = DatasetWriter(tmp_path, with_settings(source.host_info(), config.thresholds, config.window_s),
                               2.0, hostname=name)
        before: dict[str, float] = {}
        for i, tick in enumerate(simulated):
            if i == half:
                before = _lost_counters(monitor)
            if stops is not None and i >= stops:
                tick = _no_gpu_util(tick)
            monitor.ingest(tick, source.status(), fresh=writer.opens_file(tick.ts))
            assert monitor.judged is not None
            writer.append(monitor.judged.stamped())
        writer.close()
        counters[name] = (before, _lost_counters(monitor))
    (b1, a1), (b2, a2) = counters["gpu01"], counters["gpu02"]
    assert a1["data_pipeline"] > b1["data_pipeline"] > 0 and a1["gpu_triage_gpu_lost_unmeasured_seconds_total"] == 0
    assert a2["data_pipeline"] == b2["data_pipeline"] > 0  # not a 0 added as if measured: nothing added
    assert a2["gpu_triage_gpu_lost_unmeasured_seconds_total"] >= 0.8 * half * 2.0  # its ticks of no figure

    since = START + timedelta(seconds=2 * half + 10)
    for use_stored in (True, False):
        result = summarise(str(tmp_path), config, since=since, use_stored=use_stored)
        hosts = result["ranking"]["hosts"]
        assert [h["host"] for h in hosts] == ["gpu01", "gpu02"] and hosts[0]["gpu_hours_lost"] > 0.05
        assert hosts[1]["gpu_hours_lost"] is None and hosts[1]["share_of_lost"] is None
        assert hosts[1]["bottleneck"] == "data_pipeline"  # what it could not measure, with its knob
        gpu02 = result["hosts"]["gpu02"]
        assert gpu02["gpu_hours_lost"] is None and gpu02["lost_by_bottleneck"] == {"data_pipeline": None}
        assert gpu02["owners"]["slurm 100"]["gpu_hours_lost"] is None
        assert [w["gpu_hours_lost"] for w in gpu02["worst_windows"]] == [None]
        assert result["gpu_hours_lost"] == hosts[0]["gpu_hours_lost"]  # the fleet's: a floor, gpu01's figure

    assert main(["diagnose", str(tmp_path), "--summary", "--since", "2026-01-05T09:05:10Z", "--utc"]) == 0
    out = capsys.readouterr().out
    ranked = [line.split() for line in out.splitlines() if line.startswith(("    1 ", "    2 "))][:2]
    assert ranked[0][1] == "gpu01" and ranked[1][1:4] == ["gpu02", "n/a", "GPU-h"], out
    assert "gpu02: 0:04:52 of data in 1 files, n/a GPU-h lost of" in out and "(n/a GPU-h lost)" in out
    assert "0.00 GPU-h" not in out
    assert main(["diagnose", str(tmp_path), "--summary", "--since", "2026-01-05T09:05:10Z", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hosts"]["gpu02"]["gpu_hours_lost"] is None and doc["ranking"]["hosts"][1]["gpu_hours_lost"] is None


# -- the fleet view -------------------------------------------------------------------------------------------


def test_the_fleet_view_reads_the_counter_into_a_column_and_sorts_by_it() -> None:
    from gpu_triage.fleet_live.model import SORTS, build_rows
    from gpu_triage.fleet_live.render import cells, detail_lines
    from gpu_triage.fleet_live.samples import HostData, Sample

    def host(name: str, lost: dict[str, float] | None) -> HostData:
        samples = [Sample("gpu_triage_tick_timestamp_seconds", {}, 1000.0),
                   Sample("gpu_triage_verdict", {"pattern": "steady_high", "bottleneck": "none", "cards": ""}, 1.0)]
        samples += [Sample("gpu_triage_gpu_lost_seconds_total", {"bottleneck": b}, v) for b, v in (lost or {}).items()]
        return HostData(key=name, address=name, time=1001.0, samples=tuple(samples))

    rows = build_rows([host("a", {"data_pipeline": 3600.0, "placement": 7200.0}), host("b", None),
                       host("c", {"storage_io": 36000.0, "placement": 0.0}), host("d", {"placement": 0.0})])
    ranked = sorted(rows, key=SORTS["most GPU-hours lost"])
    assert [r.host for r in ranked] == ["c", "a", "d", "b"]  # most first, the exporter without the counter last
    a = next(r for r in rows if r.host == "a")
    assert a.gpu_hours_lost == pytest.approx(3.0) and a.lost_bottleneck == "placement"
    assert cells(a)["GPU-H LOST"] == "3.00" and cells(ranked[0])["GPU-H LOST"] == "10.0"
    assert cells(ranked[-1])["GPU-H LOST"] == "n/a" and ranked[2].lost_bottleneck is None
    assert any(line.startswith("GPU-hours lost since the exporter started: 3.00, most to placement: one card per rank")
               for line in detail_lines(a))


def test_the_fleet_view_says_na_for_an_exporter_that_measured_nothing_and_sorts_it_after_every_figure() -> None:
    """An exporter whose covered cards read no GPU-Util: its counter at 0 beside seconds of no figure is n/a in
    the GPU-H LOST column and the detail, not 0.00, and `s` puts it after the hosts with a figure (a real 0
    included); one that measured some loss beside them shows that floor."""
    from gpu_triage.fleet_live.model import SORTS, build_rows
    from gpu_triage.fleet_live.render import cells, detail_lines
    from gpu_triage.fleet_live.samples import HostData, Sample

    def host(name: str, lost: float, unmeasured: float) -> HostData:
        samples = (Sample("gpu_triage_tick_timestamp_seconds", {}, 1000.0),
                   Sample("gpu_triage_verdict", {"pattern": "steady_low", "bottleneck": "data_pipeline", "cards": ""},
                          1.0),
                   *(Sample("gpu_triage_gpu_lost_seconds_total", {"bottleneck": b}, lost if b == "data_pipeline"
                            else 0.0) for b in ("data_pipeline", "placement")),
                   Sample("gpu_triage_gpu_lost_unmeasured_seconds_total", {}, unmeasured))
        return HostData(key=name, address=name, time=1001.0, samples=samples)

    rows = build_rows([host("blind", 0.0, 600.0), host("zero", 0.0, 0.0), host("floor", 7200.0, 600.0),
                       host("real", 3600.0, 0.0)])
    by = {r.host: r for r in rows}
    assert by["blind"].gpu_hours_lost is None and cells(by["blind"])["GPU-H LOST"] == "n/a"
    assert cells(by["zero"])["GPU-H LOST"] == "0.00" and cells(by["floor"])["GPU-H LOST"] == "2.00"
    assert [r.host for r in sorted(rows, key=SORTS["most GPU-hours lost"])] == ["floor", "real", "zero", "blind"]
    assert ("GPU-hours lost since the exporter started: n/a (the cards its verdicts covered read no GPU-Util)"
            in detail_lines(by["blind"]))
