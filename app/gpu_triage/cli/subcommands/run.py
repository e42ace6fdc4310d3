"""``gpu-triage run [options] -- CMD ...``: the job started as our child, watched until it ends."""

from __future__ import annotations

import argparse
from typing import Any

from gpu_triage.cli import options
from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    options.add_sampling(p)
    # SUPPRESS: `gpu-triage --record FILE run -- CMD` keeps the top-level value (a default here would replace it)
    p.add_argument("--record", metavar="FILE", default=argparse.SUPPRESS,
                   help="headless: record every tick to FILE (Parquet) until the job ends, no dashboard")
    p.add_argument("--job-output", metavar="FILE", default=None,
                   help="with the dashboard: the file the job's output goes to (default gpu-triage-run-PID.log), "
                   "read as --job-log")
    options.add_job(p)
    options.add_stacks(p)
    p.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the job's command, after --, as you would run it (torchrun ..., python train.py)")


def _live_app(args: argparse.Namespace, config: Any) -> Any:
    from gpu_triage.ui.run import build_app

    return build_app("live", args, config)


def _run(call: Invocation) -> int:
    from gpu_triage.commands.launch import run_launch

    return run_launch(call.args, call.config, _live_app)


def _on_screen(args: argparse.Namespace) -> bool:
    return not getattr(args, "record", None)


COMMAND = Command(
    name="run",
    order=120,
    help="start a training job as gpu-triage's child and watch it until it ends (its stacks without root)",
    description="Start CMD as gpu-triage's child, in its own process group, allowed to be read by gpu-triage's "
    "py-spy under kernel.yama.ptrace_scope=1 without root; its pulse is wired (GPU_TRIAGE_PULSE_DIR). "
    "SIGINT, SIGTERM and SIGHUP go to the job's process group; gpu-triage exits with the job's status when "
    "it ends. With --record FILE the monitor is headless; otherwise the dashboard follows the job and its "
    "output goes to --job-output.",
    arguments=_arguments,
    run=_run,
    on_screen=_on_screen,
)
