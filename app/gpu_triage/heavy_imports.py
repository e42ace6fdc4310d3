"""numpy and pyarrow, loaded the cheap way (docs/performance.md measures both).

* numpy on one OpenBLAS thread: our arrays hold a few thousand numbers, and OpenBLAS starting one thread
  per core cost 2.0 s of CPU at start-up on the 16-core H200 machine.
* pyarrow without numpy and on malloc, for the stream-to-Parquet conversion: it needs neither numpy (only to
  convert numpy arrays) nor mimalloc's segments (4 MB resident for a few one-row batches).
* asyncio without the ssl module, for the dashboard: its event loop opens no TLS connection, and loading
  ``ssl`` maps and starts OpenSSL (4.4 MB resident).
"""

from __future__ import annotations

import os
import sys

# pyarrow loads numpy when it can but needs it only to convert to and from numpy arrays (optional since 16)
PYARROW_WITHOUT_NUMPY_SINCE = 16


def import_numpy_with_one_blas_thread() -> None:
    """Load numpy with a single OpenBLAS thread, then give the user's environment back.

    Our arrays hold a few thousand numbers: a multi-threaded BLAS buys nothing, and OpenBLAS starting one
    thread per core cost 2.0 s of CPU at start-up on the 16-core H200 machine (numpy's import: 2.27 s user
    time with the default, 0.26 s with one thread). OpenBLAS reads OPENBLAS_NUM_THREADS once, when it loads,
    so the variable is restored right after: recordings and the doctor must see the training job's
    settings, not ours.
    """
    if "numpy" in sys.modules:
        return
    key = "OPENBLAS_NUM_THREADS"
    saved = os.environ.get(key)
    os.environ[key] = "1"
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    finally:
        if saved is None:
            del os.environ[key]
        else:
            os.environ[key] = saved


def import_asyncio_without_tls() -> None:
    """Load asyncio (Textual's event loop) without loading the ssl module.

    asyncio imports ``ssl`` only if it can (``try: import ssl`` in base_events, selector_events and
    sslproto) and needs it only for TLS connections, which the dashboard never opens. Loading ``ssl`` maps
    libssl and libcrypto and starts OpenSSL: 4.4 MB of the dashboard's RSS on the CI box (asyncio alone:
    19.4 MB with it, 15.0 without; docs/performance.md, "Measured on one H200"). ``ssl`` is hidden only while asyncio
    loads: a later ``import ssl`` works as usual (prometheus_client's, for ``--metrics``), and only
    asyncio's own TLS (``ssl=`` in ``loop.create_connection``) stays unavailable in this process.
    """
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` raises ImportError meanwhile
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


def import_pyarrow_lean() -> None:
    """Load pyarrow with malloc as its memory pool and without numpy (where pyarrow allows it).

    numpy is hidden only while pyarrow loads; an older pyarrow that requires numpy is loaded the ordinary
    way. The pool is chosen through ARROW_DEFAULT_MEMORY_POOL, read once when pyarrow loads; a value the user
    set is kept, and the environment is restored right after.
    """
    if "pyarrow" in sys.modules:
        return
    hide_numpy = "numpy" not in sys.modules and _pyarrow_major() >= PYARROW_WITHOUT_NUMPY_SINCE
    key = "ARROW_DEFAULT_MEMORY_POOL"
    pool_set = key in os.environ
    if not pool_set:
        os.environ[key] = "system"
    if hide_numpy:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # `import numpy` raises ImportError meanwhile
    try:
        import pyarrow  # noqa: F401
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        pass  # reported where it is imported for use
    finally:
        if hide_numpy:
            del sys.modules["numpy"]
        if not pool_set:
            del os.environ[key]


def _pyarrow_major() -> int:
    """pyarrow's major version without importing it (0 when unknown): its generated version file, read as
    text. importlib.metadata cost 20 ms of a start-up."""
    import importlib.util  # noqa: PLC0415
    import re  # noqa: PLC0415

    try:
        spec = importlib.util.find_spec("pyarrow")
        where = list(spec.submodule_search_locations or []) if spec is not None else []
        text = open(os.path.join(where[0], "_generated_version.py"), encoding="utf-8").read() if where else ""
    except (ImportError, OSError, ValueError):
        return 0
    found = re.search(r"""^(?:__version__ = )?version = ['"](\d+)\.""", text, re.MULTILINE)
    return int(found.group(1)) if found else 0
