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

    from gpu_triage.feeds import Recorder
    from gpu_triage.ui.run import build_app
    from tests.ui_ticks import make_host

    path = tmp_path / "short.parquet"
    recorder = Recorder(path, make_host(2, 4), 2.0)
    for i in range(78):
        recorder.append(make_tick(i, gpus=2, cores=4))
    recorder.close()
    app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
    assert app.replay.n == 78
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        bar = app.query_one("#bar").shown_plain
        header = app.query_one("#header").shown_plain
        assert app.replay.playing and " 1/78 " in bar and "▶ playing" in header, (bar, header)
        app._play_step()  # the play timer's next beat: it plays on
        assert app.replay.position == 1 and app.replay.playing
