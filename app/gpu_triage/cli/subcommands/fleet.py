"""``gpu-triage fleet``: one live view of many hosts' verdicts, on a screen or printed once."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpu_triage.cli import values
from gpu_triage.cli.command import Command, Invocation
from gpu_triage.fleet_live import EXIT_HELP, KEYS_HELP, SORT_ORDER_HELP

if TYPE_CHECKING:
    from gpu_triage.fleet_live.client import Fleet


def _arguments(p: argparse.ArgumentParser) -> None:
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
        "--refresh", type=values.seconds_between(0.5, 3600.0), default=5.0, metavar="S",
        help="seconds between rounds (5)"
    )
    p.add_argument(
        "--timeout",
        type=values.seconds_between(0.1, 120.0),
        metavar="S",
        help="seconds one request may take, from connecting to its last byte: a slower exporter is down for the "
        "round (default 3), a Prometheus round an error (default 10: a large fleet's answer is megabytes)",
    )
    p.add_argument(
        "--concurrency", type=values.positive_int, default=16, metavar="N", help="exporters scraped at once (16)"
    )
    p.add_argument("--once", action="store_true", help="print one round as a table and exit (no screen)")
    p.add_argument("--json", action="store_true", help="print one round as JSON and exit (no screen)")


def _screen(fleet: Fleet) -> int:
    from gpu_triage.ui.fleet_app import run_fleet_screen

    return run_fleet_screen(fleet)


def _run(call: Invocation) -> int:
    from gpu_triage.commands.fleet import run_fleet

    return run_fleet(call.args, call.config, screen=_screen)


def _on_screen(args: argparse.Namespace) -> bool:
    return not (args.once or args.json)


COMMAND = Command(
    name="fleet",
    order=100,
    help="one live view of many hosts: each one's verdict, from a Prometheus or a list of exporters",
    description=(
        "One row per host: its verdict (bottleneck, pattern, confidence), cards busy of all, mean GPU-Util, "
        "the job's samples/s and the owner where the metrics carry one, read from a Prometheus that scrapes "
        "`gpu-triage export` (its HTTP API; federated or not) or straight from a small pool of exporters. "
        f"{SORT_ORDER_HELP} {KEYS_HELP} Refreshed in the background every --refresh seconds; a host that "
        f"does not answer shows as down, never as idle. {EXIT_HELP} docs/metrics.md, \"The fleet view\"."
    ),
    arguments=_arguments,
    run=_run,
    on_screen=_on_screen,
)
