"""pyarrow (~35 MB of RSS) and polars are loaded only by the commands that read recordings: the dashboard on
a live or simulated source never loads them, --record included (it writes its stream itself and converts it
to Parquet in a child; docs/performance.md). `export`'s
side of it is in test_export.py (its daemon's mapped libraries)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real subprocesses, each seconds long: outside the inner loop

_DASHBOARD = """
import asyncio, argparse, json, sys
from gpu_triage.config import Config
from gpu_triage.ui.run import build_app
args = argparse.Namespace(scenario="healthy", gpus=2, cores=32, seed=0, speed=1.0, record=sys.argv[1] or None)
config = Config()
config.interval_s = 0.2
app = build_app("demo", args, config)
async def go():
    async with app.run_test(size=(160, 50)) as pilot:
        # a few ticks drawn and, when recording, written (bounded by the subprocess's timeout)
        rec = app.recording
        while app.ticks_ingested < 3 or app.redraws < 2 or (rec.recorder is not None and rec.recorder.ticks < 1):
            await pilot.pause()
            await asyncio.sleep(0.01)
asyncio.run(go())
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"pyarrow", "polars"})))
"""


@pytest.mark.parametrize("record", [False, True])
def test_dashboard_loads_no_arrow_even_to_record(record: bool, tmp_path: Path) -> None:
    target = str(tmp_path / "live.parquet") if record else ""
    out = subprocess.run(
        [sys.executable, "-c", _DASHBOARD, target], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout.splitlines()[-1]) == []
    if record:  # and yet the recording is there, whole
        from gpu_triage.trace.reader import open_trace

        trace = open_trace(target)
        assert not trace.recovered and trace.n >= 1
