"""PyTorch is optional: one place that finds it or says, in one line, how to install it."""

from __future__ import annotations

import importlib
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
