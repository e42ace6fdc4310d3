"""``gpu-triage fleet``: one live view of many hosts, from a Prometheus or from a pool of exporters.

Everything the user can get wrong (no source, two sources, a bad address, an unreadable list file) is one
line and exit 2 here, before a screen is taken. ``--once`` / ``--json`` fetch one round and print it; the
interactive screen (``ui/fleet_app.py``) is handed in by the caller, as commands never import the UI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable

from gpu_triage.config import Config
from gpu_triage.diagnosis.vocab import GPU_FAULT
from gpu_triage.errors import UserError
from gpu_triage.fleet_live.client import MAX_EXPORTERS, ExporterTarget, Fleet, PrometheusTarget, Target
from gpu_triage.fleet_live.model import OK, HostRow
from gpu_triage.fleet_live.render import table, to_json
from gpu_triage.openfiles import open_input
from gpu_triage.safetext import clip

LIST_FILE_CAP_BYTES = 1024 * 1024  # a list of a few thousand HOST:PORT lines is ~100 KB
EXPORTER_TIMEOUT_S = 3.0  # a scrape of one exporter takes milliseconds
PROMETHEUS_TIMEOUT_S = 10.0  # an answer for 1,000 hosts is ~17 MiB (docs/performance.md)
EXIT_HOST_DOWN = 3  # --once/--json printed the round, and a host is down, stale or has a GPU fault


def exporter_list(args: argparse.Namespace) -> list[str]:
    """``--exporters A,B`` and ``--exporters-file FILE`` (one a line or comma-separated, ``#`` comments),
    in the order given, each once."""
    found: list[str] = []
    for text in getattr(args, "exporters", None) or []:
        found += [a.strip() for a in text.split(",") if a.strip()]
    path = getattr(args, "exporters_file", None)
    if path:
        try:  # opened once, checked on its descriptor: a FIFO (swapped in or named) is refused, never waited on
            with open_input(path) as f:
                raw = f.read(LIST_FILE_CAP_BYTES + 1)
        except OSError as err:
            raise UserError(f"--exporters-file {clip(path, 80)}: {err.strerror or err}") from None
        if len(raw) > LIST_FILE_CAP_BYTES:
            raise UserError(f"--exporters-file {clip(path, 80)}: larger than 1 MiB: is it a list of HOST:PORT?")
        for line in raw.decode("utf-8", errors="replace").splitlines():
            line = line.split("#", 1)[0]
            found += [a.strip() for a in line.split(",") if a.strip()]
        if not found:
            raise UserError(f"--exporters-file {clip(path, 80)}: no HOST:PORT in it (one a line, # comments)")
    return list(dict.fromkeys(found))


def build_fleet(args: argparse.Namespace) -> Fleet:
    prometheus = getattr(args, "prometheus", None)
    exporters = exporter_list(args)
    if prometheus and exporters:
        raise UserError("fleet: give --prometheus URL or --exporters HOST:PORT,... (or a file), not both")
    timeout_s = float(args.timeout or (PROMETHEUS_TIMEOUT_S if prometheus else EXPORTER_TIMEOUT_S))
    targets: list[Target]
    try:
        if prometheus:
            targets = [PrometheusTarget(prometheus, match=getattr(args, "match", None) or "", timeout_s=timeout_s)]
            source = f"prometheus {targets[0].key}"
        elif exporters:
            if len(exporters) > MAX_EXPORTERS:
                raise UserError(
                    f"fleet: {len(exporters)} exporters: at most {MAX_EXPORTERS} are scraped directly; "
                    "a fleet that size has a Prometheus (--prometheus URL)"
                )
            targets = [ExporterTarget(a, timeout_s=timeout_s) for a in exporters]
            source = f"{len(targets)} exporter{'s' if len(targets) != 1 else ''}"
        else:
            raise UserError(
                "fleet: give --prometheus URL (a Prometheus that scrapes gpu-triage export) or "
                "--exporters HOST:PORT,... / --exporters-file FILE"
            )
    except ValueError as err:
        raise UserError(f"fleet: {err}") from None
    if getattr(args, "match", None) and not prometheus:
        raise UserError("fleet: --match selects series in a Prometheus: it goes with --prometheus")
    return Fleet(targets, source=source, interval_s=float(args.refresh), concurrency=int(args.concurrency))


def run_fleet(
    args: argparse.Namespace, config: Config, *, screen: Callable[[Fleet], int] | None = None
) -> int:
    """Print one round (``--once``, ``--json``) or run the screen. ``--once``/``--json`` exit 1 when the source
    itself failed (Prometheus did not answer), 3 when a host is down, stale or has a GPU fault, else 0."""
    del config  # the view has no settings of its own in the config file
    fleet = build_fleet(args)
    if args.once or args.json or screen is None:
        snap = fleet.once()
        if args.json:
            json.dump(to_json(snap), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            width = shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 120
            sys.stdout.write(table(snap, width))
        sys.stdout.flush()
        if snap.error:
            print(f"gpu-triage: error: {snap.error}", file=sys.stderr)
            return 1
        return EXIT_HOST_DOWN if any(host_is_failing(r) for r in snap.rows) else 0
    return screen(fleet)


def host_is_failing(row: HostRow) -> bool:
    """Down, stale, or its cards faulty: what makes ``--once`` exit :data:`EXIT_HOST_DOWN` (a bottleneck is a
    verdict on a working host, not a failure)."""
    return row.state != OK or row.bottleneck == GPU_FAULT
