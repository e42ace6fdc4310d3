"""Safe access to NVML through the ``pynvml`` module of nvidia-ml-py.

Every call goes through :meth:`Nvml.call`, which turns "this card or driver does not do that" into
``None`` (shown "n/a") instead of an exception, and turns "the card fell off the bus" into
:class:`GpuLost` so that the caller can mark that one card lost and keep the others updating.

The module object is injected, so tests pass a fake NVML module (the outside world) and exercise this
code for real.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Error codes from nvml.h; read from the module when it has them.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_INVALID_ARGUMENT = 2
_ARGUMENT_VERSION_MISMATCH = 25
_TIMEOUT = 10


class NvmlUnavailable(Exception):
    """No NVML library, no driver, or nvmlInit failed: run host-only. ``code``: NVML's error code, if it gave one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class GpuLost(Exception):
    """The card stopped answering (NVML_ERROR_GPU_IS_LOST)."""


class Nvml:
    """A thin wrapper around an initialised NVML module."""

    def __init__(self, module: Any) -> None:
        self.m = module
        self._error_type: type[BaseException] = getattr(module, "NVMLError", Exception)
        code = lambda name, dflt: getattr(module, name, dflt)  # noqa: E731
        self._na_codes = {
            code("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
            code("NVML_ERROR_NO_PERMISSION", _NO_PERMISSION),
            code("NVML_ERROR_NOT_FOUND", _NOT_FOUND),
            code("NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
            code("NVML_ERROR_INVALID_ARGUMENT", _INVALID_ARGUMENT),
            code("NVML_ERROR_ARGUMENT_VERSION_MISMATCH", _ARGUMENT_VERSION_MISMATCH),
        }
        self._lost_code = code("NVML_ERROR_GPU_IS_LOST", _GPU_IS_LOST)
        self._timeout_code = code("NVML_ERROR_TIMEOUT", _TIMEOUT)
        self.failures: dict[str, int] = {}  # function name -> times it failed for another reason

    def error_code(self, exc: BaseException) -> int | None:
        return getattr(exc, "value", None)

    def _invoke(self, fn: str, *args: Any) -> tuple[bool, Any]:
        """(whether ``module.fn(*args)`` worked, what it returned); raises :class:`GpuLost`. An unsupported
        answer (or an older binding without ``fn``) is not counted as a failure; any other error is."""
        func: Callable[..., Any] | None = getattr(self.m, fn, None)
        if func is None:  # an older binding without this function
            return False, None
        try:
            return True, func(*args)
        except self._error_type as exc:
            code = self.error_code(exc)
            if code == self._lost_code:
                raise GpuLost(fn) from exc
            if code not in self._na_codes:
                self.failures[fn] = self.failures.get(fn, 0) + 1
            return False, None

    def call(self, fn: str, *args: Any) -> Any:
        """``module.fn(*args)``; ``None`` when unsupported or failing; raises :class:`GpuLost`."""
        return self._invoke(fn, *args)[1]

    def succeeds(self, fn: str, *args: Any) -> bool:
        """``module.fn(*args)`` for a call that returns nothing: whether it worked (raises :class:`GpuLost`)."""
        return self._invoke(fn, *args)[0]

    def next_event(self, event_set: Any) -> Any:
        """The next pending event of ``event_set``, or ``None`` when none is pending. Never waits: the
        timeout is 0 ms, so a tick costs one call per card when nothing happened (NVML_ERROR_TIMEOUT)."""
        for fn in ("nvmlEventSetWait_v2", "nvmlEventSetWait"):
            func: Callable[..., Any] | None = getattr(self.m, fn, None)
            if func is None:
                continue
            try:
                return func(event_set, 0)
            except self._error_type as exc:
                code = self.error_code(exc)
                if code == self._timeout_code:
                    return None
                if code == self._lost_code:
                    raise GpuLost(fn) from exc
                if code not in self._na_codes:
                    self.failures[fn] = self.failures.get(fn, 0) + 1
                return None
        return None

    def text(self, fn: str, *args: Any) -> str | None:
        """A call that returns a string (older bindings return bytes)."""
        value = self.call(fn, *args)
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        return value

    def shutdown(self) -> None:
        try:
            self.m.nvmlShutdown()
        except self._error_type as exc:  # shutting down must never fail the program
            log.debug("nvmlShutdown failed: %s", exc)


def load_nvml(module: Any | None = None) -> Nvml:
    """Import and initialise NVML. Raises :class:`NvmlUnavailable` with a plain reason."""
    if module is None:
        try:
            module = importlib.import_module("pynvml")
        except ImportError as exc:
            raise NvmlUnavailable("the nvidia-ml-py package (pynvml) is not installed") from exc
    try:
        module.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        reason = str(exc) or type(exc).__name__
        code = getattr(exc, "value", None)
        code = code if isinstance(code, int) else None
        raise NvmlUnavailable(f"NVML could not start ({reason}): no NVIDIA driver on this machine?", code) from exc
    log.debug("NVML started (%s)", getattr(module, "__name__", type(module).__name__))
    return_freed_heap()
    return Nvml(module)


def return_freed_heap() -> bool:
    """Hand the heap memory that malloc keeps after frees back to the kernel (glibc's ``malloc_trim``).

    ``nvmlInit`` allocates and frees about 10 MB of heap while it starts (measured on the H200 with
    benchmarks/rss_stages.py: "malloc in use 4.0 MB, free kept 10.4 MB" right after it). glibc keeps freed
    blocks below the top of the heap resident for reuse, and the monitor never needs them again: that is
    10 MB of every command's RSS for as long as it runs. ``malloc_trim(0)`` returns whole free pages anywhere
    in the heap. Returns False where there is no glibc (musl, macOS): nothing to do there.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


def cuda_version_text(version: Any) -> str | None:
    """NVML's CUDA driver version integer as text: 12080 -> "12.8" (NVML packs major*1000 + minor*10).

    Anything else (None, 0, an unsupported answer) -> None, shown "n/a". The one parser, shared by the
    live source and the doctor.
    """
    if not isinstance(version, int) or isinstance(version, bool) or version <= 0:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"
