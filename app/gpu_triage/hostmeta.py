"""Facts a recorder adds to a trace's host metadata beside what the source reports.

Why: a before/after comparison is only fair when the runs differ in the change being tested; two
recordings that differ in NCCL settings, visible devices or the kernel explain themselves only if those
were written down. ``gpu-triage compare`` prints what differs.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpu_triage import __version__

# Environment variables that shape training throughput: collective communication, visible devices, host
# threads, the CUDA caching allocator, launcher topology.
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "NVIDIA_", "OMPI_", "UCX_", "FI_")
ENV_NAMES = frozenset(
    {
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "NPROC_PER_NODE",
        "CUDA_VISIBLE_DEVICES",
    }
)
# Never record anything that looks like a credential under an allowed prefix (the exact names above are
# vetted one by one: TOKENIZERS_PARALLELISM holds "TOKEN" and is a thread setting).
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")


def training_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The training-relevant environment variables, sorted by name, credentials left out."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name in sorted(environ):
        upper = name.upper()
        if upper in ENV_NAMES:
            out[name] = environ[name]
        elif upper.startswith(ENV_PREFIXES) and not any(word in upper for word in _SECRET_WORDS):
            out[name] = environ[name]
    return out


def recorder_extra(
    source_name: str,
    interval_s: float,
    *,
    describe_machine: bool = True,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Metadata the recorder adds to ``HostInfo.extra``.

    ``describe_machine`` is False for simulated sources: this machine's kernel and environment say nothing
    about a simulated server.
    """
    extra: dict[str, Any] = {
        "tool": "gpu-triage",
        "tool_version": __version__,
        "source": source_name,
        "interval_s": float(interval_s),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if describe_machine:
        extra["kernel"] = platform.release()
        extra["os"] = platform.system()
        extra["python"] = platform.python_version()
        extra["env"] = training_env(environ)
    return extra
