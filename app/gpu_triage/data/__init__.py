"""Real H200 recordings bundled with the package: the built-in demo and the test fixtures.

Copied from the project's shared traces: h200-scenarios-2s.parquet (2 s ticks) and
h200-scenarios-0.5s.parquet (0.5 s ticks) with their *.labels.json (each scenario's window and verdicts).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent
H200_TRACE_2S = DATA_DIR / "h200-scenarios-2s.parquet"
H200_TRACE_05S = DATA_DIR / "h200-scenarios-0.5s.parquet"


def labels_for(trace: Path) -> Path:
    return trace.with_name(trace.name.replace(".parquet", ".labels.json"))


#: A labelled window is judged from 35 % to 90 % of its length: its edges hold start-up and wind-down.
MIDDLE = (0.35, 0.9)


def judged_ticks(label: dict[str, Any], ts: Sequence[datetime], interval_s: float) -> list[int]:
    """Indexes of the ticks (ending at ``ts``) a labelled window is judged on: its middle (``MIDDLE``), and
    where the label says from when its mechanism can be seen (``visible_from``: a periodic checkpoint's
    first save; before it the job only computes), only ticks whose whole interval comes after that second
    (the marks are whole seconds, so one more second)."""
    start, end = datetime.fromisoformat(label["start"]), datetime.fromisoformat(label["end"])
    lo, hi = start + (end - start) * MIDDLE[0], start + (end - start) * MIDDLE[1]
    idx = [i for i, t in enumerate(ts) if lo <= t <= hi]
    if label.get("visible_from"):
        seen = datetime.fromisoformat(label["visible_from"]) + timedelta(seconds=1 + interval_s)
        idx = [i for i in idx if ts[i] >= seen]
    return idx
