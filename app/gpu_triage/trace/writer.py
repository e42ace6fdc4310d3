"""The crash-safe recorder: an Arrow IPC stream while recording, one Parquet file at the end.

Why two formats: a Parquet file is only readable once its footer is written, so a recorder killed with
``kill -9`` (OOM killer, node reboot, a scheduler's time limit) would lose the whole session. While
recording, every tick is therefore appended as one record batch to an Arrow IPC *stream* beside the
target, ``FILE.partial.arrows``, and flushed to the operating system at once: a killed process loses at most
the tick being written (a torn last batch, which the reader drops). The stream is also fsync'ed every
``FSYNC_EVERY_S`` seconds so that a power cut loses at most that much. The host metadata travels in the
stream schema's metadata, so the stream alone is a complete recording.

The stream is written by :mod:`gpu_triage.trace.arrow_ipc`, not pyarrow: a recorder never loads Arrow's
libraries while it records (they are 31 MB of a recorder's RSS for hours, for a few KB a tick).

``close()`` reads the stream back, writes the Parquet (zstd) to a temporary name in the same directory,
fsyncs and renames it over the target (atomic: readers see no file or the whole file) and only then removes
the stream. If anything fails the stream stays and ``gpu-triage recover`` finishes the job. That conversion
needs pyarrow: where the process has not loaded it, it runs in a child process
(:mod:`gpu_triage.trace.finish`), so that a long-running recorder does not keep 37 MB of libraries after its
first file (an hourly dataset closes one every hour); where pyarrow is loaded already it runs in-process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import gpu_triage
from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, Tick
from gpu_triage.openfiles import open_output
from gpu_triage.trace.arrow_ipc import StreamWriter, batch_message
from gpu_triage.trace.layout import TRACE_COLUMNS, tick_values, trace_metadata
from gpu_triage.trace.stream import (
    META_RECORDER_PID,
    STREAM_SUFFIX,
    lock_stream,
    read_stream_table,
    stream_path_for,
    target_for_stream,
)
from gpu_triage.trace.target import check_record_target, describe_os_error, remove_temporaries, write_parquet_atomic

logger = logging.getLogger(__name__)

FSYNC_EVERY_S = 5.0
STOP_CONVERTER = signal.SIGUSR1  # what gpu_triage.trace.finish stops on (it ignores the stop signals)
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGHUP, signal.SIGINT})


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None when it does not exist: a rename over it changes the inode."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _converter_command(stream: Path, target: Path) -> list[str]:
    """The child's command: our interpreter with ``-P`` (the working directory is not put first on the path:
    a ``json.py`` or ``queue.py`` of the user's there would shadow the standard library) and our package's
    root *appended* to the path, so the child finds the code this process runs without putting
    site-packages before the standard library."""
    root = str(Path(gpu_triage.__file__).resolve().parent.parent)
    code = (
        f"import sys; sys.path.append({root!r}); "
        "from gpu_triage.trace.finish import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-P", "-c", code, str(stream), str(target), str(os.getpid())]


class ConversionFailed(Exception):
    """The child converting the stream to Parquet failed; the message is its reason, in its own words."""


class TraceWriter:
    """Records ticks to ``path`` (Parquet) through a crash-safe stream; see the module docstring.

    Not thread-safe: call ``append`` from one thread at a time and ``close`` after the last append.
    """

    def __init__(
        self,
        path: Path | str,
        host: HostInfo,
        interval_s: float,
        *,
        overwrite: bool = False,
        clock: Callable[[], float] = time.monotonic,
        convert_in_child: bool | None = None,
    ) -> None:
        """``convert_in_child``: where ``close`` makes the Parquet; None (the default) decides then, in a
        child unless this process has loaded pyarrow already (see the module docstring)."""
        self._convert_in_child_choice = convert_in_child
        self.path = check_record_target(path, overwrite=overwrite, parent_must_exist=True)
        self.stream_path = stream_path_for(self.path)
        self.host = host
        self.interval_s = float(interval_s)
        self.ticks = 0
        self._clock = clock
        self._closed = False
        self._lock_fd: int | None = None
        # The pid tells a second recorder or `recover` who holds the lock (read from the stream's schema).
        metadata = {**trace_metadata(host, self.interval_s), META_RECORDER_PID: str(os.getpid()).encode()}
        self._skipped = 0
        self._stripped = 0  # ticks recorded without their job or process part, which could not be encoded
        self._fd = -1
        try:
            self._fd = open_output(self.stream_path, exclusive=True, mode=0o644)  # a planted link: EEXIST
            try:
                lock_stream(self._fd)  # before the first byte: nobody sees this stream unlocked with data
            except OSError:
                logger.warning("no flock on %s: recover cannot tell this recording from a leftover", self.stream_path)
            # A second descriptor on the same open file keeps the lock through the final conversion, after
            # the writing one is closed, until the stream is removed (flock belongs to the open file).
            self._lock_fd = os.dup(self._fd)
            self._writer = StreamWriter(self._fd, TRACE_COLUMNS, metadata)
        except OSError as exc:
            if self._fd >= 0:  # created but the schema could not be written: leave nothing behind
                self._unlock()
                os.close(self._fd)
                self.stream_path.unlink(missing_ok=True)
            raise UserError(f"cannot record to {self.path}: {describe_os_error(exc)}") from exc
        self._last_sync = self._clock()

    @property
    def bytes_written(self) -> int:
        """Size of the stream so far (for progress lines)."""
        try:
            return self.stream_path.stat().st_size
        except OSError:
            return 0

    def append(self, tick: Tick) -> None:
        """Append one tick; on return it is in the operating system's hands (survives ``kill -9``)."""
        if self._closed:
            raise ValueError("append after close")
        message = self._encode(tick)
        if message is None:
            return
        try:
            self._writer.write(message)
            # The batch went to the kernel in write(). fsync now and then for power cuts.
            now = self._clock()
            if now - self._last_sync >= FSYNC_EVERY_S:
                os.fsync(self._fd)
                self._last_sync = now
        except OSError as exc:
            raise UserError(
                f"writing {self.stream_path} failed after {self.ticks} ticks ({describe_os_error(exc)}); "
                f"the ticks so far are kept there: `gpu-triage recover {self.stream_path}`"
            ) from exc
        self.ticks += 1

    def _encode(self, tick: Tick) -> bytes | None:
        """The tick's record-batch message; None when even its cards cannot be encoded (the tick is lost).

        A value its column cannot hold (a negative count from a source's bug, an id past u32 in a pulse
        file) costs as little as it can: the parts that come from outside the driver (the job's pulse or
        log, the processes from /proc) are dropped first, so the cards, cores and disks of that tick are
        still recorded. Nothing is written before the encoding succeeds.
        """
        first_error: Exception | None = None
        for candidate in self._fallbacks(tick):  # lazily: a tick that encodes (every one, normally) copies nothing
            try:
                message = batch_message(TRACE_COLUMNS, [tick_values(candidate)])
            except (AttributeError, OverflowError, TypeError, ValueError) as exc:
                first_error = first_error or exc
                continue
            if candidate is not tick:
                self._stripped += 1
                if self._stripped == 1:
                    lost = [name for name, had, kept in (("job", tick.job, candidate.job),
                                                         ("process", tick.procs, candidate.procs)) if had and not kept]
                    dropped = " and ".join(lost) + (" parts" if len(lost) > 1 else " part")
                    logger.error("a tick at %s was recorded without its %s, which could not be encoded "
                                 "(%s: %s); the recording goes on", tick.ts, dropped,
                                 type(first_error).__name__, first_error)
            return message
        self._skipped += 1
        if self._skipped == 1:
            logger.error("a tick at %s could not be recorded (%s: %s); skipped, the recording goes on",
                         tick.ts, type(first_error).__name__, first_error)
        return None

    @staticmethod
    def _fallbacks(tick: Tick) -> Iterator[Tick]:
        """The tick, then without its job, then without its processes too (only the parts it has)."""
        yield tick
        if tick.job is not None:
            yield replace(tick, job=None)
        if tick.procs:
            yield replace(tick, job=None, procs=[])

    def close(self) -> Path:
        """Finish: write the Parquet atomically, remove the stream, return the Parquet path.

        With no tick recorded, the stream is removed and UserError (exit 1) says nothing was written.
        """
        if self._closed:
            return self.path
        self._closed = True
        try:
            self._writer.close()
            os.fsync(self._fd)
        except OSError:
            pass  # the batches already written are what counts; the end-of-stream marker is optional
        finally:
            os.close(self._fd)
        if self._skipped:
            logger.error(
                "%d ticks of %s could not be recorded (values their columns cannot hold)", self._skipped, self.path
            )
        if self._stripped:
            logger.error("%d ticks of %s were recorded without their job or process part (values their columns "
                         "cannot hold)", self._stripped, self.path)
        try:
            if self.ticks == 0:
                self.stream_path.unlink(missing_ok=True)
                raise UserError(f"no tick was recorded before the stop: nothing written to {self.path}", exit_code=1)
            try:
                if self._in_child():
                    self._convert_in_child()
                else:
                    table, _complete = read_stream_table(self.stream_path)
                    write_parquet_atomic(table, self.path)
            except (OSError, ConversionFailed) as exc:
                reason = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
                raise UserError(
                    f"writing {self.path} failed ({reason}); the {self.ticks} ticks are kept in "
                    f"{self.stream_path}: `gpu-triage recover {self.stream_path}`"
                ) from exc
            self.stream_path.unlink(missing_ok=True)
        finally:
            self._unlock()
        return self.path

    def _in_child(self) -> bool:
        if self._convert_in_child_choice is not None:
            return self._convert_in_child_choice
        return "pyarrow" not in sys.modules and bool(sys.executable)

    def _convert_in_child(self) -> None:
        """Run :mod:`gpu_triage.trace.finish` on the stream and wait for it; ConversionFailed with its reason.

        The child ignores the stop signals (a systemd or Slurm stop signals every process of the unit at
        once: the recorder decides, and an hourly file being converted is finished) and gets a session of
        its own (a Ctrl-C at the terminal reaches only the recorder). Whatever interrupts its start or the wait here (a
        signal's exception: record's second Ctrl-C) stops the child with SIGUSR1, on which it removes its
        temporary file, and is raised again. Whenever the child has renamed its file over the target, the
        Parquet is whole and the stream goes, whatever its exit status says; whenever it has not, its
        temporary file goes (a SIGKILL, the OOM killer, leaves it otherwise) and the stream stays.
        """
        before = _identity(self.path)
        began = time.monotonic()
        # The stop signals blocked while the child is started: it inherits the mask through exec and unblocks
        # them only once it ignores them, so no stop signal can kill it in its first milliseconds. A signal
        # meant for this process meanwhile waits for the unblocking below (or goes to another thread).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        child: subprocess.Popen[bytes] | None = None
        unstarted: OSError | None = None
        try:
            try:
                child = subprocess.Popen(  # noqa: S603 - our own interpreter and module, paths as arguments
                    _converter_command(self.stream_path, self.path),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:  # the interpreter went away (a venv rebuilt during a days-long recording)
                unstarted = exc
            finally:
                # a stop signal that came while blocked is handled here, and its exception (record's second
                # Ctrl-C) must stop the child just started like one during the wait: hence the outer try
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            if child is not None:
                _out, err = child.communicate()
        except BaseException:
            if child is not None:
                child.send_signal(STOP_CONVERTER)
                child.wait()
                self._after_child(before)
            raise
        if child is None:
            logger.warning("cannot start the converter (%s: %s): converting %s in this process",
                           sys.executable, unstarted, self.stream_path)
            from gpu_triage.heavy_imports import import_pyarrow_lean  # noqa: PLC0415

            import_pyarrow_lean()
            table, _complete = read_stream_table(self.stream_path)
            write_parquet_atomic(table, self.path)
            return
        logger.info("converted %s to %s in a child process (pid %d, %.2f s, exit %d)", self.stream_path, self.path,
                    child.pid, time.monotonic() - began, child.returncode)
        if child.returncode != 0 and not self._after_child(before):
            lines = err.decode("utf-8", "replace").strip().splitlines()
            if child.returncode < 0:
                reason = f"the converter was stopped by {signal.Signals(-child.returncode).name}"
            else:
                reason = lines[-1] if lines else f"the converter exited with status {child.returncode}"
            if len(lines) > 1:
                logger.error("the converter of %s said:\n%s", self.stream_path, "\n".join(lines[-20:]))
            raise ConversionFailed(reason)

    def _after_child(self, before: tuple[int, int] | None) -> bool:
        """After a converter that did not say it succeeded: True (the stream removed) when it had renamed
        its file over the target all the same, else False with its temporary file removed."""
        if _identity(self.path) not in (None, before):
            self.stream_path.unlink(missing_ok=True)
            return True
        remove_temporaries(self.path)
        return False

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def abort(self) -> None:
        """Stop without converting: the stream stays for ``gpu-triage recover`` (used on fatal errors)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close()
        except OSError:
            pass
        finally:
            os.close(self._fd)
            self._unlock()


__all__ = [
    "STREAM_SUFFIX",
    "TraceWriter",
    "stream_path_for",
    "target_for_stream",
]
