"""Start-up: numpy loads with one OpenBLAS thread (a thread per core cost seconds of CPU on a 16-core
machine), and the user's environment is left as it was for the recorder and the doctor to read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import os
from gpu_triage.cli import import_numpy_with_one_blas_thread
import_numpy_with_one_blas_thread()
print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS', '<unset>'))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc to count threads")
@pytest.mark.parametrize("user_value", [None, "7"])
def test_numpy_loads_single_threaded_and_the_environment_is_restored(user_value: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if user_value is not None:
        env["OPENBLAS_NUM_THREADS"] = user_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    threads, seen = out.stdout.split()
    assert int(threads) == 1
    assert seen == (user_value or "<unset>")


RECORD_PROBE = """
import os, sys
from gpu_triage.cli import main
rc = main(sys.argv[1:])
import pyarrow
print(rc, "numpy" in sys.modules, pyarrow.default_memory_pool().backend_name,
      os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "<unset>"))
"""


def _record(tmp_path: Path, source: str, env_extra: dict[str, str] | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env.update(env_extra or {})
    out = tmp_path / f"{source.replace(':', '-')}.parquet"
    argv = ["record", "-o", str(out), "--source", source, "--duration", "1", "--interval", "0.5"]
    if source != "live":
        argv += ["--fast", "--gpus", "2"]
    run = subprocess.run(
        [sys.executable, "-c", RECORD_PROBE, *argv], env=env, capture_output=True, text=True, check=True
    )
    from gpu_triage.trace.reader import open_trace

    assert len(open_trace(out).ticks()) == 2  # what was recorded reads back whole
    return run.stdout.splitlines()[-1].split()  # the probe's line, after the recorder's own


def test_a_live_recording_loads_neither_numpy_nor_mimalloc_and_leaves_the_environment(tmp_path: Path) -> None:
    rc, numpy_loaded, pool, env_seen = _record(tmp_path, "live")
    assert (rc, numpy_loaded, pool, env_seen) == ("0", "False", "system", "<unset>")


def test_a_simulated_recording_still_has_numpy_and_a_pool_the_user_chose_is_kept(tmp_path: Path) -> None:
    rc, numpy_loaded, pool, env_seen = _record(tmp_path, "sim:healthy", {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"})
    assert (rc, numpy_loaded, pool, env_seen) == ("0", "True", "mimalloc", "mimalloc")
