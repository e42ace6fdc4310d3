"""Hostile input found by a demanding user or a malicious file, each once a traceback, a hang or lost data:
now one line naming what and where with exit status 2, or the bad part left out and the rest kept.

Only the outside is faked: the files, the programs and the FIFOs the commands are given."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from fake_nvml import NVML_ERROR_DRIVER_NOT_LOADED, FakeNvml
from gpu_triage.cli import main


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gpu-triage: error:")]
    assert len(lines) == 1, err
    return lines[0]


# -- the doctor's --python ---------------------------------------------------------------------------


def test_doctor_python_that_prints_non_utf8_bytes_is_a_skipped_check_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    wrapper = tmp_path / "python"
    wrapper.write_bytes(b"#!/bin/sh\nprintf '\\377\\376 not json\\n'\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)

    rc = main(["doctor", "--json", "--python", str(wrapper)])

    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert rc == 1  # the checks ran (no driver: gpu.driver fails), not a crash
    assert "the torch probe printed something unexpected" in out.out


# -- config files ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 5000 + "]" * 5000 + "\n",  # tomllib recursed until RecursionError
        "[sampling]\ninterval_s = 1" + "0" * 5000 + "\n",  # Python's 4,300-digit limit: ValueError
    ],
    ids=["nested-arrays", "huge-integer"],
)
def test_config_beyond_tomllib_limits_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)

    rc = main(["--config", str(cfg), "diagnose", str(tmp_path / "run.parquet")])

    assert rc == 2
    line = _error_line(capsys)
    assert str(cfg) in line and "not valid TOML" in line


@pytest.mark.parametrize("value", ["0", "0.0", "5e-324", "0.5"])
@pytest.mark.parametrize("key", ["lone_cores_per_core", "few_workers_per_core"])
def test_a_threshold_the_core_count_is_divided_by_must_be_at_least_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[diagnosis]\n{key} = {value}\n")

    rc = main(["--config", str(cfg), "diagnose", str(tmp_path / "run.parquet")])

    assert rc == 2
    line = _error_line(capsys)
    assert f"diagnosis.{key}" in line and "1 or more" in line


def test_a_threshold_of_one_core_per_core_is_accepted() -> None:
    from gpu_triage.config import parse_config

    cfg = parse_config({"diagnosis": {"lone_cores_per_core": 1, "few_workers_per_core": 1.0}})

    assert cfg.thresholds.lone_cores_per_core == 1.0
    assert cfg.thresholds.few_workers_per_core == 1.0
