"""The ``gpu-triage`` command: :func:`main` parses (``cli/parser.py``), sets up logging and runs the
command that was typed (its declaration in ``cli/subcommands/``). Each declaration imports its handler
lazily, so that ``--help`` and the headless subcommands start fast and never import the UI they do not need.

Every handler returns an exit status. A :class:`UserError` anywhere becomes one line on stderr and its
exit status; Ctrl-C exits 130 quietly.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Sequence

from gpu_triage import __version__
from gpu_triage.cli.command import Invocation
from gpu_triage.cli.parser import build_parser
from gpu_triage.cli.registry import command
from gpu_triage.errors import UserError, user_path
from gpu_triage.heavy_imports import import_asyncio_without_tls, import_numpy_with_one_blas_thread
from gpu_triage.logs import SHOWN, configure_logging
from gpu_triage.safetext import clean

# The command line's records are named gpu_triage.cli, whichever of its modules writes them.
log = logging.getLogger("gpu_triage.cli")


def on_screen(args: argparse.Namespace) -> bool:
    """The command draws a Textual screen: nothing else may write to its terminal."""
    return command(args.command or "live").on_screen(args)


def prepare_imports(args: argparse.Namespace) -> None:
    """The heavy imports every command shares, done the cheap way: numpy on one BLAS thread (for the
    diagnosis, which `record` runs on each tick it writes: trace v3's verdict column); the dashboard's asyncio without
    OpenSSL. benchmarks/rss_stages.py and rss_commands.py measure what each costs. `record` never loads
    pyarrow: it writes its stream itself and converts it in a child (trace/writer.py)."""
    if on_screen(args):
        import_asyncio_without_tls()
    import_numpy_with_one_blas_thread()


def _silence_stdout() -> None:
    """Point stdout at /dev/null: after a reader went away (``| head``) the interpreter's final flush
    would otherwise print "Exception ignored ... BrokenPipeError" on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    prepare_imports(args)
    if sys.stdout is None:  # started with stdout closed (`>&-`): nowhere to print, but the work still runs
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    if sys.stderr is None:  # `2>&-` (a cron line): --progress and warnings would raise AttributeError
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    try:
        configure_logging(args.log_file, args.log_level, screen=on_screen(args))
    except UserError as err:  # no log to write it to
        print(f"gpu-triage: error: {clean(str(err))}", file=sys.stderr)  # paths: anyone's characters
        return err.exit_code
    try:
        log.info("gpu-triage %s %s started (pid %d)", __version__, args.command or "live", os.getpid())
        return dispatch(args, parser)
    except UserError as err:
        log.error("%s (exit %d)", err, err.exit_code, extra=SHOWN)
        # one line, always: a newline in a path it names is shown as ␊, and cannot start a forged line
        print(f"gpu-triage: error: {clean(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output left (`| head`): what it wanted, it has
        _silence_stdout()
        return 0
    except OSError as err:  # our output cannot be written (stdout on a full disk, > /dev/full): not a traceback
        _silence_stdout()
        full = err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO)
        if err.filename is not None:
            line = f"{err.filename}: {err.strerror or err}"
        elif full:
            line = f"writing the output failed: {err.strerror or err}: free space or send it elsewhere"
        else:  # not one we foresaw: one line here, the traceback in the log file for a bug report
            line = f"{err.strerror or err} ({type(err).__name__}); --log-file PATH keeps the details"
        print(f"gpu-triage: error: {clean(line)}", file=sys.stderr)
        log.error("%s", line, extra=SHOWN, exc_info=err.filename is None and not full)
        return 1


# The file arguments of each command, as argparse names them, and what each is for in an error line.


_FILE_ARGS = (("file", "FILE"), ("before", "BEFORE"), ("after", "AFTER"), ("output", "-o"), ("record", "--record"),
              ("job_log", "--job-log"), ("job_output", "--job-output"), ("dir", "DIR"))
_EXAMPLES = {"job_log": "train.log", "job_output": "train.log", "dir": "/var/lib/gpu-triage/fleet"}


def check_file_args(args: argparse.Namespace) -> None:
    """An empty file argument (`-o ""`, `recover ""`, `--job-log ""`) is one line here, for every command
    alike: as a path it would be "." (the current directory) or a ValueError further on. So is a
    ``~NAME/`` whose user does not exist (Path.expanduser raises RuntimeError for it)."""
    for attr, shown in _FILE_ARGS:
        given = getattr(args, attr, None)
        for value in given if isinstance(given, list) else [given]:  # diagnose --summary takes several
            _check_file_arg(attr, shown, value)


def _check_file_arg(attr: str, shown: str, value: object) -> None:
    if isinstance(value, str) and not value.strip():
        example = _EXAMPLES.get(attr, "run.parquet")
        kind = "directory" if attr == "dir" else "file"
        raise UserError(f"{shown}: the {kind} name is empty: give a {kind} such as {example}")
    if isinstance(value, str) and value.startswith("~"):
        user_path(value, shown)
    if isinstance(value, str) and not _utf8(value):
        # pyarrow takes paths as UTF-8: `record -o` recorded, then could neither convert its stream nor
        # `recover` it, and reading such a file said it was "not a gpu-triage recording"
        raise UserError(f"{shown} {value.encode('utf-8', 'surrogateescape')!r}: the name is not valid UTF-8, "
                        "which pyarrow (it reads and writes recordings) needs: rename it")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the typed command (``live`` when none was) with the config loaded, unless it reads none."""
    check_file_args(args)
    typed = command(args.command or "live")
    config = None
    if typed.reads_config:  # `completion` reads none: a broken config must not break a shell's start-up
        from gpu_triage.config import load_config

        config = load_config(getattr(args, "config", None))
        if getattr(args, "interval", None):
            config.interval_s = args.interval
        if getattr(args, "window", None):
            config.window_s = args.window
    return typed.run(Invocation(args, parser, config))
