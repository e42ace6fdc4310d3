"""The keys are written once (ui/keys.py): the README's table, the help screen, the key line and the app's
bindings agree with that table, and a key of one mode does nothing in the other."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.keys import KEYS, footer_line, keys_for, markdown_table
from tests.ui_ticks import TickListSource, make_tick

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_keys_table_is_the_key_table() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Keys", 1)[1]
    table = [ln for ln in section.strip().splitlines() if ln.startswith("|")]
    table = table[: len(markdown_table())]
    assert table == markdown_table(), "README.md's Keys table and ui/keys.py differ: change both together"


def test_bindings_come_from_the_table() -> None:
    bound = {(b.key, b.action) for b in TriageApp.BINDINGS}
    from_table = {(key, action) for k in KEYS for key, action in k.bindings}
    assert bound == from_table


async def test_the_help_screen_lists_the_table_for_its_mode() -> None:
    app = TriageApp(Config(), source=TickListSource(2, 4), source_label="test", autostart=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        shown = str(app.screen.query_one("#help").render())
        for key in keys_for("live"):
            row = rf"^\s+{re.escape(key.plain)}\s+{re.escape(key.help.replace('`', '')[:40])}"
            assert re.search(row, shown, re.MULTILINE), key.shown
        assert "play / pause" not in shown  # replay's rows are only named, in one line
        assert "(replay adds: space ← → [ ] + - g G)" in shown


async def test_live_key_line_and_replay_keys_do_nothing_in_live() -> None:
    app = TriageApp(Config(), source=TickListSource(2, 4), source_label="test", autostart=False,
                    prefill=[make_tick(i, gpus=2, cores=4) for i in range(5)])
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.query_one("#keys").shown_plain == footer_line("live")
        assert footer_line("live") == "q quit  p pause  ↑↓ card  ⏎ detail  r record  d doctor  Tab procs  ? help"
        assert app.check_action("step", (1,)) is False and app.check_action("seek", ("end",)) is False
        assert app.check_action("record", ()) is True
        before = app.query_one("#header").shown_plain
        await pilot.press("space", "left", "G")  # replay keys: nothing happens, nothing fails
        await pilot.pause()
        assert app.is_running and app.query_one("#header").shown_plain == before


async def test_replay_has_its_own_keys_and_r_does_nothing_there(tmp_path: Path) -> None:
    import argparse

    from gpu_triage.data import H200_TRACE_2S
    from gpu_triage.ui.replay import ReplayApp
    from gpu_triage.ui.run import build_app

    app = build_app("replay", argparse.Namespace(file=str(H200_TRACE_2S), speed=1.0, record=None),
                    Config(recording_dir=tmp_path))
    assert isinstance(app, ReplayApp)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert app.query_one("#keys").shown_plain == footer_line("replay")
        assert footer_line("replay").startswith("q quit  space play/pause  ←/→ step")
        assert app.check_action("record", ()) is False and app.check_action("step", (1,)) is True
        await pilot.press("r")
        await pilot.pause()
        assert app.recording.recorder is None and list(tmp_path.iterdir()) == []
