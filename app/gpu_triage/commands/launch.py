"""``gpu-triage run [--record FILE] [options] -- CMD ...``: start the training job as this process's child and
watch it, in the spirit of ``py-spy record -- python train.py`` and ``nsys profile``.

Why a launcher: under ``kernel.yama.ptrace_scope=1`` (Ubuntu's default) a process may read another's memory only
if it is that process's ancestor, or the process named it as its tracer. py-spy, our child, is the job's sibling,
not its ancestor; so the job is started with ``prctl(PR_SET_PTRACER, <this pid>)`` (set between fork and exec, it
holds across the exec), which lets this process and its descendants, py-spy among them, read it without root.
Its own children (torchrun's ranks) are new processes: each names this process too when it imports
``gpu_triage.pulse`` (it reads ``GPU_TRIAGE_TRACER``), else its stacks need root or the job's user with
ptrace_scope=0. `gpu-triage doctor` says which of these applies here.

What passes through untouched: the job runs in a process group of its own, so SIGINT, SIGTERM and SIGHUP sent to
gpu-triage (Ctrl-C at the terminal, systemd, a dropped SSH session) are forwarded to that whole group (torchrun and
its ranks) and nothing else is done about them: the job decides how to end, and the monitor follows it until it
has. gpu-triage then exits with the job's own exit status (128 + N when a signal killed it, as a shell says).
The job's pulse is wired: ``GPU_TRIAGE_PULSE_DIR`` names a private directory made for this run (unless it is set
already), read by this monitor, and inherited by the job.

With ``--record FILE`` the monitor is headless (``gpu-triage record``'s recorder, stopped and its file closed
when the job ends); otherwise the live dashboard follows the job, whose output then goes to a log file (the
dashboard owns the terminal) that it also reads as ``--job-log``; it closes when the job ends.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.errors import UserError
from gpu_triage.openfiles import open_output
from gpu_triage.pulse import tracer_call

log = logging.getLogger(__name__)

FORWARDED = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def job_environment(pulse_dir: str, tracer: int) -> dict[str, str]:
    """The job's environment: ours, with its pulse directory and the pid its processes name as their tracer."""
    return dict(os.environ, GPU_TRIAGE_PULSE_DIR=pulse_dir, GPU_TRIAGE_TRACER=str(tracer))


def start_job(cmd: list[str], env: dict[str, str], output: Any = None) -> subprocess.Popen[bytes]:
    """The job in a process group of its own, naming this process as its tracer; one clear line if it cannot
    start (not found, not executable)."""
    me = os.getpid()
    call = tracer_call()  # resolved here: between fork and exec the child only makes the one system call
    try:
        return subprocess.Popen(cmd, env=env, process_group=0, stdout=output, stderr=output,
                                preexec_fn=None if call is None else lambda: call(me))  # noqa: PLW1509
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise UserError(f"gpu-triage run: cannot start {cmd[0]!r} ({exc.strerror}): give the job's command after "
                        "--, as you would run it (gpu-triage run -- torchrun --nproc-per-node 8 train.py)",
                        exit_code=127 if isinstance(exc, FileNotFoundError) else 126) from None


class Forwarder:
    """While entered, SIGINT/SIGTERM/SIGHUP sent to us go to the job's process group, and nothing else."""

    def __init__(self, job: subprocess.Popen[bytes]) -> None:
        self.job = job
        self._previous: dict[int, Any] = {}
        self.forwarded: list[str] = []

    def _handle(self, signum: int, _frame: object) -> None:
        self.forwarded.append(signal.Signals(signum).name)
        try:
            os.killpg(self.job.pid, signum)
        except ProcessLookupError:
            pass  # the group has ended: nothing left to tell

    def __enter__(self) -> Forwarder:
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def exit_status(returncode: int) -> int:
    """The job's status as a shell gives it: its exit code, or 128 + N when signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


def _pulse_dir() -> str:
    explicit = os.environ.get("GPU_TRIAGE_PULSE_DIR")
    if explicit:
        return explicit
    made = tempfile.mkdtemp(prefix="gpu-triage-run-")  # mode 700: pulse.py's own check for a private directory
    os.environ["GPU_TRIAGE_PULSE_DIR"] = made  # this monitor's pulse reader reads it from here
    return made


def _when_done(job: subprocess.Popen[bytes], then: Callable[[], None]) -> threading.Thread:
    def wait() -> None:
        job.wait()
        then()

    t = threading.Thread(target=wait, name="gpu-triage-job", daemon=True)
    t.start()
    return t


def run_launch(args: argparse.Namespace, config: Config,
               make_app: Callable[[argparse.Namespace, Config], Any]) -> int:
    """``make_app(args, config)``: the live dashboard's app (the cli passes it in: commands never import the UI)."""
    cmd = list(args.job_command or [])
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        raise UserError("gpu-triage run: give the job's command after --: gpu-triage run -- python train.py")
    record = getattr(args, "record", None)
    if record:
        from gpu_triage.trace.target import check_record_target  # noqa: PLC0415 - a bad FILE fails before the job

        output = check_record_target(record, parent_must_exist=True)
    pulse_dir = _pulse_dir()
    env = job_environment(pulse_dir, os.getpid())
    if record:
        return _headless(cmd, env, output, args, config)
    return _dashboard(cmd, env, args, config, make_app)


def _headless(cmd: list[str], env: dict[str, str], output: Path, args: argparse.Namespace, config: Config) -> int:
    from gpu_triage.commands.record import source_of  # noqa: PLC0415
    from gpu_triage.recording.headless import record_source  # noqa: PLC0415

    interval_s = float(getattr(args, "interval", None) or config.interval_s)
    source = source_of(args, "live", config, interval_s)
    stop = threading.Event()
    job = start_job(cmd, env)
    log.info("gpu-triage run: job pid %d started: %s", job.pid, " ".join(cmd)[:300])
    with Forwarder(job):
        _when_done(job, stop.set)
        try:
            record_source(source, output, interval_s, config=config, stop=stop)
        except UserError as err:
            if job.poll() is None:
                raise
            # a job that ended before the first tick leaves nothing to record; its status is still the answer
            print(f"gpu-triage: {err}", file=sys.stderr, flush=True)
        job.wait()
    log.info("gpu-triage run: job pid %d ended with status %d", job.pid, exit_status(job.returncode))
    return exit_status(job.returncode)


def _dashboard(cmd: list[str], env: dict[str, str], args: argparse.Namespace, config: Config,
               make_app: Callable[[argparse.Namespace, Config], Any]) -> int:
    log_path = Path(getattr(args, "job_output", None) or f"gpu-triage-run-{os.getpid()}.log").expanduser()
    try:  # the current directory may be anyone's: a link planted under the name is refused, a new file is 0600
        out = os.fdopen(open_output(log_path, exclusive=False, mode=0o600), "ab")
    except OSError as exc:
        raise UserError(f"--job-output {log_path}: cannot write it ({exc.strerror}): give a writable file") from None
    args.job_log = getattr(args, "job_log", None) or str(log_path)  # the dashboard reads the job's progress there
    app = make_app(args, config)
    print(f"gpu-triage run: the job's output goes to {log_path}", file=sys.stderr, flush=True)
    job = start_job(cmd, env, out)
    out.close()
    screen_over = threading.Event()

    def close_screen() -> None:
        # the job may end before the screen's loop runs: asked again until it is up or has ended by itself
        while not screen_over.is_set():
            try:
                app.call_from_thread(app.exit)
                return
            except RuntimeError:  # no loop yet (or any more)
                screen_over.wait(0.1)

    with Forwarder(job):
        _when_done(job, close_screen)
        try:
            if job.poll() is None:  # a job that ended at once leaves no screen to follow it
                app.run()
        finally:
            screen_over.set()
        if job.poll() is None:
            print(f"gpu-triage run: waiting for the job (pid {job.pid}) to end; Ctrl-C is passed to it",
                  file=sys.stderr, flush=True)
        job.wait()
    return exit_status(job.returncode)
