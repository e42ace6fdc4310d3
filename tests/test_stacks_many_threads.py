"""A Python process of thousands of threads (anyone's job may start them): py-spy gives up on one past its own
limit and says it found no interpreter, which read as "not a Python process". gpu-triage counts the threads
first, says what is true, and spends no py-spy run on it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from gpu_triage.sources.stacks import ACCESS_PROBLEMS, PYSPY_MAX_THREADS, StackReader, find_pyspy

THREADS = 8000
# Python threads started bare (threading.Thread.start waits for each new thread to run first: with 8000 on a
# busy 2-core box that handshake was seconds); each exists in /proc once start_new_thread returns
MANY = f"""
import _thread, sys
stop = _thread.allocate_lock()
stop.acquire()
for _ in range({THREADS}):
    _thread.start_new_thread(stop.acquire, (True, 120))  # 120 s: it ends by itself
print("ready", flush=True)
sys.stdin.read()  # until the test closes stdin
"""


@pytest.fixture
def many_threads() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", MANY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(30)


@pytest.mark.skipif(find_pyspy() is None and not os.environ.get("CI"), reason="py-spy not installed")
def test_a_process_of_8000_threads_is_not_called_not_python(many_threads: int) -> None:
    assert THREADS > PYSPY_MAX_THREADS
    reader = StackReader()
    started = time.monotonic()
    dump = reader.dump(many_threads)
    took = time.monotonic() - started
    assert dump.error == "threads" and not dump.threads, dump.error
    said = ACCESS_PROBLEMS[dump.error]
    assert "not a Python process" not in said and f"{PYSPY_MAX_THREADS:,}" in said
    assert took < 1.0 and reader.cpu_s == 0.0  # counted from /proc, py-spy never started (it took 11 s to fail)
