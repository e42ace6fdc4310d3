from __future__ import annotations

import compileall
import gc
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.shared_cache import ENV as SHARED_ENV

# Tests never touch the user's own configuration.
os.environ.pop("GPU_TRIAGE_CONFIG", None)
os.environ.setdefault("XDG_CONFIG_HOME", "/nonexistent-gpu-triage-test-config")
# The colour depth follows the terminal the tests run in (TERM=xterm is 16 colours, ui/palette.py): pinned to
# truecolor so that screens and snapshots are the same everywhere; a test of another depth sets its own.
os.environ["COLORTERM"] = "truecolor"
# The kernel's list of NVIDIA GPUs (sources/gpu_inventory.py) is never this machine's: a test on a GPU server would
# otherwise see its fake cards as "missing". A test of a machine's GPUs lays out its own (tests/fake_sysfs.py).
os.environ["GPU_TRIAGE_HOST_ROOT"] = "/nonexistent-gpu-triage-test-host"


@pytest.fixture(autouse=True)
def _fresh_gpu_triage_logger():
    """Each CLI run configures the ``gpu_triage`` logger for its process (logs.configure_logging: its own
    handlers, no propagation to the root). Tests call ``main()`` in-process many times, so put the logger back
    as a fresh process has it after each test: a later test's ``caplog`` must see our records."""
    ours = logging.getLogger("gpu_triage")
    saved = (list(ours.handlers), ours.propagate, ours.level)
    root_handlers = list(logging.getLogger().handlers)
    yield
    for h in list(ours.handlers):
        if h not in saved[0]:
            ours.removeHandler(h)
            h.close()
    ours.propagate, ours.level = saved[1], saved[2]
    root = logging.getLogger()
    for h in list(root.handlers):
        if h not in root_handlers:
            root.removeHandler(h)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: half as many workers again as the cores this process may run on. A fifth to a quarter of
    the suite's time is a test waiting on something real (a process it started, a server, Prometheus' first
    scrape, a terminal), with its core idle; one worker a core left both cores of a 2-core box idle a quarter
    of the time (about 290-300 s for the suite there, 225-245 s with three or four workers). A number given in
    PYTEST_XDIST_AUTO_NUM_WORKERS wins (xdist's own hook reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + (cores + 1) // 2


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built (the modules, their tables, Textual's and polars' own objects) lives for the whole
    run: moved out of the collector's way (gc.freeze), so each collection of the tests' garbage does not walk
    it again. A dashboard test spends 15-20 % of its CPU in the collector otherwise."""
    gc.freeze()


def pytest_configure(config: pytest.Config) -> None:
    """The session's directory for results computed once and shared by every test process
    (tests/shared_cache.py): made by the controlling process before xdist starts its workers, which inherit
    the variable; a worker (``workerinput``) uses its controller's."""
    if not hasattr(config, "workerinput"):
        os.environ[SHARED_ENV] = tempfile.mkdtemp(prefix="gpu-triage-tests-")
        _compile_once()


def _compile_once() -> None:
    """Our package's bytecode, written once before the workers start. About a hundred tests start a real
    ``gpu-triage`` process; where bytecode is not written (PYTHONDONTWRITEBYTECODE, as on some CI images) each
    of them and each worker compiled the package again, 0.2-1 s of CPU each. Python reads bytecode found
    beside the sources whatever that variable says, and checks it against each source's time and size."""
    package = Path(__file__).resolve().parents[1] / "app" / "gpu_triage"
    if not compileall.compile_dir(package, quiet=1):
        logging.getLogger(__name__).warning("could not write the bytecode of %s: each process compiles it", package)


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        where = os.environ.pop(SHARED_ENV, None)
        if where:
            shutil.rmtree(where, ignore_errors=True)
