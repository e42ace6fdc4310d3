"""Arguments and config values that were accepted or died in a traceback: each is one line (what, where,
the valid range) and exit 2."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from gpu_triage.cli import main


def _no_user() -> str:
    name = "nosuchuser"
    while True:
        try:
            pwd.getpwnam(name)
        except KeyError:
            return name
        name += "x"


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        code = main(argv)
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    return err[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "~{u}/x.parquet"],
        ["diagnose", "~{u}/x.parquet"],
        ["diagnose", "~{u}/fleet/"],
        ["recover", "~{u}/x.arrows"],
        ["compare", "~{u}/a.parquet", "b.parquet"],
        ["record", "--source", "sim", "--duration", "1", "-o", "~{u}/r.parquet"],
        ["record", "--source", "sim", "--duration", "1", "-o", "r.parquet", "--job-log", "~{u}/train.log"],
        ["--config", "~{u}/c.toml", "diagnose", "x.parquet"],
        ["compact", "~{u}/fleet"],
        ["run", "--job-output", "~{u}/job.log", "--", "true"],
    ],
)
def test_a_path_under_a_user_that_does_not_exist_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    user = _no_user()
    line = _one_line_exit_2([a.replace("{u}", user) for a in argv], capsys)
    assert f"~{user}/" in line and f"no user '{user}'" in line and "give the full path" in line
    assert not list(tmp_path.iterdir())  # nothing was recorded under a wrong name


def test_a_recording_directory_under_no_user_in_the_config_is_one_line(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[recording]\ndirectory = "~{_no_user()}/rec"\n')
    line = _one_line_exit_2(["--config", str(conf), "diagnose", "x.parquet"], capsys)
    assert "recording.directory" in line and "give the full path" in line


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--job-log", ""], "--job-log: the file name is empty"),
        (["record", "--source", "sim", "-o", "r.parquet", "--duration", "1", "--job-log", ""],
         "--job-log: the file name is empty"),
        (["compact", ""], "DIR: the directory name is empty"),
        (["demo", "--speed", "1e-300"], "--speed: 1e-300: give 0.01 to 1000"),
        (["demo", "--speed", "1e9"], "--speed: 1e9: give 0.01 to 1000"),
        (["replay", "x.parquet", "--speed", "0.001"], "--speed: 0.001: give 0.01 to 1000"),
        (["record", "--source", "sim", "-o", "r.parquet", "--batch-size", "99999999999999999999"],
         "--batch-size: 99999999999999999999: give the samples per step, 1 to 1,000,000,000"),
    ],
)
def test_out_of_range_arguments_are_refused_in_one_line(argv: list[str], expect: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert expect in _one_line_exit_2(argv, capsys)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("toml", "expect"),
    [
        ("[diagnosis]\nconf_hung = 7\n", "diagnosis.conf_hung is invalid: must be between 0 and 1, got 7"),
        ("[diagnosis]\nconf_job_wait = 1.5\n", "diagnosis.conf_job_wait is invalid: must be between 0 and 1"),
        ("[job]\nbatch_size = 99999999999999999999\n", "job.batch_size is invalid: must be a whole number of "
         "samples per step, 1 to 1,000,000,000, got 99999999999999999999"),
    ],
)
def test_out_of_range_config_values_are_refused_in_one_line(toml: str, expect: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(toml)
    line = _one_line_exit_2(["--config", str(conf), "diagnose", "x.parquet"], capsys)
    assert str(conf) in line and expect in line


def test_the_ranges_keep_what_is_valid(tmp_path: Path) -> None:
    from gpu_triage.config import parse_config

    cfg = parse_config({"diagnosis": {"conf_hung": 1.0}, "job": {"batch_size": 10**9}})
    assert cfg.thresholds.conf_hung == 1.0 and cfg.job_batch_size == 10**9
