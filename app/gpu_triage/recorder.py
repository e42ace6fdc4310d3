"""``gpu-triage record``: headless recording for tmux, nohup, systemd and batch jobs.

The sampler thread samples the source once per interval and appends each tick to the crash-safe stream
(:class:`~gpu_triage.trace.writer.TraceWriter`); the main thread only waits, draws one progress line when
stdout is a terminal, and turns Ctrl-C, SIGTERM and SIGHUP into a clean stop: the sampler is stopped, the
Parquet is written, its path and tick count printed.

``--fast`` (sim sources only) skips the pacing and writes simulated ticks as fast as they are made:
``--duration`` then counts simulated seconds. It makes day-long test traces in seconds.

Each tick is diagnosed as the dashboard would before it is written, and carries the engine's raw verdict
(trace v3, :mod:`gpu_triage.verdicts.judge`): a fleet's summary then reads the verdicts instead of running the
engine again. The shown verdict's hysteresis runs too, so a log file at level info (``--log-file``) says when
the verdict changes (``verdict A -> B``) during an unattended recording.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.fleet.dataset import DatasetWriter, open_recording
from gpu_triage.hostmeta import recorder_extra
from gpu_triage.logs import SHOWN
from gpu_triage.model import Tick
from gpu_triage.sources.base import Source
from gpu_triage.sources.spec import make_source, sim_scenarios  # noqa: F401 - also this module's API
from gpu_triage.stopsignals import WAKE_S, StopSignals
from gpu_triage.trace.writer import TraceWriter
from gpu_triage.units import fmt_bytes
from gpu_triage.verdicts.settings import with_settings

log = logging.getLogger(__name__)
Writer = TraceWriter | DatasetWriter  # one file, or a rotating dataset (-o DIR/)

PROGRESS_EVERY_S = 0.5


def human_seconds(s: float) -> str:
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def ticks_for(duration_s: float | None, interval_s: float) -> int | None:
    """How many ticks ``--duration`` records: duration / interval, rounded, at least one. The first tick
    comes one interval after the start and covers it, so 10 s at 2 s is 5 ticks, at t = 2, 4, 6, 8, 10
    (10 s of data); --fast makes the same count of simulated ticks."""
    return None if not duration_s else max(1, round(duration_s / interval_s))


def _stamper(config: Config | None, writer: Writer, interval_s: float, cpu_count: int | None
             ) -> Callable[[Tick], Tick]:
    """Each recorded tick with the engine's raw verdict (trace v3's ``verdict`` column), from the one judge
    (:class:`~gpu_triage.verdicts.judge.Judge`) whose window starts afresh with each file the writer opens.
    Its hysteresis logs the shown verdict's changes (``verdict A -> B``) for a log file at info."""
    from gpu_triage.verdicts.judge import Judge  # noqa: PLC0415 - numpy and the engine

    config = config or Config()
    judge = Judge(config.thresholds, config.window_s, interval_s, cpu_count)
    return lambda tick: judge.take(tick, fresh=opens_file(writer, tick)).stamped()


def opens_file(writer: Writer, tick: Tick) -> bool:
    """Whether ``tick`` will be the first of a file: a single recording's first tick, or a dataset's tick
    that begins the next hour's file (where ``diagnose FILE`` starts its window)."""
    if isinstance(writer, DatasetWriter):
        return writer.opens_file(tick.ts)
    return writer.ticks == 0


def record_source(
    source: Source,
    output: Path,
    interval_s: float,
    *,
    duration_s: float | None = None,
    fast: bool = False,
    describe_machine: bool = True,
    out: Any = None,
    config: Config | None = None,
    rotate_s: float | None = None,
    stop: threading.Event | None = None,
) -> tuple[Path, int]:
    """Record ``source`` to ``output`` until ``duration_s`` (:func:`ticks_for`) or a stop signal; closes
    the source. With ``stop`` (``gpu-triage run``: set when the job ends) the caller owns the signals and the
    recording ends when the event is set.

    Returns the Parquet path and the number of ticks. ``out`` (default stdout) gets the start line, the
    progress line (terminals only) and the summary. Each tick carries its raw verdict, diagnosed with
    ``config``'s window and thresholds (the defaults without one); see :func:`_stamper`.
    """
    out = QuietOnFailure(sys.stdout if out is None else out)
    try:
        host = source.host_info()
        host.extra.update(recorder_extra(source.name, interval_s, describe_machine=describe_machine))
        judging = config or Config()
        host = with_settings(host, judging.thresholds, judging.window_s)  # what the stored verdicts were judged with
        writer = open_recording(output, host, interval_s, rotate_s=rotate_s)
        for message in source.status().messages:
            log.info("source %s: %s", source.name, message)
            print(f"gpu-triage: {message}", file=QuietOnFailure(sys.stderr))
        log.info("recording %s to %s every %g s%s (stream %s)", source.name, writer.path, interval_s,
                 f" for {duration_s:g} s" if duration_s else "", writer.stream_path)
        stamp = _stamper(judging, writer, interval_s, host.cpu_count)
        print(
            f"recording {source.name} to {writer.path} every {interval_s:g} s"
            + (f" for {human_seconds(duration_s)}" if duration_s else "")
            + ("" if fast else "; Ctrl-C to stop"),
            file=out,
            flush=True,
        )
        began = time.monotonic()
        try:
            if fast:
                stopped_by = _record_fast(source, writer, interval_s, duration_s, stamp)
            else:
                stopped_by = _record_paced(source, writer, interval_s, duration_s, out, stamp, stop)
        except BaseException as exc:
            writer.abort()  # keep the stream for `gpu-triage recover`
            log.error("recording to %s stopped by %s after %d ticks; the stream %s is kept for "
                      "`gpu-triage recover`", writer.path, type(exc).__name__, writer.ticks, writer.stream_path,
                      extra=SHOWN)
            raise
        elapsed = time.monotonic() - began
    finally:
        source.close()
    path = _close_despite_signals(writer)
    log.info("recording stopped (%s): %d ticks in %s, %s", stopped_by, writer.ticks, path,
             fmt_bytes(path.stat().st_size))
    print(
        f"recorded {writer.ticks} ticks ({human_seconds(writer.ticks * interval_s)} of data in "
        f"{human_seconds(elapsed)}) to {path} ({_size(writer, path)})",
        file=out,
        flush=True,
    )
    return path, writer.ticks


class _StopDuringConversion(BaseException):
    """A stop signal arrived while the stream was being turned into the Parquet."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _close_despite_signals(writer: Writer) -> Path:
    """``writer.close()``, telling the user what is kept if a second stop signal cuts it short.

    After the first Ctrl-C / SIGTERM the recorder converts the stream (seconds for a day). A second signal
    stops the conversion (its temporary file is removed), the stream stays, and one line says how to
    recover it (killed silently, exit 143, the user would not know the stream was kept); the exit status is
    128 + the signal's number, as if the signal had killed it.
    """

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise _StopDuringConversion(signum)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in StopSignals.SIGNALS:
            previous[sig] = signal.signal(sig, interrupt)
    try:
        return writer.close()
    except _StopDuringConversion as stop:
        name = signal.Signals(stop.signum).name
        if writer.path.exists() and not writer.stream_path.exists():
            return writer.path  # it had finished: the Parquet is whole
        raise UserError(
            f"stopped by {name} while writing {writer.path}: the {writer.ticks} ticks are kept in "
            f"{writer.stream_path}: run `gpu-triage recover {writer.stream_path}`",
            exit_code=128 + stop.signum,
        ) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _size(writer: Writer, path: Path) -> str:
    if isinstance(writer, DatasetWriter):
        return f"{fmt_bytes(writer.total_bytes)} in {len(writer.files)} files"
    return fmt_bytes(path.stat().st_size)


def _record_fast(
    source: Source, writer: Writer, interval_s: float, duration_s: float | None, stamp: Callable[[Tick], Tick]
) -> str:
    """Sample back to back without pacing until the simulated duration is covered or a stop signal.
    Returns what stopped it."""
    stop = threading.Event()
    limit = ticks_for(duration_s, interval_s)
    with StopSignals(stop) as signals:
        while not stop.is_set() and (limit is None or writer.ticks < limit):
            writer.append(stamp(source.sample()))
    return signals.received or "duration reached"


def _record_paced(
    source: Source,
    writer: Writer,
    interval_s: float,
    duration_s: float | None,
    out: Any,
    stamp: Callable[[Tick], Tick],
    external: threading.Event | None = None,
) -> str:
    """Sample once per interval in the sampler thread until the duration, a stop signal or ``external`` is
    set (then the caller handles the signals); returns what stopped it. A disk error ends the recording (raised
    here); a source error is said once and skipped."""
    from gpu_triage.sampler import Sampler  # noqa: PLC0415

    stop = threading.Event()  # ours: the tick limit, a disk failure, a signal; ``external`` stays the caller's
    failure: list[BaseException] = []
    reported_errors: set[str] = set()

    limit = ticks_for(duration_s, interval_s)

    def on_tick(tick: Tick) -> None:
        if failure or (limit is not None and writer.ticks >= limit):
            return
        try:
            writer.append(stamp(tick))
        except BaseException as exc:  # a disk error ends the recording; the main thread re-raises it
            failure.append(exc)
            stop.set()
            return
        if limit is not None and writer.ticks >= limit:
            stop.set()

    def on_error(exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if text not in reported_errors:  # say each distinct source problem once, keep recording
            reported_errors.add(text)
            print(
                f"gpu-triage: sampling failed ({text}); still recording", file=QuietOnFailure(sys.stderr), flush=True
            )

    tty = _is_tty(out)
    sampler = Sampler(source, interval_s, on_tick, on_error)
    began = time.monotonic()
    progress: Callable[[], None] = lambda: _progress(out, writer, time.monotonic() - began)  # noqa: E731
    signals = StopSignals(stop)
    with signals if external is None else contextlib.nullcontext(signals):  # with external: not entered
        sampler.start()
        try:
            while not stop.is_set() and not (external is not None and external.is_set()):
                # the tick count ends a --duration; the clock only when ticks went missing (a source error):
                # one interval of grace after the last tick was due
                left = None if duration_s is None else duration_s + interval_s - (time.monotonic() - began)
                if left is not None and left <= 0:
                    break
                # off a terminal there is no progress line to draw: sleep until a stop or the duration's end
                every = PROGRESS_EVERY_S if tty else WAKE_S  # stopsignals.py: why not longer
                stop.wait(every if left is None else min(every, left))
                if tty:
                    progress()
        finally:
            sampler.stop()
            if tty:
                progress()
                print(file=out, flush=True)
    if failure:
        raise failure[0]
    if external is not None and external.is_set() and not stop.is_set():
        return "the caller's stop"
    return signals.received or "duration reached"


class QuietOnFailure:
    """Wraps the recorder's stdout so that losing it never stops a recording.

    Headless recorders outlive their terminals: stdout piped to ``head`` that exits, an SSH session whose
    pty went away, ``>&-`` in a batch script. The start line, the progress line and the summary are a
    courtesy; the ticks are the product. The first failed write (BrokenPipeError, EIO, a closed file)
    silences the stream for the rest of the run instead of aborting it.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._dead = stream is None

    def write(self, text: str) -> int:
        if not self._dead:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._dead = True
        return len(text)

    def flush(self) -> None:
        if not self._dead:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._dead = True

    def isatty(self) -> bool:
        return not self._dead and _is_tty(self._stream)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _progress(out: Any, writer: Writer, elapsed: float) -> None:
    line = f"  {writer.ticks} ticks  {human_seconds(elapsed)}  {fmt_bytes(writer.bytes_written)}"
    print("\r" + line + "\x1b[K", end="", file=out, flush=True)
