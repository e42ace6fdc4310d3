"""The ``gpu-triage`` command line's parser: the top level's options, description and examples, and one
subparser per declared command (``cli/registry.py``), each with its own arguments and then the options that
every command also takes after its name."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from gpu_triage import __version__
from gpu_triage.cli import options
from gpu_triage.cli.command import Command
from gpu_triage.cli.registry import commands
from gpu_triage.ui.keys import cli_line

DESCRIPTION = """\
A terminal dashboard that tells why your GPUs are idle. It watches every GPU, every CPU core and every
disk side by side (a tick every 2 s over a 5-minute window) and reads the shape of the waveforms: GPU low
with the CPU full is the data pipeline; GPU jumping with disks saturated is storage; GPU busy on paper with
SMs idle and links busy is communication; one card busy and the rest idle is every rank on cuda:0.

With no subcommand it starts the live dashboard. Without an NVIDIA driver it still starts (host only)
and says so; `gpu-triage demo` shows a recorded H200 session or a simulated 8-GPU server.
"""


EPILOG = """\
examples:
  gpu-triage                         live dashboard, 2 s ticks, 5-minute window
  gpu-triage --record run1.parquet   live, recording every tick
  gpu-triage --job-log train.log --batch-size 256   live, with the training's samples/s from its log
  gpu-triage demo                    replay a real H200 recording on a loop
  gpu-triage demo data_pipeline      a simulated 8-GPU server starved by its DataLoader
  gpu-triage record -o run.parquet --duration 600
  gpu-triage replay run.parquet --speed 4
  gpu-triage diagnose run.parquet --json
  gpu-triage diagnose fleet/ --summary  per host: time in each bottleneck, worst windows
  gpu-triage compact fleet/ --keep-days 90   one daily file per host and day; 90 days kept
  gpu-triage compare before.parquet after.parquet
  gpu-triage doctor
  gpu-triage baseline --gpus 2 --seconds 20
  gpu-triage loader mytrain.data:make_loader --workers 0,4,8
  gpu-triage --log-file /var/log/gpu-triage.log record -o run.parquet   (grep the log for "verdict")
  gpu-triage export                  serve Prometheus metrics and the verdict on 127.0.0.1:9839
  gpu-triage snapshot --json         one reading of every card, the host and the verdict, for scripts
  gpu-triage fleet --prometheus http://prom:9090   every host's verdict, what needs a human first

"""
# from the one key table (plain data: importing it loads no Textual)


EPILOG += cli_line() + "\n"


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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gpu-triage",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpu-triage {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file (default: $GPU_TRIAGE_CONFIG, then ~/.config/gpu-triage/config.toml)",
    )
    options.add_sampling(parser, top=True)
    options.add_logging(parser, top=True)
    parser.add_argument("--record", metavar="FILE", help="record every tick of the live session to FILE (Parquet)")
    options.add_job(parser, top=True)
    options.add_stacks(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands():
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        command.arguments(p)
        _add_after_command(command, p)
    return parser


def _add_after_command(command: Command, p: argparse.ArgumentParser) -> None:
    """The top level's options that a command may also take after its name (`gpu-triage demo healthy
    --record x.parquet` as well as `gpu-triage --record x.parquet demo healthy`): --log-file and
    --log-level everywhere, --config wherever a config is read, then what the command adds after them
    (demo's --record)."""
    options.add_logging(p)
    if command.reads_config:
        options.add_config_after_command(p)
    if command.trailing_arguments is not None:
        command.trailing_arguments(p)
