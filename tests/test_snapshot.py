"""`gpu-triage snapshot`: one non-interactive reading (every card, the host, the processes, the verdict over a
short window), as text and as JSON, and one that says so on a host without a GPU."""

from __future__ import annotations

import json

import pytest

from gpu_triage.cli import build_parser, main
from tests import fake_nvml


def test_snapshot_of_a_simulated_server_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--json", "--source", "sim:data_pipeline", "--gpus", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2, 3]
    assert all(g["util_pct"] is not None and "util_window_mean_pct" in g for g in data["gpus"])
    assert data["ticks"] == 7 and data["window_s"] == pytest.approx(6.0)
    assert len(data["cpu"]["cores_pct"]) == 32 and data["host"]["hostname"] == "sim-h200x4"
    assert {p["gpu_index"] for p in data["processes"]} == {0, 1, 2, 3}
    # two figures, two names (issue 33): the card's SM activity (GPM), the process's GPU-Util sample
    assert all("sm_active_pct" in g for g in data["gpus"])
    assert all("gpu_util_pct" in p and "sm_pct" not in p for p in data["processes"])
    v = data["verdict"]
    assert v["bottleneck"] == "data_pipeline" and not v["collecting"] and 0 < v["confidence"] <= 1
    assert v["evidence"] and v["advice"]


def test_snapshot_as_text_names_every_card_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--source", "sim:healthy", "--gpus", "2", "--seconds", "8", "--interval", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sim-h200x2 · sim:healthy · 2 GPUs · 5 ticks over 8 s at 2 s")
    head = out.index("GPU  UTIL SMACT        MEM  POWER  TEMP    CLOCK  FLAGS")
    assert [ln.split()[0] for ln in out[head + 1 : head + 3]] == ["0", "1"]
    assert any(ln.startswith("VERDICT ") and "confidence" in ln for ln in out)
    procs = out.index("PROCESSES") + 1
    assert "GPU%" in out[procs].split() and "SM%" not in out[procs].split()


def test_snapshot_without_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_triage.commands import snapshot
    from gpu_triage.sources import live

    def no_driver(spec: str, **_: object) -> live.LiveSource:
        return live.LiveSource(nvml_module=fake_nvml.FakeNvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))

    monkeypatch.setattr(snapshot, "make_source", no_driver)
    assert main(["snapshot", "--seconds", "0.2", "--interval", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "no NVIDIA GPU/driver: host only" in out and "(no GPU)" in out and "confidence" not in out
    assert main(["snapshot", "--json", "--seconds", "0.2", "--interval", "0.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_available"] is False and data["gpus"] == [] and data["verdict"]["confidence"] is None
    assert data["processes_are"] == "busiest on the host (no GPU)"


def test_snapshot_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--source", "sim:nope"]) == 2
    assert main(["snapshot", "--seconds", "1", "--interval", "5", "--source", "sim:healthy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(ln.startswith("gpu-triage: error:") for ln in err)


def test_snapshot_help() -> None:
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    text = sub.choices["snapshot"].format_help()
    for flag in ("--json", "--seconds", "--interval", "--source", "--gpus"):
        assert flag in text
    assert "snapshot" in build_parser().format_help()
