"""Where gpu-triage's log goes: ``--log-file PATH`` and ``--log-level LEVEL`` (global options).

Every module logs through its own ``logging.getLogger(__name__)``, under the ``gpu_triage`` logger that is
configured here once, by the command line:

- ``--log-file PATH``: every record at ``--log-level`` (default ``info``) and above is appended to PATH,
  one line each (UTC time, level, module, message). Ops people grep it, e.g. for ``verdict`` (a line each
  time the verdict on screen changes) or ``recording``. Default: no file.
- Headless commands (every one but the dashboards: record, recover, diagnose, compare, doctor, export,
  baseline, loader): warnings and errors also go to stderr,
  unless the command already printed the same thing there (records marked ``extra=SHOWN``).
- Dashboard commands (live, demo, replay): nothing is ever written to the terminal, which Textual owns;
  without a log file the records are dropped.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from gpu_triage.errors import UserError
from gpu_triage.openfiles import open_output
from gpu_triage.safetext import clean, clean_lines

LEVELS = ("debug", "info", "warning", "error")
#: ``log.warning(..., extra=SHOWN)``: the user has already been told on stderr; the file still gets it.
SHOWN = {"already_shown": True}
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_OURS = "gpu_triage"


class _NotShownYet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "already_shown", False)


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the record, not the one at set-up."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


class _CleanFormatter(logging.Formatter):
    """Records carry paths and names someone else chose: their control characters are made visible
    (gpu_triage.safetext) before they reach the terminal or the log file. The arguments are cleaned one by
    one with :func:`clean`, so a newline in a file name is a visible ␊ and cannot start a forged line of its
    own; what is left of the record (our message, a traceback) keeps its own newlines."""

    def format(self, record: logging.LogRecord) -> str:
        if record.args:
            record = logging.makeLogRecord({**record.__dict__, "args": _clean_args(record.args)})
        return clean_lines(super().format(record))


def _clean_args(args: tuple[object, ...] | Mapping[str, object]) -> tuple[object, ...] | dict[str, object]:
    def one(value: object) -> object:
        if isinstance(value, (str, os.PathLike)):
            return clean(str(value))
        return value

    if isinstance(args, Mapping):
        return {k: one(v) for k, v in args.items()}
    return tuple(one(v) for v in args)


class _LogFile(logging.StreamHandler):
    """A log file whose failing writes (a full disk, /dev/full) are said once in one line, on stderr for a
    headless command, instead of logging's "--- Logging error ---" and a traceback for every record.

    Opened once, by :func:`gpu_triage.openfiles.open_output` (a link refused, a new file 0600, a file
    of someone else's refused), and written through that descriptor only."""

    def __init__(self, path: Path, *, screen: bool) -> None:
        fd = open_output(path, exclusive=False, mode=0o600)
        super().__init__(os.fdopen(fd, "a", encoding="utf-8"))
        self.baseFilename = str(path)
        self._screen = screen
        self._failed = False

    def flush(self) -> None:
        try:
            super().flush()
        except OSError:
            self.handleError(None)

    def close(self) -> None:
        stream = self.stream
        try:
            super().close()
            if not stream.closed:
                stream.close()  # closing flushes what is still buffered: the same full disk
        except OSError:
            self.handleError(None)

    def handleError(self, record: logging.LogRecord | None) -> None:  # noqa: N802 - logging's name
        if self._failed:
            return
        self._failed = True
        reason = sys.exc_info()[1]
        if not self._screen:  # the dashboard's terminal belongs to Textual: nothing may be printed there
            why = getattr(reason, "strerror", None) or type(reason).__name__
            print(f"gpu-triage: warning: --log-file {self.baseFilename}: cannot write ({why}); "
                  "later records are not written", file=sys.stderr)


def _utc_formatter() -> logging.Formatter:
    formatter = _CleanFormatter(FORMAT, datefmt="%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    return formatter


def configure_logging(log_file: str | None, level: str = "info", *, screen: bool) -> logging.Handler | None:
    """Set up the ``gpu_triage`` logger for one run. ``screen``: a Textual dashboard owns the terminal.

    Returns the file handler (or ``None``). A log file that cannot be opened is a :class:`UserError`."""
    if level not in LEVELS:
        raise UserError(f"--log-level {level}: use one of {', '.join(LEVELS)}")
    threshold = getattr(logging, level.upper())
    file_handler: logging.Handler | None = None
    if log_file is not None:  # opened first: a bad path leaves the logging as it was
        try:
            file_handler = _LogFile(Path(log_file), screen=screen)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            hint = "" if ": " in reason else ": give a writable path"  # the refusals say what to do themselves
            raise UserError(f"--log-file {clean(log_file)}: cannot open it ({reason}){hint}") from exc
        file_handler.setFormatter(_utc_formatter())
        file_handler.setLevel(threshold)
    ours = logging.getLogger(_OURS)
    for old in list(ours.handlers):  # a second call (tests) replaces the first one's handlers
        ours.removeHandler(old)
        old.close()
    ours.propagate = False  # never reach the root logger's (or Python's last-resort) stderr output
    if file_handler is not None:
        ours.addHandler(file_handler)
    if not screen:
        stderr = _Stderr()
        stderr.setFormatter(_CleanFormatter("gpu-triage: %(levelname)s: %(message)s"))
        stderr.setLevel(max(threshold, logging.WARNING))
        stderr.addFilter(_NotShownYet())
        ours.addHandler(stderr)
    if not ours.handlers:
        ours.addHandler(logging.NullHandler())
    ours.setLevel(threshold)
    if screen:
        # other libraries' warnings (asyncio, pyarrow) must not reach the terminal under Textual either
        root = logging.getLogger()
        if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
            root.addHandler(logging.NullHandler())
    return file_handler
