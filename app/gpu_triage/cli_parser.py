"""The ``gpu-triage`` command line's parser: :func:`build_parser`, its description and examples, and each
subcommand's arguments (the shared option groups and value types are :mod:`gpu_triage.cli_args`'s)."""

from __future__ import annotations

import argparse

from gpu_triage import __version__
from gpu_triage.cli_args import (
    Parser,
    _add_job,
    _add_logging,
    _add_metrics,
    _add_rotate,
    _add_sampling,
    _add_seconds,
    _add_source,
    _add_stacks,
    _bool_list,
    _gpu_count,
    _int_list,
    _interval,
    _positive_float,
    _positive_int,
    _resolution,
    _seconds_between,
    _seed,
    _speed,
    add_after_command,
    add_compact,
    add_run,
)
from gpu_triage.export import DEFAULT_LISTEN
from gpu_triage.scenarios import SCENARIOS
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
  gpu-triage compact fleet/ --keep-days 90   daily files and a flat table for queries; 90 days kept
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
    _add_sampling(parser, top=True)
    _add_logging(parser, top=True)
    parser.add_argument("--record", metavar="FILE", help="record every tick of the live session to FILE (Parquet)")
    _add_job(parser, top=True)
    _add_stacks(parser, top=True)
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
    _add_stacks(p)

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
    _add_stacks(p)

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
    _add_stacks(p)
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
    add_compact(sub)
    add_run(sub)
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
    for name, command_parser in sub.choices.items():
        add_after_command(name, command_parser)
    return parser


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


def _add_snapshot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="one reading, no screen: every card, the host, the processes and the verdict (--json for scripts)",
        description="Sample for a few seconds (the shortest window the diagnosis judges), print every card, the "
        "host, the processes and the verdict once, and exit, as gpustat or `nvtop -s` do. Without a GPU it says "
        "so and reads the host; exit 3 when its cards are faulty (a dead driver, a card lost or missing).",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (times ISO 8601 UTC)")
    p.add_argument("--seconds", type=_positive_float, default=6.0, metavar="S",
                   help="the window sampled (default 6: before that the verdict is still collecting)")
    p.add_argument("--interval", dest="snapshot_interval", type=_interval, default=1.0, metavar="S",
                   help="seconds between ticks (default 1)")
    _add_source(p)
    _add_stacks(p)


def _add_fleet(sub: argparse._SubParsersAction) -> None:
    from gpu_triage.fleetview import EXIT_HELP, KEYS_HELP, SORT_ORDER_HELP

    p = sub.add_parser(
        "fleet",
        help="one live view of many hosts: each one's verdict, from a Prometheus or a list of exporters",
        description=(
            "One row per host: its verdict (bottleneck, pattern, confidence), cards busy of all, mean GPU-Util, "
            "the job's samples/s and the owner where the metrics carry one, read from a Prometheus that scrapes "
            "`gpu-triage export` (its HTTP API; federated or not) or straight from a small pool of exporters. "
            f"{SORT_ORDER_HELP} {KEYS_HELP} Refreshed in the background every --refresh seconds; a host that "
            f"does not answer shows as down, never as idle. {EXIT_HELP} docs/metrics.md, \"The fleet view\"."
        ),
    )
    p.add_argument("--prometheus", metavar="URL", help="the Prometheus server, e.g. http://prometheus:9090")
    p.add_argument(
        "--match",
        metavar="MATCHERS",
        help='with --prometheus: only series with these labels, e.g. job="gpu-triage" (default: every target '
        "of the scrape jobs that exported gpu_triage metrics in the last hour)",
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
        help="seconds one request may take, from connecting to its last byte: a slower exporter is down for the "
        "round (default 3), a Prometheus round an error (default 10: a large fleet's answer is megabytes)",
    )
    p.add_argument(
        "--concurrency", type=_positive_int, default=16, metavar="N", help="exporters scraped at once (16)"
    )
    p.add_argument("--once", action="store_true", help="print one round as a table and exit (no screen)")
    p.add_argument("--json", action="store_true", help="print one round as JSON and exit (no screen)")
