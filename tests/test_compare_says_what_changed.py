"""compare leads with what changed, writes percentages' changes in points, and leaves out what did not change.

On the real H200 recordings in tests/data: the starved -> fixed pair of docs/h200.md (samples/s from the
job's own clock), two runs without job data (GPU-Util and the bottleneck), and a file against itself.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpu_triage.cli import main
from gpu_triage.compare.changes import PP_FLOOR, changed
from gpu_triage.compare.runs import CARD_METRICS, HOST_METRICS, compare_traces
from gpu_triage.compare.text import render_text
from gpu_triage.config import Config
from gpu_triage.trace.reader import open_trace

DATA = Path(__file__).parent / "data"
STARVED = DATA / "h200x2-pulse-1card-starved-1s.parquet"
FIXED = DATA / "h200x2-pulse-1card-fixed-1s.parquet"


@cache
def _compare(a: Path, b: Path, trim: bool = True) -> dict[str, Any]:
    return compare_traces(open_trace(a), open_trace(b), Config(), trim=trim)


def _row(text: str, label: str, block: str = "all cards") -> str:
    lines = text.splitlines()
    start = lines.index(block)
    return next(ln for ln in lines[start:] if ln.strip().startswith(label))


def test_the_fix_leads_with_samples_per_s_and_the_bottleneck_that_went() -> None:
    result = _compare(STARVED, FIXED)
    text = render_text(result)
    # the starved run's start-up and teardown (no step taken) are left out: it was starved all the time it ran
    assert text.splitlines()[0] == ("samples/s +257 % (469 -> 1676): the input pipeline is no longer the bottleneck "
                                    "(100 % of the time before)")
    assert result["headline"] == {"text": text.splitlines()[0], "basis": "samples_per_s", "changed": True}


def test_without_the_jobs_clock_the_headline_is_gpu_util_in_points_and_the_bottleneck() -> None:
    line = render_text(_compare(DATA / "h200x2-loader0-1s.parquet", DATA / "h200x2-h2d-1s.parquet")).splitlines()[0]
    # loader0 has no tick with a card at work (compared whole); h2d's idle start and end are left out;
    # num_workers=0 without its stacks or its clock is not claimed as the input pipeline (host_or_input)
    assert line.startswith("GPU-Util +11 pp (0 -> 11 %): the bottleneck moved from the training process's own CPU "
                           "work or its in-process loading to the input pipeline"), line
    result = _compare(DATA / "h200x2-loader0-1s.parquet", DATA / "h200x2-h2d-1s.parquet")
    assert result["headline"]["basis"] == "util_mean_pct"


def test_percentages_change_by_points_not_by_percent_of_a_percentage() -> None:
    result = _compare(STARVED, FIXED)
    util = result["overall"]["util_mean_pct"]
    assert util["unit"] == "%" and util["change_unit"] == "pp"
    assert util["change_pct"] == pytest.approx(268, abs=1)  # --json keeps the relative figure too
    row = _row(render_text(result), "GPU-Util mean %")
    assert row.split()[-2:] == ["+33.3", "pp"] and "%" not in row.split()[-1], row  # no "+268%"
    wait = _row(render_text(result), "data wait %", "job (the training's own clock)")
    assert wait.split()[-2:] == ["-92.3", "pp"], wait
    sps = result["job"]["metrics"]["samples_per_s"]
    assert sps["unit"] == sps["change_unit"] == "samples/s"
    assert _row(render_text(result), "samples/s", "job (the training's own clock)").endswith("+257.0%")
    mem = result["overall"]["mem_used_mean_bytes"]
    assert mem["unit"] == mem["change_unit"] == "bytes"
    assert result["overall"]["power_mean_w"]["unit"] == "W"
    assert result["diagnosis"]["single_card_busy/data_pipeline"]["change_unit"] == "pp"


def test_rounding_noise_reads_unchanged_and_is_left_out() -> None:
    result = _compare(STARVED, FIXED, trim=False)  # whole: trimmed, the idle card's PCIe moves 2.5 %
    iowait = result["host"]["iowait_mean_pct"]
    assert abs(iowait["change"]) < 0.1 and not iowait["changed"]  # "0.0 0.0 -0.0 -98%" before
    assert not result["cards"]["1"]["power_mean_w"]["changed"]  # 79.6 -> 79.6 W (-0.1)
    text = render_text(result)
    host = text.splitlines()[text.splitlines().index("host"):]
    assert not any(ln.strip().startswith("iowait mean %") for ln in host[:8])
    assert any(ln.startswith("  unchanged: iowait mean %") for ln in host[:8])
    # the idle card: no table of zeros, one line
    assert "card 1" not in text.splitlines() and "card 1: unchanged" in text.splitlines()
    assert "card 0" in text.splitlines()  # the card that did change keeps its table
    assert "--all shows every figure" in text


@pytest.mark.parametrize(("unit", "before", "after", "expected"), [
    ("%", 50.0, 50.0 + PP_FLOOR * 0.99, False), ("%", 50.0, 50.0 + PP_FLOOR, True), ("%", 0.0, 0.04, False),
    ("samples/s", 1000.0, 1019.0, False), ("samples/s", 1000.0, 1021.0, True), ("W", 0.0, 0.0, False),
    ("bytes", None, None, False), ("bytes", None, 5.0, True),
])
def test_the_noise_floor(unit: str, before: float | None, after: float | None, expected: bool) -> None:
    assert changed({"before": before, "after": after}, unit) is expected


def test_all_shows_every_figure() -> None:
    text = render_text(_compare(STARVED, FIXED), show_all=True)
    lines = text.splitlines()
    for label in [lbl for _k, lbl in CARD_METRICS]:
        assert _row(text, label)  # every figure of all cards, unchanged ones too
    for label in [lbl for _k, lbl in HOST_METRICS]:
        assert _row(text, label, "host")
    assert "card 1" in lines and not any(ln.startswith("  unchanged:") for ln in lines)


def test_a_file_against_itself_says_no_change(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(FIXED), str(FIXED)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("no change: every figure is within its noise floor")
    assert "all cards" not in out and not any("before" in ln and "after" in ln and "change" in ln for ln in out)
    assert main(["compare", str(FIXED), str(FIXED), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["headline"]["changed"] is False and result["headline"]["basis"] is None
    rows = [*result["job"]["metrics"].values(), *result["overall"].values(), *result["host"].values(),
            *result["diagnosis"].values(), *(c for card in result["cards"].values() for c in card.values())]
    assert rows and not any(c["changed"] for c in rows)
    assert all({"before", "after", "change", "change_pct", "unit", "change_unit"} <= set(c) for c in rows)
    assert main(["compare", str(FIXED), str(FIXED), "--all"]) == 0
    assert "all cards" in capsys.readouterr().out.splitlines()


def test_datasets_say_it_the_same_way(tmp_path: Path) -> None:
    from gpu_triage.fleet_history.compare import compare_datasets

    for name, f in (("before", STARVED), ("after", FIXED)):
        (tmp_path / name).mkdir()
        shutil.copy(f, tmp_path / name / f.name)
    result = compare_datasets(str(tmp_path / "before"), str(tmp_path / "after"), Config())
    # a dataset is compared whole (it holds many runs: the idle between them is the fleet's time)
    assert result["headline"] == _compare(STARVED, FIXED, trim=False)["headline"]
    assert result["overall"]["util_mean_pct"]["change_unit"] == "pp"
    assert render_text(result).splitlines()[0].startswith("samples/s +257 %")


def test_scaling_runs_lead_with_samples_per_s_and_the_scaling() -> None:
    result = _compare(DATA / "h200x2-pulse-1card-fixed-1s.parquet", DATA / "h200x2-pulse-2card-fixed-1s.parquet")
    assert result["headline"]["text"] == ("samples/s +85 % (1676 -> 3103): 2 cards give 1.85x one card: 93 % scaling "
                                          "efficiency; no bottleneck before or after")


def _shares(before: dict[str, float], after: dict[str, float]) -> dict[str, dict[str, float]]:
    return {k: {"before": before.get(k, 0.0), "after": after.get(k, 0.0)} for k in sorted(set(before) | set(after))}


@pytest.mark.parametrize(("before", "after", "said"), [
    ({"sawtooth/data_pipeline": 40.0, "steady_low/data_pipeline": 30.0, "steady_high/none": 30.0},
     {"steady_high/none": 100.0}, "the input pipeline is no longer the bottleneck (70 % of the time before)"),
    ({"sawtooth/data_pipeline": 80.0, "idle/none": 20.0}, {"idle/storage_io": 60.0, "steady_high/none": 40.0},
     "the bottleneck moved from the input pipeline to storage I/O (60 % of the time)"),
    ({"steady_high/none": 100.0}, {"steady_high/communication": 55.0, "steady_high/none": 45.0},
     "communication between the cards became the bottleneck (55 % of the time)"),
    ({"idle/storage_io": 50.0, "idle/none": 50.0}, {"idle/storage_io": 20.0, "idle/none": 80.0},
     "storage I/O is still the bottleneck, 50 -> 20 % of the time"),
    ({"steady_high/none": 95.0, "idle/storage_io": 5.0}, {"steady_high/none": 100.0},
     "no bottleneck before or after"),  # 5 % of the time is no run's bottleneck
])
def test_what_happened_to_the_dominant_bottleneck(before: dict[str, float], after: dict[str, float],
                                                  said: str) -> None:
    from gpu_triage.compare.changes import bottleneck_change

    assert bottleneck_change(_shares(before, after)) == said


@pytest.mark.slow
def test_cards_that_changed_alike_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_triage.hostmeta import recorder_extra
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.trace.writer import TraceWriter

    paths = []
    for scenario in ("healthy", "data_pipeline"):
        source = SimulatedSource(scenario, gpus=8, cores=32, seed=1, interval_s=2.0)
        host = source.host_info()
        host.extra.update(recorder_extra(source.name, 2.0, environ={}))
        writer = TraceWriter(tmp_path / f"{scenario}.parquet", host, 2.0)
        for _ in range(150):
            writer.append(source.sample())
        paths.append(str(writer.close()))
    assert main(["compare", *paths]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "cards 0, 1, 2, 3, 4, 5, 6, 7: as all cards" in out and not any(ln.startswith("card ") for ln in out)
    assert out[0].startswith("GPU-Util -64 pp (98 -> 34 %): the input pipeline became the bottleneck"), out[0]
    assert len(out) < 45  # was ~130 lines, 8 tables of the same change


@pytest.mark.parametrize("source", ["pulse", "joblog"])
def test_start_up_and_teardown_are_left_out_and_said(source: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #33: on the 2-card pair the headline was "a hung collective is no longer the bottleneck": the
    starved run's last 30 s, both ranks spinning after its last step, beside "time stalled +15 pp" and a 3.4x
    speed-up. Each run's idle start and end (no step taken) are left out now, and the report says so."""
    starved, fixed = (DATA / f"h200x2-{source}-2card-{k}-1s.parquet" for k in ("starved", "fixed"))
    assert main(["compare", str(starved), str(fixed)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "the input pipeline is no longer the bottleneck" in out[0] and "hung collective" not in out[0], out[0]
    left = [ln.strip() for ln in out if ln.strip().startswith("left out:")]
    assert len(left) == 2 and left[0].startswith("left out: 23 s before and 2") and "no progress" in left[0]
    stalled = _row("\n".join(out), "time stalled %")
    assert float(stalled.split()[-2]) < 5, stalled  # was +15.1 pp beside the speed-up
    assert main(["compare", str(starved), str(fixed), "--json"]) == 0
    trimmed = json.loads(capsys.readouterr().out)["before"]["trimmed"]
    assert trimmed["start_ticks"] == 23 and trimmed["end_ticks"] >= 28 and trimmed["by"] == "the job made no progress"
