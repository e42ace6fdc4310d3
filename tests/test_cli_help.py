"""What `gpu-triage COMMAND --help` prints is read by people: it says what the docs say, without artefacts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpu_triage.cli import build_parser


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_help_prints_single_percent_signs(command: str) -> None:
    """argparse %-formats option help but not a description without %(prog)s: "50 %%" showed as typed."""
    text = _subparsers()[command].format_help()
    assert "%%" not in text, command


def test_record_interval_defaults_to_the_config_file(tmp_path: Path) -> None:
    """`record --help` says the interval's default comes from the config file if set: it does."""
    import pyarrow.parquet as pq

    from gpu_triage.cli import main

    config = tmp_path / "config.toml"
    config.write_text("[sampling]\ninterval_s = 0.5\nwindow_s = 60\n")
    out = tmp_path / "run.parquet"
    argv = ["--config", str(config), "record", "-o", str(out), "--source", "sim:healthy", "--fast", "--duration", "2"]
    assert main(argv) == 0
    meta = pq.ParquetFile(out).schema_arrow.metadata
    assert meta[b"gpu_triage.interval_s"] == b"0.5"
    assert pq.read_table(out).num_rows == 4


@pytest.mark.parametrize(("command", "flag"), [
    ("live", "--interval"), ("live", "--window"), ("demo", "--interval"), ("record", "--interval"),
    ("replay", "--window"), ("diagnose", "--window"), ("export", "--interval"), ("export", "--window"),
    ("baseline", "--interval"),
])
def test_seconds_options_say_the_config_file_sets_their_default(command: str, flag: str) -> None:
    action = _subparsers()[command]._option_string_actions[flag]
    assert "from the config file if set" in (action.help or ""), (command, flag)


def test_demo_cores_help_states_the_simulators_range() -> None:
    from gpu_triage.sources.sim import MAX_CORES

    help_text = _subparsers()["demo"]._option_string_actions["--cores"].help or ""
    assert f"1-{MAX_CORES}" in help_text
