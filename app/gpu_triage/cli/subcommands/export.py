"""``gpu-triage export``: Prometheus metrics and the verdict served headless (a fleet's daemon)."""

from __future__ import annotations

import argparse

from gpu_triage.cli import options
from gpu_triage.cli.command import Command, Invocation
from gpu_triage.export import DEFAULT_LISTEN


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}: this machine only; 0.0.0.0:PORT for every "
        "interface; port 0 picks a free one)",
    )
    options.add_seconds(p, "--interval", "seconds between ticks (default 2, from the config file if set)")
    options.add_seconds(p, "--window",
                        "seconds of history the diagnosis looks at (default 300, from the config file if set)")
    options.add_source(p)
    options.add_job(p)
    options.add_stacks(p)
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
    options.add_rotate(p)


def _run(call: Invocation) -> int:
    from gpu_triage.commands.export import run_export

    return run_export(call.args, call.config)


COMMAND = Command(
    name="export",
    order=90,
    help="serve Prometheus metrics and the verdict, headless (a daemon for a fleet)",
    description=(
        "Sample this machine like the dashboard, diagnose every tick with the same engine, and serve "
        "/metrics (the Prometheus text format) on HOST:PORT: every card, the host, GPU processes and "
        "the verdict (gpu_triage_verdict{pattern,bottleneck,cards} 1). Serves metrics only. "
        "SIGTERM or Ctrl-C stop it cleanly. Metric names: docs/metrics.md."
    ),
    arguments=_arguments,
    run=_run,
)
