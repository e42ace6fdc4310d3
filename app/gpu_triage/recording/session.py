"""One recording being written: ticks, each with its judged raw verdict, into a trace file (``-o FILE``) or a
rotating dataset (``-o DIR/``), from its opening to its Parquet.

:class:`Recording` is what the dashboard's recorder, ``record`` (and ``gpu-triage run --record``) and
``export --record`` write through. It opens the file or the dataset (the host's metadata names what the
stored verdicts were judged with: :func:`recording_host`), says where a judge's window starts afresh (the first
tick of each file, as ``diagnose FILE`` starts it: :meth:`Recording.opens_file`), appends, rotates (a dataset
ends its files on the clock), and closes: the crash-safe stream becomes Parquet, or stays for ``gpu-triage
recover`` when it cannot (:meth:`Recording.abort`, :func:`close_despite_signals`).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from gpu_triage.errors import UserError
from gpu_triage.model import HostInfo, Tick
from gpu_triage.stopsignals import StopSignals
from gpu_triage.storage.dataset import DatasetWriter, is_dataset_target
from gpu_triage.trace.writer import TraceWriter
from gpu_triage.units import fmt_bytes

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpu_triage.config import Config

Writer = TraceWriter | DatasetWriter  # one file, or a rotating dataset (-o DIR/); neither loads pyarrow


def recording_host(host: HostInfo, source_name: str, interval_s: float, config: Config, *,
                   describe_machine: bool = True) -> HostInfo:
    """``host`` as a recording stores it: the recorder's own metadata (``hostmeta.recorder_extra``; this
    machine's kernel and environment only when ``describe_machine``) and the settings its stored verdicts are
    judged with (``config``'s thresholds and window)."""
    from gpu_triage.hostmeta import recorder_extra  # noqa: PLC0415
    from gpu_triage.verdicts.settings import with_settings  # noqa: PLC0415

    host.extra.update(recorder_extra(source_name, interval_s, describe_machine=describe_machine))
    return with_settings(host, config.thresholds, config.window_s)


def open_writer(output: str | Path, host: HostInfo, interval_s: float, *, rotate_s: float | None = None,
                dataset: bool | None = None) -> Writer:
    """The writer of ``output``: a rotating dataset for ``DIR/`` or an existing directory, else one trace file
    (``dataset`` decides instead when given)."""
    if dataset if dataset is not None else is_dataset_target(output):
        return DatasetWriter(output, host, interval_s, rotate_s=rotate_s)
    return TraceWriter(Path(output), host, interval_s)


class Recording:
    """Ticks into one trace file or a rotating dataset, through its crash-safe stream. One thread at a time
    appends; ``ticks`` and ``bytes_written`` are for progress lines."""

    def __init__(self, output: str | Path, host: HostInfo, interval_s: float, *, rotate_s: float | None = None,
                 dataset: bool | None = None) -> None:
        self.interval_s = float(interval_s)
        self.writer: Writer = open_writer(output, host, interval_s, rotate_s=rotate_s, dataset=dataset)

    @property
    def path(self) -> Path:
        """The trace file, or the dataset's root."""
        return self.writer.path

    @property
    def stream_path(self) -> Path:
        """The crash-safe stream being written (what ``recover`` finishes after a stop)."""
        return self.writer.stream_path

    @property
    def current(self) -> Path | None:
        """The file being written: the trace file, or a dataset's open file (None between its files)."""
        if isinstance(self.writer, DatasetWriter):
            return self.writer.current
        return self.writer.path

    @property
    def ticks(self) -> int:
        return self.writer.ticks

    @property
    def bytes_written(self) -> int:
        return self.writer.bytes_written

    def opens_file(self, tick: Tick) -> bool:
        """Whether ``tick`` will be the first of a file: a single recording's first tick, or a dataset's tick
        that begins the next file (where ``diagnose FILE`` starts its window, and so the recording's judge)."""
        if isinstance(self.writer, DatasetWriter):
            return self.writer.opens_file(tick.ts)
        return self.writer.ticks == 0

    def stamper(self, config: Config, cpu_count: int | None) -> Callable[[Tick], Tick]:
        """Each tick with the engine's raw verdict (trace v3's ``verdict`` column), from the one judge
        (:class:`~gpu_triage.verdicts.judge.Judge`) whose window starts afresh with each file this recording
        opens; its hysteresis logs the shown verdict's changes (``verdict A -> B``) for a log file at info.
        For a recorder that judges its own ticks (``record``); the dashboard and ``export`` hand over theirs."""
        from gpu_triage.verdicts.judge import Judge  # noqa: PLC0415 - numpy and the engine

        judge = Judge(config.thresholds, config.window_s, self.interval_s, cpu_count)
        return lambda tick: judge.take(tick, fresh=self.opens_file(tick)).stamped()

    def append(self, tick: Tick) -> None:
        """Record ``tick``, judged already (its raw verdict set: ``Judgement.stamped``)."""
        self.writer.append(tick)

    def end_file(self) -> None:
        """End the open file early, after a write error (its ticks become Parquet where they still can, else
        UserError names its stream for ``recover``); the next append opens a new file. A single file has no
        next one: it stops, its stream kept for ``recover``."""
        if isinstance(self.writer, DatasetWriter):
            self.writer.end_file()
        else:
            self.writer.abort()

    def abort(self) -> None:
        """Stop without converting: the stream stays for ``gpu-triage recover``."""
        self.writer.abort()

    def close(self) -> Path:
        """The stream becomes Parquet (a dataset: its open file); returns the file or the dataset's root.
        UserError names the stream to ``recover`` where it cannot, and says so when no tick was recorded."""
        return self.writer.close()

    def close_despite_signals(self) -> Path:
        """:meth:`close`, telling what is kept if a second stop signal cuts it short (:func:`close_despite_signals`)."""
        return close_despite_signals(self.writer)

    def size(self, path: Path) -> str:
        """What the finished recording weighs, for the recorder's last line."""
        if isinstance(self.writer, DatasetWriter):
            return f"{fmt_bytes(self.writer.total_bytes)} in {len(self.writer.files)} files"
        return fmt_bytes(path.stat().st_size)


class _StopDuringConversion(BaseException):
    """A stop signal arrived while the stream was being turned into the Parquet."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def close_despite_signals(writer: Writer) -> Path:
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
