"""Issue #33, "also found": what a new user notices in the first week, each through the real app or CLI."""

from __future__ import annotations

from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.ui.app import TriageApp
from tests.ui_ticks import TickListSource, make_tick


async def test_collecting_names_the_cards_its_figures_are_of() -> None:
    """"GPU-Util now 9 % (cards 9, 8, 8 …)" printed each card's figure where card numbers belong."""
    for gpus, i, want in ((2, 2, "GPU-Util now 50 % (card 0 5 %, card 1 95 %)"),
                          (8, 2, "GPU-Util now 84 % (8 cards, from 5 % on card 0 to 95 % on card 1)"),
                          (8, 0, "GPU-Util now 95 % (8 cards, each 95 %)")):
        app = TriageApp(Config(), source=TickListSource(gpus, 4), source_label="test",
                        prefill=[make_tick(i, gpus=gpus, cores=4)], autostart=False)
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            diag = " ".join(app.query_one("#diag").shown_plain.split())
        assert "collecting" in diag and want in diag, diag
        assert "(cards 95" not in diag


async def test_replay_of_a_recording_shorter_than_the_window_plays_from_its_start(tmp_path: Path) -> None:
    """`replay FILE` opened paused on the last tick (78/78) when the recording was shorter than the window."""
    import argparse

    from gpu_triage.recording.background import Recorder
    from gpu_triage.ui.run import build_app
    from tests.ui_ticks import make_host

    path = tmp_path / "short.parquet"
    recorder = Recorder(path, make_host(2, 4), 2.0)
    for i in range(78):
        recorder.append(make_tick(i, gpus=2, cores=4))
    recorder.close()
    # a beat every 2,000 s: only the test's own beat below moves it (a loaded box once let a 2 s one fire first)
    app = build_app("replay", argparse.Namespace(file=str(path), speed=0.001, record=None), Config())
    assert app.replay.n == 78
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        bar = app.query_one("#bar").shown_plain
        header = app.query_one("#header").shown_plain
        assert app.replay.playing and " 1/78 " in bar and "▶ playing" in header, (bar, header)
        app._play_step()  # the play timer's next beat: it plays on
        assert app.replay.position == 1 and app.replay.playing


def test_a_bad_flag_gets_the_subcommand_s_usage_line_and_exit_2(capsys) -> None:
    """Bad flags printed the top level's four-line usage, which lists none of the subcommand's options."""
    import pytest

    from gpu_triage.cli import main

    for argv, usage, error in (
        (["snapshot", "--bogus"], "usage: gpu-triage snapshot [options] (`gpu-triage snapshot --help` lists them)",
         "gpu-triage snapshot: error: unrecognized arguments: --bogus"),
        (["compare", "a.parquet"], "usage: gpu-triage compare [options] BEFORE AFTER (`gpu-triage compare --help` "
         "lists them)", "gpu-triage compare: error: the following arguments are required: AFTER"),
        (["--bogus"], "usage: gpu-triage [options] [COMMAND] (`gpu-triage --help` lists them)",
         "gpu-triage: error: unrecognized arguments: --bogus"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert capsys.readouterr().err.split("\n") == [usage, error, ""]


async def test_record_and_config_work_after_the_subcommand_too(tmp_path: Path, capsys) -> None:
    from gpu_triage.cli import build_parser, main
    from gpu_triage.trace.reader import open_trace
    from gpu_triage.ui.run import build_app

    target = tmp_path / "demo.parquet"
    argv = ["demo", "healthy", "--gpus", "2", "--record", str(target), "--log-level", "warning"]
    args = build_parser().parse_args(argv)
    assert args.record == str(target) and args.log_level == "warning"
    app = build_app("demo", args, Config())
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.source is not None
        for _ in range(3):
            app.ingest(app.source.sample())
        await pilot.press("q")
    assert open_trace(target).n >= 3  # (and what the feed sampled itself)
    # a replay is a recording already: said, not silently ignored
    assert main(["replay", "tests/data/h200-gen-2s.parquet", "--record", str(tmp_path / "r.parquet")]) == 2
    assert "replay plays a recording already" in capsys.readouterr().err
    broken = tmp_path / "broken.toml"
    broken.write_text("[ui\n")
    assert main(["snapshot", "--source", "sim:healthy", "--config", str(broken)]) == 2
    assert "broken.toml" in capsys.readouterr().err


def test_completion_reads_no_config_so_a_broken_one_cannot_break_a_shell(tmp_path: Path) -> None:
    """`eval "$(gpu-triage completion bash)"` in .bashrc: a broken config failed it, and with it the shell's start."""
    import os
    import subprocess
    import sys

    broken = tmp_path / "broken.toml"
    broken.write_text("[ui\n")
    env = {**os.environ, "GPU_TRIAGE_CONFIG": str(broken), "PYTHONPATH": str(Path(__file__).parents[1] / "app")}
    for argv in (["completion", "bash"], ["--config", str(broken), "completion", "zsh"]):
        done = subprocess.run([sys.executable, "-m", "gpu_triage", *argv], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0 and done.stderr == "" and "gpu-triage" in done.stdout, done.stderr


async def test_host_only_lists_as_many_processes_as_the_screen_holds_under_no_empty_gpu_heading() -> None:
    """No GPU at 100x50: the table stopped at the busiest 10 with 30 lines empty below, under an empty graph
    heading for no card."""
    import dataclasses

    from gpu_triage.model import ProcSample
    from gpu_triage.sources.procs import NO_CARD

    everyone = [ProcSample(pid=100 + k, gpu_index=NO_CARD, name=f"p{k}", cpu_pct=float(90 - k)) for k in range(60)]

    class HostOnly(TickListSource):
        def busiest_processes(self) -> list[ProcSample]:
            return everyone[:10]

        def host_processes(self) -> list[ProcSample]:
            return everyone

    source = HostOnly(0, 4, gpu_available=False)
    prefill = [dataclasses.replace(make_tick(i, gpus=0, cores=4), procs=[]) for i in range(3)]
    app = TriageApp(Config(), source=source, source_label="live", prefill=prefill, autostart=False)
    async with app.run_test(size=(100, 50)) as pilot:
        await pilot.pause()
        gpu = app.query_one("#gpu").shown_plain
        rows = [ln for ln in app.query_one("#procs").shown_plain.split("\n") if ln.split()[0].isdigit()]
    assert gpu == "no NVIDIA GPU/driver: host only", gpu  # no graph legend over no card
    assert len(rows) >= 25 and rows[0].split()[-1] == "p0", rows
