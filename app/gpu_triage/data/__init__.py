"""Real H200 recordings bundled with the package: the built-in demo and the test fixtures.

Copied from the project's shared traces: h200-scenarios-2s.parquet (2 s ticks) and
h200-scenarios-0.5s.parquet (0.5 s ticks) with their *.labels.json (each scenario's window and verdicts).
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).parent
H200_TRACE_2S = DATA_DIR / "h200-scenarios-2s.parquet"
H200_TRACE_05S = DATA_DIR / "h200-scenarios-0.5s.parquet"


def labels_for(trace: Path) -> Path:
    return trace.with_name(trace.name.replace(".parquet", ".labels.json"))
