"""The ``gpu-triage`` command: argument parsing and dispatch. Heavy modules are imported lazily so that
``--help`` and the headless subcommands start fast and never import the UI they do not need.

Every handler returns an exit status. A :class:`UserError` anywhere becomes one line on stderr and its
exit status; Ctrl-C exits 130 quietly.
"""

from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gpu_triage import __version__
from gpu_triage.config import BATCH_SIZE_RANGE, INTERVAL_RANGE_S, WINDOW_RANGE_S
from gpu_triage.errors import UserError, user_path
from gpu_triage.export import DEFAULT_LISTEN
from gpu_triage.heavy_imports import import_asyncio_without_tls, import_numpy_with_one_blas_thread
from gpu_triage.logs import LEVELS, SHOWN, configure_logging
from gpu_triage.safetext import clean_lines
from gpu_triage.scenarios import SCENARIOS
from gpu_triage.ui.keys import cli_line

if TYPE_CHECKING:
    from gpu_triage.fleetview.client import Fleet

log = logging.getLogger(__name__)
#: The commands that draw the Textual dashboard: nothing but Textual may write to their terminal.
SCREEN_COMMANDS = ("live", "demo", "replay")

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    _add_sampling(parser, top=True)
    _add_logging(parser, top=True)
    parser.add_argument("--record", metavar="FILE", help="record every tick of the live session to FILE (Parquet)")
    _add_job(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "live",
        help="the live dashboard (the default)",
        description="Watch this machine's GPUs, CPU cores and disks live.",
    )
    _add_sampling(p)
    p.add_argument(
        "--record", metavar="FILE", default=argparse.SUPPRESS, help="record every tick to FILE (Parquet)"
    )
    _add_job(p)

    _add_metrics(p)

    p = sub.add_parser(
        "demo",
        help="the dashboard on a recorded H200 session or a simulated server",
        description=(
            "With no SCENARIO: replay the real H200 recording bundled with gpu-triage, on a loop. "
            "With a SCENARIO: a simulated server (deterministic from --seed) that reproduces one case "
            "of the method."
        ),
    )
    p.add_argument("scenario", nargs="?", choices=SCENARIOS, metavar="SCENARIO", help=", ".join(SCENARIOS))
    p.add_argument("--gpus", type=_gpu_count, default=8, metavar="N", help="simulated cards, 1-16 (default 8)")
    p.add_argument("--cores", type=int, default=32, metavar="M", help="simulated CPU cores, 1-4096 (default 32)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed of the simulation, 0 or more (default 0)")
    p.add_argument(
        "--speed",
        type=_speed,
        default=1.0,
        metavar="X",
        help="play X times faster than real time, 0.01 to 1000 (default 1; the recording also takes + and - keys)",
    )
    _add_sampling(p)
    _add_metrics(p)

    p = sub.add_parser(
        "record",
        help="record ticks to a Parquet file, headless (tmux, nohup, systemd)",
        description=(
            "Record without a screen. Each tick is appended to a crash-safe stream beside FILE "
            "(FILE.partial.arrows, locked while this recorder runs); a clean stop (--duration reached, Ctrl-C, "
            "SIGTERM) turns it into FILE. After a crash, `gpu-triage recover`."
        ),
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE|DIR/",
        help="the Parquet file to write; or DIR/ (or an existing directory): a Hive-partitioned dataset "
        "DIR/host=NAME/date=YYYY-MM-DD/HHMMSS-….parquet, a new file every --rotate seconds",
    )
    _add_rotate(p)
    p.add_argument(
        "--duration",
        type=_positive_float,
        metavar="S",
        help=(
            "stop after S seconds: S / interval ticks, the first one interval after the start "
            "(--duration 10 at 2 s: 5 ticks, at 2, 4, 6, 8, 10 s); default: until stopped"
        ),
    )
    _add_source(p)
    _add_seconds(p, "--interval", "seconds between ticks (default 2, from the config file if set)")
    p.add_argument(
        "--fast",
        action="store_true",
        help="sim sources only: write simulated ticks as fast as they are made (--duration counts simulated time)",
    )
    _add_job(p)

    p = sub.add_parser(
        "replay",
        help="play a recording back through the same dashboard",
        description="Replay FILE (Parquet, or a crash leftover .arrows stream) in the dashboard. A gap in the "
        "recording (no tick for more than 5 intervals) starts a fresh window, is said under the header and "
        "marked on the position bar.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--speed", type=_speed, default=1.0, metavar="X", help="playback speed, 0.01 to 1000 (default 1)")
    _add_seconds(p, "--window", "seconds of history shown (default 300, from the config file if set)")

    p = sub.add_parser(
        "recover",
        help="turn the stream left by a killed recorder into a Parquet file",
        description=(
            "Read FILE.partial.arrows (what a killed recorder leaves) and write every complete tick to Parquet. "
            "A stream a running recorder holds is refused (stop that recorder: it writes FILE itself); a "
            "damaged one keeps every batch before the damage and says at which byte it stopped."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the .arrows stream, or the Parquet path it was recording to")
    p.add_argument("-o", "--output", metavar="OUT", help="the Parquet file to write (default: the recording's name)")

    p = sub.add_parser(
        "diagnose",
        help="diagnose a recording offline, segment by segment",
        description="Run the two-minute method over FILE and print each segment's pattern, bottleneck and advice. "
        "A stretch with no tick for more than 5 intervals is shown as a gap; the interval is taken from the "
        "timestamps when the file's metadata contradicts them.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print JSON ({'segments': [...], 'gaps': [...]}) for scripts; "
                   "its times are always ISO 8601 UTC")
    p.add_argument("--utc", action="store_true",
                   help="print the report's times in UTC (default: this machine's local time, the zone named)")
    _add_seconds(p, "--window", "seconds of history each verdict looks at (default 300, from the config file if set)")
    p.add_argument(
        "--resolution",
        type=_resolution,
        metavar="S",
        help="judge the recording every S seconds (0: every tick). Default: every tick up to 1,500 ticks, "
        "beyond that 1,500 verdicts spread over the recording (a day at 2 s: one a minute); a verdict "
        "already holds 6 s before it shows, so finer only costs time (about 5 ms per verdict for 8 cards)",
    )
    p.add_argument("--progress", action="store_true",
                   help="report progress on stderr even when it is not a terminal (a log, a pipe)")
    p.add_argument(
        "--summary",
        action="store_true",
        help="for a dataset (a directory from `record -o DIR/` or `export --record DIR`, or a glob of its "
        "files): per host the share of time in each bottleneck, per owner (Slurm job, pod, container, user), "
        "and the worst 5-minute windows, from a verdict "
        "every 30 s of data (--resolution is for one recording); implied when FILE is a directory or a glob",
    )

    p = sub.add_parser(
        "compare",
        help="compare two recordings (or datasets): before and after a tuning change",
        description=(
            "One line first, what changed (samples/s, or GPU-Util, and the bottleneck), then per card and "
            "overall, side by side with the change (percentages in points): the job's samples/s, utilisation, "
            "stalls, diagnoses, links, host; what did not change is left out unless --all. Either side may "
            "be a dataset directory (`record -o DIR/`, `export --record DIR`) or a quoted glob of its "
            "partitions or files, read as one recording; a side over several hosts gets a block per host. "
            "Unreadable files are left out and named."
        ),
    )
    p.add_argument("before", metavar="BEFORE", help="a recording, a dataset directory, or a glob (quote it)")
    p.add_argument("after", metavar="AFTER", help="the same, for after the change")
    p.add_argument("--json", action="store_true",
                   help="print JSON for scripts: every figure, with its unit, whether it changed, and the headline")
    p.add_argument("--all", action="store_true",
                   help="show every figure, also those that did not change (below 1 pp, or 2 %% for the rest)")
    p.add_argument("--progress", action="store_true",
                   help="report the diagnosis's progress on stderr even when it is not a terminal")

    p = sub.add_parser(
        "doctor",
        help="check the machine before the first training step",
        description=(
            "GPUs, topology, host and software, each ok / warn / fail with what to do (skip: nothing to check "
            "here, e.g. no GPU). Exit 1 if a check fails."
        ),
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--params", type=float, metavar="N", help="model parameters (e.g. 7e9): estimate gradient traffic")
    p.add_argument(
        "--python",
        metavar="PATH",
        help="the Python of your training environment, to read its torch and NCCL versions (default: this one)",
    )
    p = sub.add_parser(
        "export",
        help="serve Prometheus metrics and the verdict, headless (a daemon for a fleet)",
        description=(
            "Sample this machine like the dashboard, diagnose every tick with the same engine, and serve "
            "/metrics (the Prometheus text format) on HOST:PORT: every card, the host, GPU processes and "
            "the verdict (gpu_triage_verdict{pattern,bottleneck,cards} 1). Serves metrics only. "
            "SIGTERM or Ctrl-C stop it cleanly. Metric names: docs/metrics.md."
        ),
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}: this machine only; 0.0.0.0:PORT for every "
        "interface; port 0 picks a free one)",
    )
    _add_seconds(p, "--interval", "seconds between ticks (default 2, from the config file if set)")
    _add_seconds(p, "--window", "seconds of history the diagnosis looks at (default 300, from the config file if set)")
    _add_source(p)
    _add_job(p)
    p.add_argument(
        "--web-config",
        metavar="FILE",
        help="TLS and basic auth for /metrics: a YAML file in the Prometheus exporters' web config format "
        "(tls_server_config, basic_auth_users; node_exporter's --web.config.file), docs/metrics.md",
    )
    p.add_argument(
        "--pid-labels",
        action="store_true",
        help="label the process metrics by pid and name as well as by owner (a new series per process: "
        "off by default)",
    )
    p.add_argument(
        "--record",
        metavar="DIR",
        help="also record every tick into DIR as a Hive-partitioned Parquet dataset (host=/date=/…); a full "
        "disk stops the recording, not the metrics",
    )
    _add_rotate(p)
    _add_fleet(sub)
    _add_checkup_commands(sub)
    _add_snapshot(sub)
    p = sub.add_parser(
        "completion",
        help="print the shell completion script for bash, zsh or fish",
        description="Print the completion script for SHELL, made from this command line's own parser. "
        "bash: gpu-triage completion bash > ~/.local/share/bash-completion/completions/gpu-triage; "
        "zsh: gpu-triage completion zsh > DIR/_gpu-triage with DIR on $fpath; "
        "fish: gpu-triage completion fish > ~/.config/fish/completions/gpu-triage.fish",
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"), metavar="SHELL", help="bash, zsh or fish")
    for command_parser in sub.choices.values():
        _add_logging(command_parser)
    return parser


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


def _add_checkup_commands(sub: argparse._SubParsersAction) -> None:
    """Steps 2 and 3 of the check-up; both need PyTorch (the optional extra gpu-triage[torch])."""
    p = sub.add_parser(
        "baseline",
        help="step 2 of the check-up: samples/s on one card and on N with DDP, no input pipeline (needs PyTorch)",
        description=(
            "A small model on fixed random tensors already on the device: forward, backward, optimizer step, "
            "timed after a warm-up, on one card and then on N cards with DDP (NCCL; gloo on CPU). Prints "
            "samples/s for each and the scaling efficiency; under 50 % it is flagged (exit 1) and points to "
            "the doctor's topology and NCCL checks. Needs PyTorch: pip install 'gpu-triage[torch]'."
        ),
    )
    p.add_argument(
        "--gpus", type=_positive_int, metavar="N", help="cards (CPU: ranks) of the second run (default: all; CPU 2)"
    )
    p.add_argument(
        "--seconds", type=_positive_float, default=20.0, metavar="S", help="timed seconds per run (default 20)"
    )
    p.add_argument(
        "--model-size",
        choices=("tiny", "small", "medium"),
        help="MLP size: small (default on GPUs), medium (~540M parameters), tiny (default on CPU)",
    )
    p.add_argument("--amp", action="store_true", help="bf16 autocast (default: fp32, TF32 matmuls on GPUs)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when PyTorch sees a card, else cpu")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument(
        "--record",
        metavar="FILE",
        help="record the machine beside both runs (Parquet, like `record`), for `compare` with a real run",
    )
    _add_seconds(p, "--interval", "seconds between recorded ticks (default 2, from the config file if set)")

    p = sub.add_parser(
        "loader",
        help="step 3 of the check-up: your DataLoader alone, per num_workers setting (needs PyTorch)",
        description=(
            "Import FACTORY from MODULE (importable from the current directory, or a path/to/file.py) and "
            "iterate what it gives with no model: a DataLoader when it accepts num_workers=, pin_memory=, "
            "prefetch_factor=, or a Dataset that is wrapped in a DataLoader with --batch-size. Per setting: "
            "samples/s, CPU use of the process and its workers, peak memory; the recommendation is the "
            "smallest num_workers within 5 % of the best. Needs PyTorch: pip install 'gpu-triage[torch]'."
        ),
    )
    p.add_argument("factory", metavar="MODULE:FACTORY", help="e.g. mytrain.data:make_loader or ./data.py:make_dataset")
    p.add_argument(
        "--workers", type=_int_list, default=[0, 2, 4, 8, 16], metavar="LIST", help="num_workers (default 0,2,4,8,16)"
    )
    p.add_argument(
        "--pin-memory", type=_bool_list, default=[False], metavar="LIST", help="off, on, or on,off (default off)"
    )
    p.add_argument(
        "--prefetch", type=_int_list, default=[2], metavar="LIST", help="prefetch_factor with workers (default 2)"
    )
    p.add_argument(
        "--batch-size", type=_positive_int, default=32, metavar="B", help="when the factory gives a Dataset (32)"
    )
    p.add_argument(
        "--batches", type=_positive_int, default=100, metavar="N", help="batches timed per setting (100)"
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        metavar="S",
        help="a setting that gives no batch for S seconds is a hang: stop, exit 2 (default 120)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
def _add_rotate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rotate",
        type=_seconds_between(60.0, 86400.0),
        metavar="S",
        help="datasets only: start a new file every S seconds on the clock, and at UTC midnight (default 3600)",
    )


def _add_snapshot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="one reading, no screen: every card, the host, the processes and the verdict (--json for scripts)",
        description="Sample for a few seconds (the shortest window the diagnosis judges), print every card, the "
        "host, the processes and the verdict once, and exit, as gpustat or `nvtop -s` do. Without a GPU it says "
        "so and reads the host.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (times ISO 8601 UTC)")
    p.add_argument("--seconds", type=_positive_float, default=6.0, metavar="S",
                   help="the window sampled (default 6: before that the verdict is still collecting)")
    p.add_argument("--interval", dest="snapshot_interval", type=_interval, default=1.0, metavar="S",
                   help="seconds between ticks (default 1)")
    _add_source(p)


def _add_metrics(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="also serve Prometheus metrics on HOST:PORT, the same as `gpu-triage export` "
        f"(e.g. {DEFAULT_LISTEN})",
    )


def _add_fleet(sub: argparse._SubParsersAction) -> None:
    from gpu_triage.fleetview import SORT_ORDER_HELP

    p = sub.add_parser(
        "fleet",
        help="one live view of many hosts: each one's verdict, from a Prometheus or a list of exporters",
        description=(
            "One row per host: its verdict (bottleneck, pattern, confidence), cards busy of all, mean GPU-Util, "
            "the job's samples/s and the owner where the metrics carry one, read from a Prometheus that scrapes "
            "`gpu-triage export` (its HTTP API; federated or not) or straight from a small pool of exporters. "
            f"{SORT_ORDER_HELP} Enter opens a host's detail (each card's utilisation, memory, power), Esc goes "
            "back, r refreshes now, q quits. Refreshed in the background every --refresh seconds; a host that "
            "does not answer shows as down, never as idle. docs/metrics.md, \"The fleet view\"."
        ),
    )
    p.add_argument("--prometheus", metavar="URL", help="the Prometheus server, e.g. http://prometheus:9090")
    p.add_argument(
        "--match",
        metavar="MATCHERS",
        help='with --prometheus: only series with these labels, e.g. job="gpu-triage" (default: every host '
        "that exported gpu_triage metrics in the last hour)",
    )
    p.add_argument(
        "--exporters",
        action="append",
        metavar="HOST:PORT,...",
        help="scrape these `gpu-triage export` addresses directly (comma-separated, may repeat)",
    )
    p.add_argument("--exporters-file", metavar="FILE", help="the exporters' HOST:PORT, one a line (# comments)")
    p.add_argument(
        "--refresh", type=_seconds_between(0.5, 3600.0), default=5.0, metavar="S", help="seconds between rounds (5)"
    )
    p.add_argument(
        "--timeout",
        type=_seconds_between(0.1, 120.0),
        metavar="S",
        help="seconds one request may take: an exporter slower than that is down for the round (default 3), a "
        "Prometheus query an error (default 10: its answer for a large fleet is megabytes)",
    )
    p.add_argument(
        "--concurrency", type=_positive_int, default=16, metavar="N", help="exporters scraped at once (16)"
    )
    p.add_argument("--once", action="store_true", help="print one round as a table and exit (no screen)")
    p.add_argument("--json", action="store_true", help="print one round as JSON and exit (no screen)")


def _on_screen(args: argparse.Namespace) -> bool:
    """The command draws a Textual screen: nothing else may write to its terminal."""
    command = args.command or "live"
    return command in SCREEN_COMMANDS or (command == "fleet" and not (args.once or args.json))


def _fleet_screen(fleet: Fleet) -> int:
    from gpu_triage.ui.fleet_app import run_fleet_screen

    return run_fleet_screen(fleet)


def prepare_imports(args: argparse.Namespace) -> None:
    """The heavy imports every command shares, done the cheap way: numpy on one BLAS thread, and none at all
    for a live recording that writes no verdict log; the dashboard's asyncio without OpenSSL.
    benchmarks/rss_stages.py and rss_commands.py measure what each costs."""
    if _on_screen(args):
        import_asyncio_without_tls()
    if args.command == "record":
        # numpy only for a sim source, and for the verdict log that only a --log-file at info or debug reads;
        # never pyarrow: the recorder writes its stream itself and converts it in a child (trace/writer.py)
        verdict_log = args.log_file is not None and args.log_level in ("debug", "info")
        if args.source != "live" or verdict_log:
            import_numpy_with_one_blas_thread()
    else:
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
    if sys.stderr is None:  # `2>&-` (a cron line): --progress and warnings were an AttributeError, the work lost
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    try:
        configure_logging(args.log_file, args.log_level, screen=_on_screen(args))
    except UserError as err:  # no log to write it to
        print(f"gpu-triage: error: {clean_lines(str(err))}", file=sys.stderr)  # paths: anyone's characters
        return err.exit_code
    try:
        log.info("gpu-triage %s %s started (pid %d)", __version__, args.command or "live", os.getpid())
        return dispatch(args)
    except UserError as err:
        log.error("%s (exit %d)", err, err.exit_code, extra=SHOWN)
        print(f"gpu-triage: error: {clean_lines(str(err))}", file=sys.stderr)  # paths: anyone's characters
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
        print(f"gpu-triage: error: {clean_lines(line)}", file=sys.stderr)
        log.error("%s", line, extra=SHOWN, exc_info=err.filename is None and not full)
        return 1


# The file arguments of each command, as argparse names them, and what each is for in an error line.
_FILE_ARGS = (("file", "FILE"), ("before", "BEFORE"), ("after", "AFTER"), ("output", "-o"), ("record", "--record"),
              ("job_log", "--job-log"))


def check_file_args(args: argparse.Namespace) -> None:
    """An empty file argument (`-o ""`, `recover ""`, `--job-log ""`) is one line here, for every command
    alike: as a path it became "." (the current directory) or a ValueError traceback further on. So is a
    ``~NAME/`` whose user does not exist (Path.expanduser raises RuntimeError for it)."""
    for attr, shown in _FILE_ARGS:
        value = getattr(args, attr, None)
        if isinstance(value, str) and not value.strip():
            example = "train.log" if attr == "job_log" else "run.parquet"
            raise UserError(f"{shown}: the file name is empty: give a file such as {example}")
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


def dispatch(args: argparse.Namespace) -> int:
    from gpu_triage.config import load_config

    check_file_args(args)

    config = load_config(getattr(args, "config", None))
    if getattr(args, "interval", None):
        config.interval_s = args.interval
    if getattr(args, "window", None):
        config.window_s = args.window
    command = args.command or "live"

    if command in ("live", "demo", "replay"):
        from gpu_triage.ui.run import run_dashboard

        return run_dashboard(command, args, config)
    if command == "record":
        from gpu_triage.commands.record import run_record

        return run_record(args, config)
    if command == "recover":
        from gpu_triage.commands.recover import run_recover

        return run_recover(args)
    if command == "diagnose":
        from gpu_triage.fleet.summary import is_dataset_spec

        if getattr(args, "summary", False) or is_dataset_spec(args.file):
            from gpu_triage.commands.summary import run_summary

            return run_summary(args, config)
        from gpu_triage.commands.diagnose import run_diagnose

        return run_diagnose(args, config)
    if command == "compare":
        from gpu_triage.commands.compare import run_compare

        return run_compare(args, config)
    if command == "export":
        from gpu_triage.commands.export import run_export

        return run_export(args, config)
    if command == "fleet":
        from gpu_triage.commands.fleet import run_fleet

        return run_fleet(args, config, screen=_fleet_screen)
    if command == "doctor":
        from gpu_triage.commands.doctor import run_doctor

        return run_doctor(args, config)
    if command == "baseline":
        from gpu_triage.commands.baseline import run_baseline

        return run_baseline(args, config)
    if command == "loader":
        from gpu_triage.commands.loader import run_loader

        return run_loader(args)
    if command == "completion":
        from gpu_triage.commands.completion import run_completion

        return run_completion(args, build_parser())
    if command == "snapshot":
        from gpu_triage.commands.snapshot import run_snapshot

        return run_snapshot(args, config)
    raise AssertionError(command)
