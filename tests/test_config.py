"""Config precedence and validation: a bad value is one line naming the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config, load_config, parse_config
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.errors import UserError

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.toml"


def test_example_file_lists_every_key_with_its_default() -> None:
    cfg = load_config(str(EXAMPLE))
    defaults = Config()
    assert cfg.interval_s == defaults.interval_s
    assert cfg.window_s == defaults.window_s
    assert cfg.thresholds == defaults.thresholds
    assert cfg.theme == defaults.theme
    assert cfg.recording_dir == defaults.recording_dir
    text = EXAMPLE.read_text()
    for key in Thresholds.keys():
        assert f"\n{key} =" in text, f"config.example.toml misses diagnosis.{key}"


def test_precedence_cli_then_env_then_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "gpu-triage").mkdir(parents=True)
    (xdg / "gpu-triage" / "config.toml").write_text("[sampling]\ninterval_s = 1.0\n")
    env_file = tmp_path / "env.toml"
    env_file.write_text("[sampling]\ninterval_s = 0.5\n")
    cli_file = tmp_path / "cli.toml"
    cli_file.write_text("[sampling]\ninterval_s = 0.25\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.delenv("GPU_TRIAGE_CONFIG", raising=False)
    assert load_config(None).interval_s == 1.0
    monkeypatch.setenv("GPU_TRIAGE_CONFIG", str(env_file))
    assert load_config(None).interval_s == 0.5
    assert load_config(str(cli_file)).interval_s == 0.25
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("GPU_TRIAGE_CONFIG")
    assert load_config(None) == Config()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[sampling]\ninterval_s = -1\n", "sampling.interval_s"),
        ("[sampling]\ninterval_s = 'fast'\n", "sampling.interval_s"),
        ("[sampling]\nwindow_s = 1\ninterval_s = 2\n", "sampling.window_s"),
        ("[diagnosis]\nno_such = 1\n", "diagnosis.no_such"),
        ("[diagnosis]\nidle_util_pct = true\n", "diagnosis.idle_util_pct"),
        ("[ui]\ntheme = 'pink'\n", "ui.theme"),
        ("[ui]\ncolor_gpu = 'not a colour!'\n", "ui.color_gpu"),
        ("[colours]\nx = 1\n", "colours"),
        ("[recording]\ndirectory = 3\n", "recording.directory"),
        ("[diagnosis]\nhold_s = nan\n", "diagnosis.hold_s"),  # was a traceback in the tracker
        ("[diagnosis]\nawait_ms = inf\n", "diagnosis.await_ms"),
        ("[diagnosis]\nmem_held_frac = 10\n", "diagnosis.mem_held_frac"),  # 10 meant 10 %
        ("[diagnosis]\nidle_util_pct = 500\n", "diagnosis.idle_util_pct"),
        ("[diagnosis]\nsawtooth_min_acf = 3\n", "diagnosis.sawtooth_min_acf"),
        ("[ui]\ncolor_sm = 'notacolour'\n", "ui.color_sm"),  # was a traceback on the first frame
    ],
)
def test_bad_value_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_config(str(path))
    message = str(err.value)
    assert str(path) in message and key in message
    assert "\n" not in message


HUGE = "\\u001b]52;c;aGk=\\u0007" + "x" * 5_000_000  # a 5 MB TOML string, an OSC 52 at its start


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (f'[ui]\ntheme = "{HUGE}"\n', "ui.theme"),
        (f'[ui]\ncolor_gpu = "{HUGE}"\n', "ui.color_gpu"),
        (f'[ui]\npanes = ["{HUGE}"]\n', "ui.panes"),
        (f'[job]\nlog_regex = ["{HUGE}"]\n', "job.log_regex"),
        (f'[sampling]\ninterval_s = "{HUGE}"\n', "sampling.interval_s"),
        (f'[ui]\n"{HUGE}" = 1\n', "ui.\u241b]52"),  # a key of 5 MB: named by its start
        (f'["{HUGE}"]\nx = 1\n', "\u241b]52"),
    ],
    ids=["theme", "colour", "panes", "log_regex", "interval", "key", "section"],
)
def test_a_5_mb_value_is_quoted_in_at_most_80_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str
) -> None:
    path = tmp_path / "huge.toml"
    path.write_text(text)
    assert main(["--config", str(path), "doctor"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err and "Traceback" not in err, err[:300]
    assert len(err) < 300 + len(str(path)) and "\x1b" not in err


def test_thresholds_override(tmp_path: Path) -> None:
    cfg = parse_config({"diagnosis": {"idle_util_pct": 3, "hold_s": 6}})
    assert cfg.thresholds.idle_util_pct == 3.0 and cfg.thresholds.hold_s == 6.0
    assert cfg.thresholds.stall_util_pct == Thresholds().stall_util_pct


def test_cli_reports_bad_config_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[sampling\n")
    assert main(["--config", str(path), "doctor"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err
    assert main(["--config", str(tmp_path / "missing.toml"), "doctor"]) == 2


def test_top_level_sampling_options_reach_subcommands() -> None:
    from gpu_triage.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["--interval", "0.5", "--window", "60", "demo", "healthy"])
    assert args.interval == 0.5 and args.window == 60
    args = parser.parse_args(["demo", "healthy", "--interval", "0.25"])
    assert args.interval == 0.25
    args = parser.parse_args(["--record", "x.parquet", "live"])
    assert args.record == "x.parquet"
    args = parser.parse_args(["record", "-o", "f.parquet"])
    assert getattr(args, "interval", None) is None


def test_a_key_outside_its_table_says_which_table(tmp_path: Path) -> None:
    path = tmp_path / "flat.toml"
    path.write_text("interval_s = 0.5\n")
    with pytest.raises(UserError) as err:
        load_config(str(path))
    assert str(path) in str(err.value) and "[sampling]" in str(err.value)
