from __future__ import annotations

import os

# Tests never touch the user's own configuration.
os.environ.pop("GPU_TRIAGE_CONFIG", None)
os.environ.setdefault("XDG_CONFIG_HOME", "/nonexistent-gpu-triage-test-config")
