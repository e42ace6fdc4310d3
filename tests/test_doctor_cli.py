"""``gpu-triage doctor`` through cli.main: the NVML module (pynvml) is the only thing swapped, for a fake
8-card machine or a machine without a driver; psutil, sysfs and the torch probe are this box's own (the torch
probe's child finds a torch that will not import where a test checks no torch figure: importing the real one
costs seconds of CPU each time)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path

import pytest

from fake_nvml import NVML_ERROR_DRIVER_NOT_LOADED, FakeNvml, h200_box
from gpu_triage.cli import main
from gpu_triage.doctor.run import JSON_KEYS


@pytest.fixture
def fake_pynvml(monkeypatch: pytest.MonkeyPatch):
    def install(module) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", module)

    monkeypatch.delenv("NCCL_P2P_LEVEL", raising=False)
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    return install


@pytest.fixture
def torch_unimportable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The doctor's torch probe (a child python, which inherits this environment) meets a torch that will not
    import, and answers at once."""
    (tmp_path / "torch.py").write_text("raise ImportError('not imported in this test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
def test_json_on_a_healthy_8_card_machine(fake_pynvml, capsys: pytest.CaptureFixture[str]) -> None:
    fake_pynvml(h200_box(8))
    code = main(["doctor", "--json", "--params", "7e9"])
    obj = json.loads(capsys.readouterr().out)
    assert tuple(obj) == JSON_KEYS
    assert obj["topology"]["verdict"] == "all_nvlink"
    assert obj["topology"]["matrix"][0][1] == "NV18"
    traffic = next(c for c in obj["checks"] if c["id"] == "traffic.gradients")
    assert traffic["data"]["seconds_fp32"] == pytest.approx(56e9 / 450e9)
    failed = [c["id"] for c in obj["checks"] if c["status"] == "fail"]
    assert code == (1 if failed else 0)  # this box's host checks are real; no GPU check fails
    # the one doctor run whose probe's child imports this box's own torch (seconds of CPU): it reads its version
    assert obj["software"]["torch_version"] == _installed("torch")


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.slow
def test_text_draws_the_matrix_and_exit_1_on_a_failing_card(fake_pynvml, torch_unimportable,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    fake = h200_box(8)
    fake.cards[2].pcie_width = 8
    fake_pynvml(fake)
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 1
    assert "GPU0  GPU1" in out and "NV18" in out
    assert "FAIL  gpu.pcie" in out and "card 2 x8 of x16" in out
    assert "\x1b[" not in out  # not a terminal: no colour codes


@pytest.mark.slow
def test_no_driver_runs_host_and_software_checks_and_exits_1(fake_pynvml, torch_unimportable,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    fake_pynvml(FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    code = main(["doctor", "--json"])
    obj = json.loads(capsys.readouterr().out)
    ids = {c["id"]: c["status"] for c in obj["checks"]}
    assert ids["gpu.driver"] == "fail"
    assert {"host.cpu", "host.memory", "host.numa", "software.torch", "software.env"} <= set(ids)
    assert obj["host"]["cpu_logical"] >= 1
    assert code == 1


def test_bad_params_is_one_line_and_exit_2(fake_pynvml, capsys: pytest.CaptureFixture[str]) -> None:
    fake_pynvml(FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    assert main(["doctor", "--params", "-5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu-triage: error: --params")
