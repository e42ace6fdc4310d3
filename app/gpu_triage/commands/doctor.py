"""``gpu-triage doctor``: the report of :mod:`gpu_triage.doctor.run`, printed as text or JSON."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpu_triage.doctor.facts import probe_torch
from gpu_triage.doctor.run import check_params, collect_report
from gpu_triage.errors import UserError

# the logger's name is in every log line: the doctor's own, whichever module runs it
log = logging.getLogger("gpu_triage.doctor.run")


def run_doctor(
    args: argparse.Namespace,
    config: Any = None,
    *,
    nvml_module: Any | None = None,
    psutil_module: Any | None = None,
    env: Mapping[str, str] | None = None,
    sysfs: Path = Path("/sys"),
    torch_probe: Callable[[], dict[str, Any]] | None = probe_torch,
    out: Any = None,
) -> int:
    """Entry point of the subcommand. The keyword arguments are the outside world, for tests."""
    from gpu_triage.doctor.render import render_text, use_colour  # noqa: PLC0415 - keep import light

    params = check_params(getattr(args, "params", None))
    python = getattr(args, "python", None)
    if python is not None and torch_probe is probe_torch:
        if not (Path(python).is_file() and os.access(python, os.X_OK)):
            raise UserError(f"--python {python}: not an executable file; give the python of your training environment")
        torch_probe = lambda: probe_torch(python=python)  # noqa: E731
    out = out or sys.stdout
    report = collect_report(params, nvml_module, psutil_module, env, sysfs, torch_probe)
    bad = [f"{c.id}={c.status}" for c in report.checks if c.status in ("warn", "fail")]
    log.info("doctor: %s (%d checks%s)", report.status, len(report.checks), f"; {', '.join(bad)}" if bad else "")
    if getattr(args, "json", False):
        out.write(json.dumps(report.to_json_obj(), indent=2, default=str) + "\n")
    else:
        width = shutil.get_terminal_size().columns if getattr(out, "isatty", lambda: False)() else None
        out.write(render_text(report, colour=use_colour(out, os.environ if env is None else env), width=width))
    out.flush()
    return report.exit_code
