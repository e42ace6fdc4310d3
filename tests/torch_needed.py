"""The check-up's tests need PyTorch (the optional extra): skipped where it is missing, except in CI.

CI sets ``CI`` and installs the CPU wheel (``.ci/run``): there a missing torch is a failure, so the tests
that prove ``baseline`` and ``loader`` can never be skipped silently.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest


def need_torch() -> ModuleType:
    if os.environ.get("CI"):
        try:
            import torch
        except ImportError as exc:
            pytest.fail(f"CI must run the PyTorch tests, but torch does not import ({exc}): .ci/run installs it")
        return torch
    return pytest.importorskip("torch", reason="PyTorch is an optional extra: pip install 'gpu-triage[torch]'")
