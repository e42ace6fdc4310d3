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
