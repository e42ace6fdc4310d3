"""SVG snapshots of the main screen (pytest-textual-snapshot). Deterministic: the simulated server has a
fixed seed and start time, the window is pre-filled (no sampler thread, no wall clock on screen).

Every terminal (issue #13): 80x24 in truecolor, in 16 colours (TEXTUAL_COLOR_SYSTEM=standard, drawn as the
16 colours the terminal shows) and with NO_COLOR=1; 120x40 (8 cards) and 200x60 (16 cards) in truecolor.

Update after an intended visual change: pytest tests/test_ui_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from gpu_triage.ui.app import TriageApp
from tests.ui_prefill import prefilled, sim

TERMINALS = {"truecolor": {}, "16colours": {"TEXTUAL_COLOR_SYSTEM": "standard"}, "nocolor": {"NO_COLOR": "1"}}


def _sim_app(scenario: str, gpus: int = 8) -> TriageApp:
    """The simulated server (seed 0) on a full window, judged once for every test that starts on it."""
    return prefilled(sim, scenario, gpus, source_label=f"demo: {scenario}")


@pytest.mark.slow
@pytest.mark.parametrize("terminal", list(TERMINALS))
@pytest.mark.parametrize("scenario", ["single_card_busy", "data_pipeline"])
def test_main_screen_80x24(snap_compare, monkeypatch: pytest.MonkeyPatch, scenario: str, terminal: str) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TEXTUAL_COLOR_SYSTEM", raising=False)
    for name, value in TERMINALS[terminal].items():
        monkeypatch.setenv(name, value)
    assert snap_compare(_sim_app(scenario), terminal_size=(80, 24))


@pytest.mark.slow
@pytest.mark.parametrize(("size", "gpus"), [((120, 40), 8), ((200, 60), 16)])
def test_main_screen_large(snap_compare, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int], gpus: int) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TEXTUAL_COLOR_SYSTEM", raising=False)
    assert snap_compare(_sim_app("data_pipeline", gpus), terminal_size=size)
