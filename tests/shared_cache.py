"""A result computed once per test session, not once per test process: the replay of a real recording through
the engine costs seconds, and several test files (and both xdist workers) ask for the same ones.

``shared`` caches a function in the process (functools.cache) and, when the session has a shared directory
(conftest.py sets ``GPU_TRIAGE_TEST_SHARED`` in the controlling process, which its xdist workers inherit), as a
pickle there: the first process to ask computes it under a lock while another asking for the same waits,
then reads it. The directory lives for one session only, so nothing stale survives a code change."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ENV = "GPU_TRIAGE_TEST_SHARED"
F = TypeVar("F", bound=Callable[..., Any])


def shared(fn: F) -> F:
    signature = inspect.signature(fn)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)  # raw(x), raw(x, False) and raw(x, stripped=False): one key
        bound.apply_defaults()
        return cached(*bound.args)

    @functools.cache
    def cached(*args: Any) -> Any:
        where = os.environ.get(ENV)
        if not where or not Path(where).is_dir():
            return fn(*args)
        key = hashlib.sha256(repr((fn.__module__, fn.__qualname__, args)).encode()).hexdigest()[:32]
        path = Path(where) / f"{key}.pickle"
        with open(Path(where) / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker, computing the same, finishes first
            if path.exists():
                with path.open("rb") as f:
                    return pickle.load(f)
            value = fn(*args)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            with tmp.open("wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            tmp.rename(path)
            return value

    return functools.wraps(fn)(call)  # type: ignore[return-value]
