"""The headroom beside a verdict, checked on real before/after recordings: the gain the fix measured lies at
or below the bound the BEFORE run predicted, and where the fix removed the whole bottleneck the bound is no
looser than twice the measured gain."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from gpu_triage.diagnosis.vocab import Bottleneck
from tests import real_readings as rr
from x2_runs import lab_run

DATA = Path(__file__).parent / "data"


def _bounds(name: str, bottleneck: str) -> list[float]:
    res = rr.replay(DATA / name)[1]  # the verdicts only: no offline segments
    return [r[1].headroom.factor for r in res
            if r[1].bottleneck == bottleneck and r[1].headroom is not None and r[1].headroom.kind == "bound"]


def _rates(name: str) -> list[float]:
    res = rr.replay(DATA / name)[1]
    got = [r[1].facts.get("job_samples_per_s", math.nan) for r in res]
    return [x for x in got if not math.isnan(x) and x > 0]


def _rate(name: str) -> float:
    return statistics.median(_rates(name))


def _noise(name: str) -> float:
    """The run's own spread of samples/s: interquartile range over median."""
    q1, q2, q3 = statistics.quantiles(_rates(name), n=4)
    return (q3 - q1) / q2


PAIRS = [(f"h200x2-{src}-{n}card-starved{rerun}-1s.parquet", f"h200x2-{src}-{n}card-fixed-1s.parquet")
         for src in ("joblog", "pulse") for n in (1, 2) for rerun in ("", "-rerun") if n == 2 or not rerun]


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_starved_loader_bound_holds_the_measured_gain(before: str, after: str) -> None:
    # the fix (workers) removed the whole wait: the bound holds the gain and is no looser than twice it
    bounds = _bounds(before, Bottleneck.DATA_PIPELINE)
    assert bounds, "the starved run's data-pipeline verdicts carry a bound"
    bound = statistics.median(bounds)
    gain = _rate(after) / _rate(before)  # the job's own clock, samples/s
    # within the noise measured: the starved run's own samples/s spread (7 % on pulse-2card-starved-rerun,
    # whose bound falls 5 % short of its gain)
    assert gain / (1 + _noise(before)) <= bound <= 2 * gain, (bound, gain, _noise(before))


def test_placement_bound_is_cards_over_busy_cards() -> None:
    # every rank on card 0 of two: at most 2x, if the job scales to card 1
    bounds = _bounds("h200x2-cuda0-1s.parquet", Bottleneck.PLACEMENT)
    assert bounds and set(bounds) == {2.0}
    res = rr.replay(DATA / "h200x2-cuda0-1s.parquet")[1]
    hr = next(r[1].headroom for r in res if r[1].bottleneck == Bottleneck.PLACEMENT)
    assert "scales to the idle cards" in hr.line()


def test_fixed_run_has_no_bound_to_win() -> None:
    res = rr.replay(DATA / "h200x2-joblog-1card-fixed-1s.parquet")[1]
    assert all(r[1].headroom is None or r[1].headroom.kind != "bound" for r in res)


def test_a_hang_loses_everything_until_fixed() -> None:
    res = rr.replay(DATA / "h200x2-stuck-1s.parquet")[1]
    hung = [r[1].headroom for r in res if r[1].bottleneck == Bottleneck.HUNG_COLLECTIVE]
    assert hung and all(h.kind == "lost" and h.share == 1.0 and h.factor is None for h in hung)
    assert "until the hang is fixed" in hung[-1].line()


def test_diagnose_json_and_text_carry_the_headroom() -> None:
    _, _, segs = lab_run(DATA / "h200x2-joblog-1card-starved-1s.parquet")
    seg = next(s for s in segs if s.bottleneck == Bottleneck.DATA_PIPELINE)
    got = seg.to_json_obj()["headroom"]
    assert got["kind"] == "bound" and got["factor"] > 1 and got["assumes"] == "the GPU work stays the same " \
        "and the wait goes entirely"
