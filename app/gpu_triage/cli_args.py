"""The ``gpu-triage`` command line's shared parts: the option groups several subcommands take (sampling,
logging, the job, the source, rotation, metrics) and the argument types that check a value where it is
typed, with one line saying what to give instead (argparse prints it and exits 2)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import NoReturn

from gpu_triage.config import BATCH_SIZE_RANGE, INTERVAL_RANGE_S, WINDOW_RANGE_S
from gpu_triage.export import DEFAULT_LISTEN
from gpu_triage.logs import LEVELS


class Parser(argparse.ArgumentParser):
    """argparse's parser with a short error: one usage line of the command that was typed (not the top
    level's four, which listed none of the subcommand's options) and the error, exit status 2. An option the
    subcommand does not know is that subcommand's error, as `gpu-triage snapshot --bogus` is read."""

    def error(self, message: str) -> NoReturn:
        operands = " ".join(_operand(a) for a in self._actions if not a.option_strings)
        self.exit(2, f"usage: {self.prog} [options]{' ' + operands if operands else ''} "
                     f"(`{self.prog} --help` lists them)\n{self.prog}: error: {message}\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = self._subparser(getattr(ns, "command", None))
            (sub or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return ns

    def _subparser(self, command: str | None) -> argparse.ArgumentParser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                parser: argparse.ArgumentParser = action.choices[command]
                return parser
        return None


def _operand(action: argparse.Action) -> str:
    if isinstance(action, argparse._SubParsersAction):
        return "[COMMAND]"
    name = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return f"[{name}]" if action.nargs in ("?", "*") else name


SPEED_RANGE = (0.01, 1000.0)  # times real time: slower is a frozen screen, faster than any tick can be drawn


def _speed(text: str) -> float:
    v = _positive_float(text)
    lo, hi = SPEED_RANGE
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"{text}: give {lo:g} to {hi:g} (times real time)")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    if not math.isfinite(v):  # --duration inf was an OverflowError traceback
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number")
    return v


def _seconds_between(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse type for --interval / --window: the config file's own bounds. --interval 1e-9 or
    --window 1e12 asked numpy for terabytes of ring buffer (a MemoryError traceback)."""

    def parse(text: str) -> float:
        v = _positive_float(text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text} s: give {lo:g} to {hi:g} seconds")
        return v

    return parse


_interval = _seconds_between(*INTERVAL_RANGE_S)


_window = _seconds_between(*WINDOW_RANGE_S)


def _gpu_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= v <= 16:
        raise argparse.ArgumentTypeError(f"{v} cards: the simulated server has 1 to 16")
    return v


def _seed(text: str) -> int:
    """A simulation seed: a whole number from 0 (numpy refuses negative seeds with a traceback)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= v < 2**64:
        raise argparse.ArgumentTypeError(f"{v}: give a seed from 0 to 2**64 - 1")
    return v


def _add_seconds(p: argparse.ArgumentParser, flag: str, help_text: str, *, top: bool = False) -> None:
    """A positive number of seconds (``--interval``, ``--window``), with the help that fits the command.

    On subcommands the default is SUPPRESS, so `gpu-triage --interval 0.5 demo` keeps the top-level value
    instead of argparse overwriting it with the subparser's None (``dispatch`` reads one ``args.interval``).
    """
    kind = {"--interval": _interval, "--window": _window}[flag]
    p.add_argument(flag, type=kind, metavar="S", default=None if top else argparse.SUPPRESS, help=help_text)


def _add_logging(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--log-file and --log-level, accepted before or after the command (like --interval)."""
    p.add_argument(
        "--log-file",
        metavar="PATH",
        default=None if top else argparse.SUPPRESS,
        help="append a log to PATH: source errors, recording start/stop, config problems, each change of the "
        "shown verdict (default: no log file; headless commands print warnings on stderr)",
    )
    p.add_argument(
        "--log-level",
        choices=LEVELS,
        metavar="LEVEL",
        default="info" if top else argparse.SUPPRESS,
        help=f"least important records kept: {', '.join(LEVELS)} (default info)",
    )


def add_after_command(name: str, p: argparse.ArgumentParser) -> None:
    """The top level's options that a command may also take after its name (`gpu-triage demo healthy
    --record x.parquet` as well as `gpu-triage --record x.parquet demo healthy`): --log-file and
    --log-level everywhere, --config wherever a config is read, --record where the dashboard records
    (live has its own; a replay or the recorded demo is a recording already, and says so)."""
    _add_logging(p)
    if name != "completion":  # completion reads no config: a broken one must not break a shell's start-up
        p.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="TOML config file (as before "
                       "the command: default $GPU_TRIAGE_CONFIG, then ~/.config/gpu-triage/config.toml)")
    if name in ("demo", "replay"):  # replay: read so that it is refused in words, wherever it was typed
        p.add_argument("--record", metavar="FILE", default=argparse.SUPPRESS, help=argparse.SUPPRESS
                       if name == "replay" else "record every tick of the simulated session to FILE (Parquet)")


def _resolution(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (v >= 0 and v < 1e9):
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 (every tick) or a positive number of seconds")
    return v


def _add_sampling(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--interval and --window of the dashboard commands (and the top level, for the default `live`)."""
    _add_seconds(p, "--interval", "seconds between ticks (default 2, from the config file if set)", top=top)
    _add_seconds(
        p,
        "--window",
        "seconds of history the waveforms and the diagnosis look at (default 300, from the config file if set; "
        "at most 3600 ticks)",
        top=top,
    )


def _batch_size(text: str) -> int:
    lo, hi = BATCH_SIZE_RANGE
    v = _positive_int(text, f"give the samples per step, {lo} to {hi:,}")
    if v > hi:
        raise argparse.ArgumentTypeError(f"{v}: give the samples per step, {lo} to {hi:,}")
    return v


def _add_job(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--job-log and --batch-size: the training's own progress beside the cards (live and record)."""
    default = None if top else argparse.SUPPRESS
    p.add_argument(
        "--job-log",
        metavar="PATH",
        default=default,
        help="follow the training's log like tail -F and read its progress lines (tqdm, Hugging Face Trainer, "
        "Lightning, the PyTorch ImageNet example, DeepSpeed/Megatron, or [job] log_regex): samples/s, step time",
    )
    p.add_argument(
        "--batch-size",
        type=_batch_size,
        metavar="N",
        default=default,
        help="samples per step, to turn a log's steps into samples (default: [job] batch_size in the config)",
    )


def _add_stacks(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--no-stacks: the live commands without py-spy's look inside the waiting processes ([inside] enabled)."""
    p.add_argument(
        "--no-stacks",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="do not read the Python stacks of the processes whose card waits (py-spy; [inside] enabled = false)",
    )


def _add_source(p: argparse.ArgumentParser) -> None:
    """--source and, for a sim source, --gpus and --seed: the headless commands (record, export)."""
    p.add_argument(
        "--source",
        default="live",
        metavar="SRC",
        help="live (this machine) or sim:SCENARIO (a simulated server); default live",
    )
    p.add_argument("--gpus", type=_gpu_count, default=8, metavar="N", help="cards of a sim source (default 8)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed of a sim source, 0 or more (default 0)")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, e.g. 0,2,4") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers 0 or more, separated by commas")
    return values


def _bool_list(text: str) -> list[bool]:
    words = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
    try:
        return [words[v.strip().lower()] for v in text.split(",") if v.strip()] or [False]
    except KeyError:
        raise argparse.ArgumentTypeError(f"{text!r}: give on, off or on,off") from None


def _positive_int(text: str, hint: str = "give 1 or more") -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v}: {hint}")
    return v


def _add_rotate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rotate",
        type=_seconds_between(60.0, 86400.0),
        metavar="S",
        help="datasets only: start a new file every S seconds on the clock, and at UTC midnight (default 3600)",
    )


def _add_metrics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="also serve Prometheus metrics on HOST:PORT, the same as `gpu-triage export` "
        f"(e.g. {DEFAULT_LISTEN})",
    )


def _keep_days(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of days") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v}: give 1 or more days (0 or fewer would remove today's data)")
    return v


def add_compact(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compact",
        help="merge a dataset's finished days into daily files and a flat table for queries; --keep-days expires",
        description=(
            "For each host and each finished UTC day of DIR (`record -o DIR/`, `export --record DIR`): merge the "
            "hourly files into one daily trace file (DIR/host=H/date=D/day.parquet: ticks in order, each once, "
            "every tick with its verdict; verdicts a file lacks are computed once by the engine and kept) and "
            "write the flat table DIR/flat/D/H.parquet, one row per host, tick and card, for DuckDB and polars "
            "(docs/recording.md). Today's partitions and any holding a stream (being recorded, or left for "
            "`recover`) are left alone. Crash-safe: a killed run leaves every tick readable once, and the next "
            "run finishes its work."
        ),
    )
    p.add_argument("dir", metavar="DIR", help="the dataset directory")
    p.add_argument("--keep-days", type=_keep_days, metavar="N",
                   help="after compacting, remove the recordings and flat days dated more than N days before "
                   "today (UTC): N=7 on 2026-12-02 keeps 2026-11-25 onwards")
    p.add_argument("--dry-run", action="store_true", help="print what would be merged and removed; change nothing")
    p.add_argument("--progress", action="store_true",
                   help="a line per host-day on stderr even when it is not a terminal (a log, a journal)")


def add_run(sub: argparse._SubParsersAction) -> None:
    """``gpu-triage run [options] -- CMD ...``: the job started as our child, watched until it ends."""
    p = sub.add_parser(
        "run",
        help="start a training job as gpu-triage's child and watch it until it ends (its stacks without root)",
        description="Start CMD as gpu-triage's child, in its own process group, allowed to be read by gpu-triage's "
        "py-spy under kernel.yama.ptrace_scope=1 without root; its pulse is wired (GPU_TRIAGE_PULSE_DIR). "
        "SIGINT, SIGTERM and SIGHUP go to the job's process group; gpu-triage exits with the job's status when "
        "it ends. With --record FILE the monitor is headless; otherwise the dashboard follows the job and its "
        "output goes to --job-output.",
    )
    _add_sampling(p)
    p.add_argument("--record", metavar="FILE", default=None,
                   help="headless: record every tick to FILE (Parquet) until the job ends, no dashboard")
    p.add_argument("--job-output", metavar="FILE", default=None,
                   help="with the dashboard: the file the job's output goes to (default gpu-triage-run-PID.log), "
                   "read as --job-log")
    _add_job(p)
    _add_stacks(p)
    p.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the job's command, after --, as you would run it (torchrun ..., python train.py)")
