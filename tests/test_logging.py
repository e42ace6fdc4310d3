"""The log: ``--log-file`` gets recording start/stop, each change of the shown verdict and user errors;
headless commands print warnings on stderr; a dashboard never writes a log line onto its terminal."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.logs import SHOWN, configure_logging


@pytest.fixture(autouse=True)
def _fresh_logger() -> Iterator[None]:
    yield
    ours = logging.getLogger("gpu_triage")
    for handler in list(ours.handlers):
        ours.removeHandler(handler)
        handler.close()
    ours.propagate, ours.level = True, logging.NOTSET


def test_record_with_a_log_file_logs_start_verdict_changes_and_stop(tmp_path: Path, capsys) -> None:
    log_file, out = tmp_path / "gpu-triage.log", tmp_path / "run.parquet"
    code = main(["record", "-o", str(out), "--source", "sim:data_pipeline", "--duration", "120", "--fast",
                 "--log-file", str(log_file)])
    assert code == 0 and out.exists()
    lines = log_file.read_text().splitlines()
    started = " INFO gpu_triage.recording.headless: recording sim:data_pipeline to " + str(out)
    assert any(started in line for line in lines)
    verdicts = [line for line in lines if " gpu_triage.diagnosis.tracker: verdict " in line]
    assert verdicts and verdicts[0].split("verdict ", 1)[1].startswith("none -> ")
    assert any(line.split(" -> ", 1)[1].split(" ")[0].endswith("/data_pipeline") for line in verdicts), verdicts
    assert any("recording stopped (duration reached): 60 ticks in " + str(out) in line for line in lines)
    # the file gets what the console got, but the console does not get it twice
    assert capsys.readouterr().err.count("not this machine") == 1


def test_without_a_log_file_info_goes_nowhere_and_the_output_is_as_before(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run.parquet"
    assert main(["record", "-o", str(out), "--source", "sim:healthy", "--duration", "10", "--fast"]) == 0
    err = capsys.readouterr().err
    assert "verdict" not in err and "INFO" not in err
    assert list(tmp_path.iterdir()) == [out]


def test_log_file_option_works_before_the_command_too_and_logs_user_errors(tmp_path: Path, capsys) -> None:
    log_file = tmp_path / "g.log"
    code = main(["--log-file", str(log_file), "diagnose", str(tmp_path / "missing.parquet")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu-triage: error: ")  # one line, not two
    assert " ERROR gpu_triage.cli: " in log_file.read_text() and "(exit 2)" in log_file.read_text()


def test_an_unwritable_log_file_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    code = main(["--log-file", str(tmp_path / "no" / "such" / "dir.log"), "doctor", "--params", "-1"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-triage: error: --log-file ") and err.count("\n") == 1 and "Traceback" not in err


def test_headless_warnings_reach_stderr_once_and_the_dashboard_never_sees_one(tmp_path: Path, capsys) -> None:
    log = logging.getLogger("gpu_triage.sources.nvml")
    configure_logging(None, screen=False)
    log.warning("GPU 3 stopped answering")
    log.warning("already printed by the command", extra=SHOWN)
    log.info("routine")
    assert capsys.readouterr().err == "gpu-triage: WARNING: GPU 3 stopped answering\n"

    log_file = tmp_path / "screen.log"
    configure_logging(str(log_file), "debug", screen=True)
    log.warning("GPU 3 stopped answering")
    log.debug("details")
    logging.getLogger("some.library").warning("not ours either")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    assert "WARNING gpu_triage.sources.nvml: GPU 3 stopped answering" in log_file.read_text()
    assert "DEBUG gpu_triage.sources.nvml: details" in log_file.read_text()


class _FlakySource:
    """Fails the same way twice, works once, fails again, then asks the sampler to stop."""

    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0
        self.sampler = None

    def sample(self):
        from ui_ticks import make_tick

        self.calls += 1
        if self.calls == 3:
            return make_tick(0)
        if self.calls >= 5:
            self.sampler._stop.set()
        raise OSError("NVML went away")


def test_a_source_failing_every_tick_is_one_warning_until_it_recovers(tmp_path: Path, capsys) -> None:
    from gpu_triage.sampler import Sampler

    log_file = tmp_path / "s.log"
    configure_logging(str(log_file), "debug", screen=False)
    source = _FlakySource()
    errors: list[BaseException] = []
    source.sampler = sampler = Sampler(source, 0.001, lambda tick: None, errors.append, first_after_s=0)
    sampler.start()
    sampler._thread.join(timeout=30)
    text = log_file.read_text()
    assert source.calls == 5 and len(errors) == 4  # every failure still reaches on_error
    assert text.count("WARNING gpu_triage.sampler: source flaky failed to sample: OSError: NVML went away") == 2
    assert text.count("DEBUG gpu_triage.sampler: source flaky failed to sample") == 2
    assert "failed to sample" not in capsys.readouterr().err  # on_error is what the user sees
