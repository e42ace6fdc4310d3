"""The panes of the main screen, Rich ``Text`` out of a WindowView (+ verdict), sized to a width and a line
budget planned by :mod:`gpu_triage.ui.layout`: the cards in :mod:`~gpu_triage.ui.gpu_pane`, cores, memory,
network and disks in :mod:`~gpu_triage.ui.host_panes`, the diagnosis in :mod:`~gpu_triage.ui.verdict_pane`,
the job in :mod:`~gpu_triage.ui.job_pane`; here, the colours they share.

Kept free of widgets so that every pane redraws from the same window whether ticks come live or from a replay.
"""

from __future__ import annotations

from dataclasses import dataclass

PATTERN_COLOURS = {
    "idle": "grey50",
    "steady_high": "green",
    "steady_low": "yellow",
    "sawtooth": "magenta",
    "single_card_busy": "bright_blue",
    "imbalanced": "deep_sky_blue1",  # distinct from steady_low, which many palettes draw orange
}


@dataclass(slots=True)
class Colours:
    gpu: str = "green"
    sm: str = "cyan"
    alert: str = "red"
