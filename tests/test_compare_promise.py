"""`compare BEFORE AFTER` prints the gain BEFORE's verdict promised beside the gain measured, on the real
starved-loader recordings and their fixes (h200x2, tests/data): in text and --json, and a measured gain above
the bound is said as a finding, never hidden."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_triage.cli import main

DATA = Path(__file__).parent / "data"
PAIRS = [(f"h200x2-{src}-{n}card-starved{rerun}-1s.parquet", f"h200x2-{src}-{n}card-fixed-1s.parquet")
         for src in ("joblog", "pulse") for n in (1, 2) for rerun in ("", "-rerun") if n == 2 or not rerun]


def _compare(before: str, after: str, capsys, *extra: str) -> str:
    assert main(["compare", str(DATA / before), str(DATA / after), *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_the_promise_and_the_measured_gain_side_by_side(before: str, after: str, capsys) -> None:
    pred = json.loads(_compare(before, after, capsys, "--json"))["prediction"]
    p, m = pred["promised"], pred["measured"]
    assert p["bottleneck"] == "data_pipeline" and p["kind"] == "bound" and p["verdicts"] > 0
    assert m["unit"] == "samples/s" and m["from"] == "the job's clock"  # both runs have the job's clock
    assert m["gain"] == pytest.approx(m["after"] / m["before"])
    # the fix removed the whole wait: at or below the bound within BEFORE's own spread, the bound within 2x
    assert pred["beaten"] is False or pred["within_noise"], pred
    assert p["factor"] <= 2 * m["gain"], pred
    text = _compare(before, after, capsys)
    assert f"promised  up to {p['factor']:.2f}x {p['unit']}" in text
    assert f"measured  {m['gain']:.2f}x samples/s (the job's clock:" in text
    assert ("! the measured gain beats the bound" in text) == pred["beaten"]


def test_a_gain_above_the_bound_is_a_finding_with_what_it_means(capsys) -> None:
    # real runs: the starved one-card job against the fixed two-card one: the fix changed the cards too
    before, after = "h200x2-joblog-1card-starved-1s.parquet", "h200x2-joblog-2card-fixed-1s.parquet"
    pred = json.loads(_compare(before, after, capsys, "--json"))["prediction"]
    assert pred["beaten"] is True and pred["within_noise"] is False
    assert pred["cards"] == {"before": 1, "after": 2}
    assert pred["measured"]["gain"] > pred["promised"]["factor"] * (1 + pred["noise_pct"] / 100)
    line = next(x for x in _compare(before, after, capsys).splitlines() if x.startswith("  ! "))
    assert "beats the bound by" in line and "beyond BEFORE's own spread of samples/s" in line
    assert "the fix changed more than that bottleneck" in line and "here the cards changed too (1 -> 2)" in line


def test_without_the_job_s_clock_the_gain_is_busy_gpu_time(tmp_path: Path, capsys) -> None:
    # the placement recording (trace v1, no job column) against the starved loader: busy GPU time
    pred = json.loads(_compare("h200x2-cuda0-1s.parquet", "h200x2-joblog-2card-fixed-1s.parquet", capsys,
                               "--json"))["prediction"]
    assert pred["promised"]["bottleneck"] == "placement" and pred["promised"]["factor"] == 2.0
    assert pred["measured"]["unit"] == "GPU-busy time" and pred["noise_pct"] is None
    assert pred["measured"]["from"] in ("the cards' mean SM activity", "the cards' mean GPU-Util")
