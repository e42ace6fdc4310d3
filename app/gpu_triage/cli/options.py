"""The option groups several subcommands share (sampling, logging, the job, py-spy's stacks, the source,
rotation, metrics), each added by one public function so that a command's declaration reads as its list of
options."""

from __future__ import annotations

import argparse

from gpu_triage.cli import values
from gpu_triage.export import DEFAULT_LISTEN
from gpu_triage.logs import LEVELS


def add_seconds(p: argparse.ArgumentParser, flag: str, help_text: str, *, top: bool = False) -> None:
    """A positive number of seconds (``--interval``, ``--window``), with the help that fits the command.

    On subcommands the default is SUPPRESS, so `gpu-triage --interval 0.5 demo` keeps the top-level value
    instead of argparse overwriting it with the subparser's None (``dispatch`` reads one ``args.interval``).
    """
    kind = {"--interval": values.interval, "--window": values.window}[flag]
    p.add_argument(flag, type=kind, metavar="S", default=None if top else argparse.SUPPRESS, help=help_text)


def add_logging(p: argparse.ArgumentParser, *, top: bool = False) -> None:
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


def add_config_after_command(p: argparse.ArgumentParser) -> None:
    """--config after the command's name, wherever a config is read."""
    p.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="TOML config file (as before "
                   "the command: default $GPU_TRIAGE_CONFIG, then ~/.config/gpu-triage/config.toml)")


def add_sampling(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--interval and --window of the dashboard commands (and the top level, for the default `live`)."""
    add_seconds(p, "--interval", "seconds between ticks (default 2, from the config file if set)", top=top)
    add_seconds(
        p,
        "--window",
        "seconds of history the waveforms and the diagnosis look at (default 300, from the config file if set; "
        "at most 3600 ticks)",
        top=top,
    )


def add_job(p: argparse.ArgumentParser, *, top: bool = False) -> None:
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
        type=values.batch_size,
        metavar="N",
        default=default,
        help="samples per step, to turn a log's steps into samples (default: [job] batch_size in the config)",
    )


def add_stacks(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--no-stacks: the live commands without py-spy's look inside the waiting processes ([inside] enabled)."""
    p.add_argument(
        "--no-stacks",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="do not read the Python stacks of the processes whose card waits (py-spy; [inside] enabled = false)",
    )


def add_source(p: argparse.ArgumentParser) -> None:
    """--source and, for a sim source, --gpus and --seed: the headless commands (record, export)."""
    p.add_argument(
        "--source",
        default="live",
        metavar="SRC",
        help="live (this machine) or sim:SCENARIO (a simulated server); default live",
    )
    p.add_argument("--gpus", type=values.gpu_count, default=8, metavar="N", help="cards of a sim source (default 8)")
    p.add_argument("--seed", type=values.seed, default=0, help="random seed of a sim source, 0 or more (default 0)")


def add_rotate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rotate",
        type=values.seconds_between(60.0, 86400.0),
        metavar="S",
        help="datasets only: start a new file every S seconds on the clock, and at UTC midnight (default 3600)",
    )


def add_metrics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="also serve Prometheus metrics on HOST:PORT, the same as `gpu-triage export` "
        f"(e.g. {DEFAULT_LISTEN})",
    )
