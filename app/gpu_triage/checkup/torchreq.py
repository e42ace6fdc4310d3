"""PyTorch is optional: one place that finds it or says, in one line, how to install it."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from gpu_triage.errors import UserError

INSTALL_HINT = "pip install 'gpu-triage[torch]' (or PyTorch >= 2.1 for your CUDA version, from pytorch.org)"


def require_torch(command: str) -> ModuleType:
    """``import torch``, or a UserError (exit 2) naming the command and how to install PyTorch."""
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        if exc.name != "torch":  # torch is there but something it needs is not
            raise UserError(f"`gpu-triage {command}`: PyTorch failed to import ({exc}): {INSTALL_HINT}") from exc
        raise UserError(f"`gpu-triage {command}` needs PyTorch, which is not installed here: {INSTALL_HINT}") from exc
    except ImportError as exc:  # installed but broken (a missing CUDA library, a wrong wheel)
        raise UserError(f"`gpu-triage {command}`: PyTorch failed to import ({exc}): {INSTALL_HINT}") from exc


def check_torch_installed(command: str) -> None:
    """The one-line UserError of :func:`require_torch` when PyTorch is not installed, without importing it: a
    command whose own process needs nothing from torch (its children import it) skips seconds of CPU and
    hundreds of MB. A torch that is installed but broken is then found, and named, by the child."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except ValueError:  # already imported, by a host that made it without a spec: it is there
        found = True
    if not found:
        raise UserError(f"`gpu-triage {command}` needs PyTorch, which is not installed here: {INSTALL_HINT}")
