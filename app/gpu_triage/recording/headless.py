"""The headless recorder (``gpu-triage record``, ``gpu-triage run --record``): for tmux, nohup, systemd and
batch jobs.

The sampler thread samples the source once per interval and appends each tick to the recording
(:class:`~gpu_triage.recording.session.Recording`, through its crash-safe stream); the main thread only
waits, draws one progress line when stdout is a terminal, and turns Ctrl-C, SIGTERM and SIGHUP into a clean
stop: the sampler is stopped, the Parquet is written, its path and tick count printed.

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
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.logs import SHOWN
from gpu_triage.model import Tick
from gpu_triage.recording.session import Recording, recording_host
from gpu_triage.sources.base import Source
from gpu_triage.stopsignals import WAKE_S, StopSignals
from gpu_triage.units import fmt_bytes

log = logging.getLogger(__name__)

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
    ``config``'s window and thresholds (the defaults without one): :meth:`Recording.stamper`.
    """
    out = QuietOnFailure(sys.stdout if out is None else out)
    try:
        judging = config or Config()
        host = recording_host(source.host_info(), source.name, interval_s, judging, describe_machine=describe_machine)
        recording = Recording(output, host, interval_s, rotate_s=rotate_s)
        for message in source.status().messages:
            log.info("source %s: %s", source.name, message)
            print(f"gpu-triage: {message}", file=QuietOnFailure(sys.stderr))
        log.info("recording %s to %s every %g s%s (stream %s)", source.name, recording.path, interval_s,
                 f" for {duration_s:g} s" if duration_s else "", recording.stream_path)
        stamp = recording.stamper(judging, host.cpu_count)
        print(
            f"recording {source.name} to {recording.path} every {interval_s:g} s"
            + (f" for {human_seconds(duration_s)}" if duration_s else "")
            + ("" if fast else "; Ctrl-C to stop"),
            file=out,
            flush=True,
        )
        began = time.monotonic()
        try:
            if fast:
                stopped_by = _record_fast(source, recording, interval_s, duration_s, stamp)
            else:
                stopped_by = _record_paced(source, recording, interval_s, duration_s, out, stamp, stop)
        except BaseException as exc:
            recording.abort()  # keep the stream for `gpu-triage recover`
            log.error("recording to %s stopped by %s after %d ticks; the stream %s is kept for "
                      "`gpu-triage recover`", recording.path, type(exc).__name__, recording.ticks,
                      recording.stream_path, extra=SHOWN)
            raise
        elapsed = time.monotonic() - began
    finally:
        source.close()
    path = recording.close_despite_signals()
    log.info("recording stopped (%s): %d ticks in %s, %s", stopped_by, recording.ticks, path,
             fmt_bytes(path.stat().st_size))
    print(
        f"recorded {recording.ticks} ticks ({human_seconds(recording.ticks * interval_s)} of data in "
        f"{human_seconds(elapsed)}) to {path} ({recording.size(path)})",
        file=out,
        flush=True,
    )
    return path, recording.ticks


def _record_fast(
    source: Source, recording: Recording, interval_s: float, duration_s: float | None, stamp: Callable[[Tick], Tick]
) -> str:
    """Sample back to back without pacing until the simulated duration is covered or a stop signal.
    Returns what stopped it."""
    stop = threading.Event()
    limit = ticks_for(duration_s, interval_s)
    with StopSignals(stop) as signals:
        while not stop.is_set() and (limit is None or recording.ticks < limit):
            recording.append(stamp(source.sample()))
    return signals.received or "duration reached"


def _record_paced(
    source: Source,
    recording: Recording,
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
        if failure or (limit is not None and recording.ticks >= limit):
            return
        try:
            recording.append(stamp(tick))
        except BaseException as exc:  # a disk error ends the recording; the main thread re-raises it
            failure.append(exc)
            stop.set()
            return
        if limit is not None and recording.ticks >= limit:
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
    progress: Callable[[], None] = lambda: _progress(out, recording, time.monotonic() - began)  # noqa: E731
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


def _progress(out: Any, recording: Recording, elapsed: float) -> None:
    line = f"  {recording.ticks} ticks  {human_seconds(elapsed)}  {fmt_bytes(recording.bytes_written)}"
    print("\r" + line + "\x1b[K", end="", file=out, flush=True)
