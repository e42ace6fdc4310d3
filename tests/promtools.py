"""Finding Debian's `prometheus` / `promtool` for the tests (CI must run those tests, never skip them), and the
local ports and child processes the tests that run a real Prometheus or exporter share."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess

import pytest

INSTALL = "apt-get install -y prometheus (Debian's package, which brings promtool; .ci/run does it)"


def require(name: str) -> str:
    """The path of ``name``; without it the test FAILS when $CI is set and is skipped elsewhere."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"`{name}` is not installed, and CI must run this test: {INSTALL}")
        pytest.skip(f"`{name}` is not installed: {INSTALL}")
    return path


def free_port() -> int:
    """A loopback port free at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM (SIGKILL after 20 s) a child started with stderr piped; what it wrote on stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.stderr.read() if proc.stderr else ""
