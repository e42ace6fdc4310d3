"""Finding Debian's `prometheus` / `promtool` for the tests: CI must run those tests, never skip them."""

from __future__ import annotations

import os
import shutil

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
