"""Start-up: numpy loads with one OpenBLAS thread (a thread per core cost seconds of CPU on a 16-core
machine), and the user's environment is left as it was for the recorder and the doctor to read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real subprocesses, each seconds long: outside the inner loop

PROBE = """
import os
from gpu_triage.heavy_imports import import_numpy_with_one_blas_thread
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
import sys
from gpu_triage.cli import main
rc = main(sys.argv[1:])
print(rc, "numpy" in sys.modules, "pyarrow" in sys.modules)
"""


def _record(tmp_path: Path, source: str) -> list[str]:
    out = tmp_path / f"{source.replace(':', '-')}.parquet"
    argv = ["record", "-o", str(out), "--source", source, "--duration", "1", "--interval", "0.5"]
    if source != "live":
        argv += ["--fast", "--gpus", "2"]
    run = subprocess.run([sys.executable, "-c", RECORD_PROBE, *argv], capture_output=True, text=True, check=True)
    from gpu_triage.trace.reader import open_trace
    from gpu_triage.trace.stream import stream_path_for

    # what was recorded reads back whole, converted by the child the recorder started
    assert len(open_trace(out).ticks()) == 2 and not stream_path_for(out).exists()
    return run.stdout.splitlines()[-1].split()  # the probe's line, after the recorder's own


def test_a_live_recording_loads_numpy_for_its_verdicts_and_never_pyarrow(tmp_path: Path) -> None:
    """The recorder writes its stream itself and its Parquet in a child: 31 MB of Arrow libraries stay out of
    a process that samples for hours. numpy is there for the diagnosis of each tick (trace v3's verdict)."""
    assert _record(tmp_path, "live") == ["0", "True", "False"]


def test_a_simulated_recording_has_numpy_for_the_simulator_and_still_no_pyarrow(tmp_path: Path) -> None:
    assert _record(tmp_path, "sim:healthy") == ["0", "True", "False"]


LEAN_PROBE = """
import os, sys
from gpu_triage.heavy_imports import import_pyarrow_lean
import_pyarrow_lean()
import pyarrow
print("numpy" in sys.modules, pyarrow.default_memory_pool().backend_name,
      os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "<unset>"))
"""


@pytest.mark.parametrize("user_pool", [None, "mimalloc"])
def test_the_converter_loads_pyarrow_on_malloc_without_numpy_and_keeps_a_pool_the_user_chose(
    user_pool: str | None,
) -> None:
    """What the recorder's child converter (trace/finish.py) loads: pyarrow without numpy, on malloc unless
    the user chose a pool, and the environment as it was."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if user_pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = user_pool
    out = subprocess.run([sys.executable, "-c", LEAN_PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", user_pool or "system", user_pool or "<unset>"]


DASHBOARD_PROBE = """
import argparse, sys
from gpu_triage.cli import prepare_imports
prepare_imports(argparse.Namespace(command=sys.argv[1]))
import asyncio
from gpu_triage.config import Config
from gpu_triage.ui.run import build_app
args = argparse.Namespace(scenario="healthy", gpus=2, cores=8, seed=0, speed=1.0, record=None)
config = Config()
config.interval_s = 0.1
app = build_app("demo", args, config)
async def go():
    async with app.run_test(size=(120, 40)) as pilot:
        while len(app.window) < 2:  # bounded by the subprocess's own end: the test waits for it
            await pilot.pause()
            await asyncio.sleep(0.01)
        ticks = len(app.window)
    return ticks
ticks = asyncio.run(go())
loaded = "ssl" in sys.modules
import prometheus_client.exposition  # --metrics imports ssl after the dashboard started: it must still work
import ssl
print(ticks, loaded, asyncio.sslproto.ssl is None, ssl.OPENSSL_VERSION.split()[0])
"""


def test_the_dashboard_runs_without_openssl_and_a_later_import_of_ssl_still_works() -> None:
    """asyncio loads ssl only if it can, and the dashboard opens no TLS connection: OpenSSL stays out of the
    screen commands (4.4 MB, issue 15), yet prometheus_client (--metrics) still imports ssl afterwards."""
    run = subprocess.run([sys.executable, "-c", DASHBOARD_PROBE, "demo"], capture_output=True, text=True, check=True,
                         timeout=120)
    ticks, loaded, asyncio_without_tls, openssl = run.stdout.split()
    assert int(ticks) >= 2
    assert (loaded, asyncio_without_tls, openssl) == ("False", "True", "OpenSSL")


def test_commands_without_a_screen_load_asyncio_as_usual() -> None:
    probe = "import argparse, sys\nfrom gpu_triage.cli import prepare_imports\n"
    probe += "prepare_imports(argparse.Namespace(command='export'))\n"
    probe += "import asyncio\nprint(asyncio.sslproto.ssl is None)"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False"]
