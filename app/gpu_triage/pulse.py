"""The job's own pulse, from inside the training script: two lines, standard library only.

    from gpu_triage import pulse
    for batch in pulse.watch(loader, batch_size=B):   # or call pulse.step(n) at the end of each step
        ...

``watch`` times each step of the loop: the time spent inside the loader's ``__next__`` (waiting for the
next batch) and the rest (the step itself), per rank (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` from the
environment torchrun sets). ``step(n)`` counts one step of ``n`` samples where the loop is not a plain
``for`` over a loader. It knows no data wait then, and reports none (the dashboard shows n/a and the
diagnosis takes it as "not measured": it rules nothing out). A loop that knows its wait says so:
``step(n, data_wait_s=w)`` (``0.0`` where there is no input pipeline at all, as in ``gpu-triage baseline``);
the step's length is then the time since the previous ``step`` call.

How it publishes, and why a file: each process keeps a few cumulative counters (steps, samples, seconds
waiting for data, seconds of steps, time of the last step) and at most every ``PUBLISH_EVERY_S`` writes them
as one small JSON record, ``pulse-<pid>.json``, in the runtime directory (``$GPU_TRIAGE_PULSE_DIR``, else
``$XDG_RUNTIME_DIR/gpu-triage``, else ``/tmp/gpu-triage-<uid>``): one ``pwrite`` of a fixed 512-byte record
at offset 0 of a file opened once, carrying its own CRC32 so that a reader that catches a rewrite half done
rejects it and keeps its last reading. (Writing a temporary file and renaming it at every publication measured 0.5 ms
on a disk-backed /tmp, ``O_TRUNC`` flushing; the ``pwrite`` is 2 us.) A file rather than a Unix datagram
socket because

- several readers can watch the same job at once (the live dashboard *and* a ``gpu-triage record`` beside
  it); a datagram socket has exactly one receiver, bound by whoever started first;
- a reader started later (or restarted) sees the counters at once: nothing is lost while nobody listens,
  and nothing queues up either (a socket with no reader fails every send; one with a slow reader fills);
- the counters are cumulative, so a reader that misses updates still computes exact rates from any two
  reads; a lost datagram would be a lost step count;
- it costs one ``pwrite`` a few times a second, not a system call per step: per step only two
  ``perf_counter`` calls and a few additions run.

It never raises into training: every error of its own is swallowed, counted (``stats()["errors"]``) and
logged once at debug level; exceptions from the loader itself pass through untouched. Memory is a fixed
handful of numbers. The file is removed when the process exits normally.

The directory may be one another local user made first (``/tmp/gpu-triage-UID`` is a predictable name in a
shared ``/tmp``): it is used only when it is a real directory (not a symbolic link) owned by this user and
not writable by group or others; otherwise nothing is published and one warning says why and what to do.
The file is made under a random temporary name (``O_CREAT|O_EXCL|O_NOFOLLOW``, relative to the checked
directory's descriptor) and renamed into place, so no planted link is ever followed and a reader never sees
it half made. The record carries the process's start time (``/proc/self/stat``), so that a reader can tell
this process from a later one given the same pid.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import socket
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["PUBLISH_EVERY_S", "decode_record", "encode_record", "pulse_dir", "start_ticks_of", "stats", "step",
           "watch"]

log = logging.getLogger("gpu_triage.pulse")

PUBLISH_EVERY_S = 0.25  # the dashboard ticks every 0.5 s at the fastest: four updates per tick
FORMAT_VERSION = 1
T = TypeVar("T")


def pulse_dir() -> str:
    """Where pulse files are written and read: $GPU_TRIAGE_PULSE_DIR, else $XDG_RUNTIME_DIR/gpu-triage,
    else /tmp/gpu-triage-UID."""
    explicit = os.environ.get("GPU_TRIAGE_PULSE_DIR")
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "gpu-triage")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"gpu-triage-{uid}")


def _start_ticks(pid: int | str = "self") -> int | None:
    """The process's start time in clock ticks since boot (field 22 of ``/proc/PID/stat``), None off Linux.
    With the pid it tells one process from a later one that was given the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return start_ticks_of(f.read(4096))
    except OSError:
        return None


def start_ticks_of(stat_line: bytes) -> int | None:
    """Field 22 of a ``/proc/PID/stat`` line. The command name (field 2) may hold spaces and parentheses:
    the fields after its last ")" are fixed."""
    try:
        return int(stat_line[stat_line.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def _dir_problem(st: os.stat_result, uid: int) -> str | None:
    """Why a pulse directory with this ``fstat`` must not be used, None when it may."""
    import stat as stat_mod  # noqa: PLC0415 - only on the first publication

    if not stat_mod.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not to this user (uid {uid})"
    if st.st_mode & 0o022:
        return f"group or others may write to it (mode {stat_mod.S_IMODE(st.st_mode):o})"
    return None


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


class _Pulse:
    """The counters of this process and their publication (one instance per process)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.rank = _env_int("RANK")
        self.local_rank = _env_int("LOCAL_RANK")
        self.world_size = _env_int("WORLD_SIZE")
        self.started = time.time()
        self.start_ticks = _start_ticks()
        self.steps = 0
        self.samples = 0
        self.samples_known = True  # False once a step of unknown size was counted
        self.wait_s = 0.0  # seconds inside the loader's __next__
        self.step_s = 0.0  # seconds of whole steps (wait + the rest), for steps whose wait was measured
        self.timed_steps = 0
        self.last_step_wall = 0.0
        self.last_step_perf: float | None = None  # perf_counter of the previous step() call
        self.errors = 0
        self._logged = False
        self._next_publish = 0.0
        self._path: str | None = None
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._refused = False  # the directory is not safe to write in: nothing is published
        self._registered = False
        self.host = socket.gethostname()[:64]

    # -- counting (hot path: keep it to arithmetic) -----------------------------------------------
    def count(self, samples: int | None, wait_s: float | None, step_s: float | None, now: float) -> None:
        self.steps += 1
        if samples is None:
            self.samples_known = False
        else:
            self.samples += samples
        if wait_s is not None and step_s is not None:
            self.wait_s += wait_s
            self.step_s += step_s
            self.timed_steps += 1
        if now >= self._next_publish:
            self._next_publish = now + PUBLISH_EVERY_S
            self.publish()

    # -- publishing --------------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        return {
            "v": FORMAT_VERSION,
            "pid": self.pid,
            "host": self.host,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "started": self.started,
            "start_ticks": self.start_ticks,
            "t": time.time(),
            "steps": self.steps,
            "samples": self.samples if self.samples_known else None,
            "wait_s": self.wait_s,
            "step_s": self.step_s,
            "timed_steps": self.timed_steps,
            "last_step": self.last_step_wall,
            "errors": self.errors,
        }

    def publish(self) -> None:
        try:
            if self._fd is None:
                if self._refused:
                    return
                self._open()
                if self._fd is None:
                    return
            self.last_step_wall = time.time()
            os.pwrite(self._fd, encode_record(self.record()), 0)
        except Exception as exc:  # noqa: BLE001 - never into training: counted, logged once at debug
            self.failed(exc)

    def _open(self) -> None:
        """Check the directory, then create this process's file in it atomically, following no link."""
        directory = pulse_dir()
        uid = os.geteuid()
        parent = os.path.dirname(directory.rstrip("/"))
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass  # checked below, through the descriptor, whoever made it
        try:
            dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            self.refuse(directory, "it is a symbolic link or not a directory")
            return
        problem = _dir_problem(os.fstat(dfd), uid)
        if problem is not None:
            os.close(dfd)
            self.refuse(directory, problem)
            return
        name = f"pulse-{self.pid}.json"
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            os.pwrite(fd, encode_record(self.record()), 0)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a name, never writes through it
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dfd)
            os.close(dfd)
            raise
        self._fd, self._dir_fd, self._path = fd, dfd, os.path.join(directory, name)
        if not self._registered:
            atexit.register(self.remove)
            self._registered = True

    def refuse(self, directory: str, why: str) -> None:
        """Publish nothing from this process, and say so once: a warning, never an exception."""
        self._refused = True
        self.errors += 1
        log.warning("gpu_triage.pulse: not publishing to %s: %s; remove it or set GPU_TRIAGE_PULSE_DIR to a "
                    "directory of your own (mode 700); training goes on", directory, why)

    def failed(self, exc: BaseException) -> None:
        self.errors += 1
        if not self._logged:
            self._logged = True
            log.debug("gpu_triage.pulse: publishing failed (%s: %s); training goes on, errors are counted",
                      type(exc).__name__, exc)

    def remove(self) -> None:
        try:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._path is not None and self._dir_fd is not None and self.pid == os.getpid():
                os.unlink(os.path.basename(self._path), dir_fd=self._dir_fd)
        except OSError:
            pass
        finally:
            if self._dir_fd is not None and self.pid == os.getpid():
                os.close(self._dir_fd)
                self._dir_fd = None


RECORD_BYTES = 512  # every record is exactly this long: one pwrite at offset 0 replaces the last one


def encode_record(rec: dict[str, Any]) -> bytes:
    """``CRC32 LENGTH JSON`` padded with spaces to RECORD_BYTES and ended by a newline.

    A reader that catches the file in the middle of a rewrite sees a checksum that does not match and
    keeps its previous reading (the counters are cumulative, so nothing is lost).
    """
    body = json.dumps(rec, separators=(",", ":")).encode()
    head = b"%08x %04d " % (zlib.crc32(body), len(body))
    out = head + body
    if len(out) >= RECORD_BYTES:
        raise ValueError(f"pulse record of {len(out)} bytes exceeds {RECORD_BYTES}")
    return out.ljust(RECORD_BYTES - 1) + b"\n"


def decode_record(data: bytes) -> dict[str, Any] | None:
    """The record in ``data``, or None when it is torn, damaged or not a pulse record."""
    try:
        crc = int(data[:8], 16)
        length = int(data[9:13])
        body = data[14 : 14 + length]
        if len(body) != length or zlib.crc32(body) != crc:
            return None
        rec = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


_PULSE: _Pulse | None = None


def _get() -> _Pulse:
    global _PULSE
    if _PULSE is None or _PULSE.pid != os.getpid():  # a forked child (DataLoader worker) starts its own
        _PULSE = _Pulse()
    return _PULSE


def _batch_len(batch: Any) -> int | None:
    """Samples in a batch without importing torch: the first dimension of the first array-like inside."""
    try:
        item = batch
        for _ in range(3):
            shape = getattr(item, "shape", None)
            if shape is not None and len(shape):
                return int(shape[0])
            if isinstance(item, dict):
                item = next(iter(item.values()))
            elif isinstance(item, (list, tuple)) and item:
                item = item[0]
            else:
                return None
    except Exception:  # noqa: BLE001 - an exotic batch type: unknown size, steps still count
        return None
    return None


def watch(loader: Iterable[T], batch_size: int | None = None) -> Iterator[T]:
    """Yield ``loader``'s batches unchanged, timing each step's wait for data and its whole length.

    ``batch_size``: samples per step on this rank; without it the first dimension of the batch is used
    when the batch has one (a tensor, or a tuple/dict of tensors).
    """
    pulse = _get()
    perf = time.perf_counter
    it = iter(loader)
    while True:
        t0 = perf()
        batch = next(it, _END)  # the loader's own exceptions pass through: they are the training's
        if batch is _END:
            pulse.publish()
            return
        t1 = perf()
        yield batch
        try:
            n = batch_size if batch_size is not None else _batch_len(batch)
            t2 = perf()
            pulse.count(n, t1 - t0, t2 - t0, t2)
        except Exception as exc:  # noqa: BLE001 - counted and logged by failed()
            pulse.failed(exc)


_END: Any = object()


def step(n: int | None = None, data_wait_s: float | None = None) -> None:
    """Count one finished step of ``n`` samples (None: samples unknown, steps still count). Never raises.

    ``data_wait_s``: seconds this step waited for its input, where the caller knows it (``0.0``: the loop
    has no input pipeline). Without it the data wait is unknown and none is reported. With it, the step
    lasted from the previous ``step`` call to this one (the first call only starts the clock)."""
    try:
        p = _get()
        now = time.perf_counter()
        prev, p.last_step_perf = p.last_step_perf, now
        timed = data_wait_s is not None and prev is not None and now > prev
        p.count(n, data_wait_s if timed else None, now - prev if timed and prev is not None else None, now)
    except Exception as exc:  # noqa: BLE001 - counted and logged by failed()
        try:
            _get().failed(exc)
        except Exception:  # noqa: BLE001, S110 - nothing left to report it with; training goes on
            pass


def stats() -> dict[str, Any]:
    """This process's counters as published (for tests and for the curious)."""
    return _get().record()


PR_SET_PTRACER = 0x59616D61  # Yama's prctl option (include/uapi/linux/prctl.h)


def tracer_call() -> Callable[[int], bool] | None:
    """``call(pid)``: ``prctl(PR_SET_PTRACER, pid)``, so that ``pid`` and its descendants may read this process
    under Yama's ptrace_scope=1; None where there is no libc to ask. Resolved from the symbols already loaded
    (no library search, no subprocess), so that the call itself is safe between fork and exec."""
    try:
        import ctypes  # noqa: PLC0415 - only under gpu-triage run

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def call(pid: int) -> bool:
        return bool(prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0) == 0)

    return call


def _name_tracer() -> None:
    """Under ``gpu-triage run`` (``GPU_TRIAGE_TRACER``: its pid), let that process and its py-spy read this one:
    what kernel.yama.ptrace_scope=1 asks of a process that is not the reader's descendant (torchrun's ranks are
    gpu-triage's grandchildren, py-spy its child). One system call at import; nothing at all without the variable
    or off Linux."""
    pid = _env_int("GPU_TRIAGE_TRACER")
    if pid is None or pid <= 0:
        return
    call = tracer_call()
    if call is None or not call(pid):
        log.debug("could not name gpu-triage (pid %d) as this process's tracer", pid)


_name_tracer()
