"""One num_workers recommendation, with its reason in one line, on the real H200 recordings whose labels say
which DataLoader windows are starved (2 or 1 pegged workers, most cores idle), CPU-bound (every core or every
worker busy) and tuned (healthy): a concrete higher number for the starved, never fewer workers (nor "keep at
or below") on a CPU-bound pipeline, and no num_workers change at all for the tuned one."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from gpu_triage.data import H200_TRACE_05S, H200_TRACE_2S, judged_ticks, labels_for
from gpu_triage.offline.judge import load_trace
from tests import real_readings as rr

DATA = Path(__file__).parent / "data"
TRACES = {"2s": H200_TRACE_2S, "0.5s": H200_TRACE_05S,
          **{n: DATA / f"h200-{n}.parquet" for n in ("own-2s", "own-0.5s", "gen-2s", "gen-0.5s")}}
REC = re.compile(r"num_workers=(\d+)\) \(now (\d+)\)")


@cache
def _run(name: str):  # type: ignore[no-untyped-def]
    return load_trace(TRACES[name]), rr.replay(TRACES[name])[1]


def _advice(name: str, scenario: str) -> list[list[str]]:
    tr, res = _run(name)
    lab = next(x for x in json.loads(labels_for(TRACES[name]).read_text()) if x["scenario"] == scenario)
    return [res[i][1].advice + res[i][2].advice for i in judged_ticks(lab, [t.ts for t in tr.ticks], tr.interval_s)]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TRACES))
def test_starved_workers_get_one_concrete_higher_number_with_its_reason(name: str) -> None:
    ticks = _advice(name, "dataloader_starved")
    assert ticks
    for advice in ticks:
        recs = [(a, REC.search(a)) for a in advice if a.startswith("DataLoader(num_workers=")]
        for a, m in recs:
            assert m is not None and int(m.group(1)) > int(m.group(2)), a
            assert "pegged" in a and "cores idle" in a, a
    assert any(a.startswith("DataLoader(num_workers=") for advice in ticks for a in advice)


@pytest.mark.parametrize("name", list(TRACES))
def test_a_cpu_bound_pipeline_is_never_told_to_cut_workers(name: str) -> None:
    ticks = _advice(name, "dataloader_cpu_saturated")
    lines = [a for advice in ticks for a in advice if "num_workers" in a or "more workers" in a]
    assert lines
    for a in lines:
        assert "at or below" not in a and "fewer workers" not in a, a
        assert "will not help" in a, a
        m = REC.search(a)
        assert m is None or int(m.group(1)) >= int(m.group(2)), a


@pytest.mark.parametrize("name", list(TRACES))
def test_the_tuned_window_gets_no_num_workers_change(name: str) -> None:
    for advice in _advice(name, "dataloader_tuned"):
        assert not any("num_workers" in a for a in advice), advice
