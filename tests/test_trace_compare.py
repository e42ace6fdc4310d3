"""compare: sensible deltas on real and simulated recordings, stable JSON keys, metadata differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.compare.runs import CARD_METRICS, HOST_METRICS, compare_traces
from gpu_triage.compare.text import render_text
from gpu_triage.config import Config
from gpu_triage.data import H200_TRACE_05S, H200_TRACE_2S
from gpu_triage.hostmeta import recorder_extra
from gpu_triage.sources import sim
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter


def _record_sim(path: Path, scenario: str, env: dict[str, str], ticks: int = 150) -> Path:
    source = sim.SimulatedSource(scenario, gpus=2, cores=16, seed=1, interval_s=2.0)
    host = source.host_info()
    host.extra.update(recorder_extra(source.name, 2.0, environ=env))
    writer = TraceWriter(path, host, 2.0)
    for _ in range(ticks):
        writer.append(source.sample())
    return writer.close()


@pytest.mark.slow
def test_same_real_run_at_two_intervals_agrees() -> None:
    result = compare_traces(open_trace(H200_TRACE_2S), open_trace(H200_TRACE_05S), Config())
    overall = result["overall"]
    assert set(overall) == {k for k, _ in CARD_METRICS}
    # One workload recorded at 2 s and at 0.5 s: the means agree, only the sampling differs.
    assert abs(overall["util_mean_pct"]["change"]) < 1.0
    assert abs(overall["sm_active_mean_pct"]["change"]) < 1.0
    assert overall["nvlink_mean_bytes_per_s"]["before"] is None  # one H200 without NVLink: n/a, not 0
    assert list(result["cards"]) == ["0"]
    assert result["metadata_differences"] == {"interval_s": {"before": 2.0, "after": 0.5}}
    trimmed = result["before"]["trimmed"] or {"start_ticks": 0, "end_ticks": 0}
    assert result["before"]["ticks"] + trimmed["start_ticks"] + trimmed["end_ticks"] == 161
    text = render_text(result)
    assert "interval_s: 2.0 -> 0.5" in text and "n/a" in text


@pytest.mark.slow
def test_healthy_vs_data_pipeline(tmp_path: Path, capsys) -> None:
    before = _record_sim(tmp_path / "healthy.parquet", "healthy", {"NCCL_DEBUG": "WARN", "HOME": "/root"})
    after = _record_sim(
        tmp_path / "starved.parquet", "data_pipeline", {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1"}
    )
    assert main(["compare", str(before), str(after), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"before", "after", "job", "prediction", "overall", "cards", "host", "diagnosis",
                           "metadata_differences", "headline"}
    assert result["job"] is None  # simulated runs: no job source
    assert set(result["host"]) == {k for k, _ in HOST_METRICS}
    assert set(result["overall"]["util_mean_pct"]) == {"before", "after", "change", "change_pct", "unit", "change_unit",
                                                        "changed"}
    util = result["overall"]["util_mean_pct"]
    assert util["before"] > 80 and util["change"] < -30 and util["change_pct"] < -30
    assert result["overall"]["stalled_share_pct"]["change"] > 10
    assert result["overall"]["util_p5_pct"]["after"] < result["overall"]["util_p95_pct"]["after"]
    assert set(result["cards"]) == {"0", "1"}
    for card in result["cards"].values():
        assert card["util_mean_pct"]["change"] < -30
    assert result["host"]["cpu_busy_mean_pct"]["before"] is not None

    diffs = result["metadata_differences"]
    assert diffs["source"] == {"before": "sim:healthy", "after": "sim:data_pipeline"}
    assert diffs["env.NCCL_DEBUG"] == {"before": "WARN", "after": "INFO"}
    assert diffs["env.OMP_NUM_THREADS"] == {"before": None, "after": "1"}
    assert "env.HOME" not in diffs  # only variables that shape training are recorded

    # the diagnosis is always there now (the guard from parallel development let a missing one pass)
    assert result["diagnosis"] is not None
    shares_after = {k: v["after"] for k, v in result["diagnosis"].items()}
    assert sum(shares_after.values()) == pytest.approx(100.0)
    starved = sum(v for k, v in shares_after.items() if k.endswith("/data_pipeline"))
    assert starved > 50

    assert main(["compare", str(before), str(after)]) == 0
    text = capsys.readouterr().out
    # the two cards changed alike: one line, not two tables repeating "all cards" (--all prints them)
    assert "cards 0, 1: as all cards" in text and "GPU-Util mean %" in text
    assert "env.NCCL_DEBUG: 'WARN' -> 'INFO'" in text
    assert main(["compare", str(before), str(after), "--all"]) == 0
    assert "card 1" in capsys.readouterr().out.splitlines()
