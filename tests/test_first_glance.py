"""Issue #33, "also found": what a new user notices in the first week, each through the real app or CLI."""

from __future__ import annotations

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
