"""``gpu-triage baseline``: what the machine does with no input pipeline, on one card and on N.

Each run is a set of rank processes (``python -m gpu_triage.checkup.baseline_rank``) started the way
torchrun starts them (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR/PORT`` in the environment),
each in a session of its own so that Ctrl-C reaches only this process, which then ends them (SIGTERM, then
SIGKILL) and reports what it measured. One rank failing ends the others at once: they would otherwise
wait in a collective until the NCCL timeout. ``NCCL_NVLS_ENABLE=0`` is set for the ranks unless the user
set it (NVLink multicast needs fabric-manager state a check-up should not depend on).

Scaling efficiency = samples/s on N cards / (N x samples/s on one card), with the per-card batch fixed
(weak scaling). Under 50 % is flagged: the doctor's topology and NCCL checks say where to look.

``--record FILE`` records the machine (the live source: GPUs where NVML is, always the host; and the job's
own pulse, which every rank feeds with ``pulse.step``) beside both runs with the ordinary recorder, so
``gpu-triage compare FILE real-run.parquet`` sets a real training run beside the baseline; the results go
to ``FILE.baseline.json`` too.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_triage.errors import UserError

log = logging.getLogger(__name__)

FLAG_BELOW = 0.5  # scaling efficiency under this is a failure worth chasing
WARMUP_STEPS = 10
INIT_TIMEOUT_S = 120.0
STARTUP_MARGIN_S = 180.0  # import torch, CUDA context, NCCL set-up, warm-up: on top of --seconds


@dataclass
class BaselineReport:
    device: str
    gpus: int
    model_size: str
    amp: bool
    seconds: float
    runs: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    recording: str | None = None

    def run_for(self, world: int) -> dict[str, Any] | None:
        return next((r for r in self.runs if r["world_size"] == world), None)

    @property
    def efficiency(self) -> float | None:
        return scaling_efficiency(self.run_for(1), self.run_for(self.gpus)) if self.gpus > 1 else None

    @property
    def flagged(self) -> bool:
        eff = self.efficiency
        return eff is not None and eff < FLAG_BELOW

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "gpus": self.gpus,
            "model_size": self.model_size,
            "amp": self.amp,
            "seconds": self.seconds,
            "runs": self.runs,
            "scaling_efficiency": self.efficiency,
            "flagged": self.flagged,
            "interrupted": self.interrupted,
            "recording": self.recording,
        }


def scaling_efficiency(one: dict[str, Any] | None, many: dict[str, Any] | None) -> float | None:
    """samples/s on N / (N x samples/s on 1); None when either run is missing."""
    if not one or not many or not one["samples_per_s"]:
        return None
    return float(many["samples_per_s"]) / (int(many["world_size"]) * float(one["samples_per_s"]))


def render(report: BaselineReport) -> str:
    unit = "card" if report.device == "cuda" else "CPU rank"
    lines = [
        f"baseline: {report.model_size} MLP, {'bf16 autocast' if report.amp else 'fp32/tf32'}, "
        f"fixed random tensors on the {report.device}, {report.seconds:g} s timed per run after a warm-up"
    ]
    for r in report.runs:
        n = r["world_size"]
        lines.append(
            f"  {n} {unit}{'s' if n > 1 else ''}: {r['samples_per_s']:,.0f} samples/s "
            f"({r['step_ms']:.1f} ms per step, {r['batch_per_rank']} per {unit}, {r['steps']} steps"
            + (f", {r['backend']}" if r.get("backend") else "")
            + (", interrupted" if r.get("interrupted") else "")
            + ")"
        )
    eff = report.efficiency
    if eff is not None:
        verdict = "ok" if not report.flagged else "FLAGGED"
        lines.append(
            f"  scaling efficiency: {eff:.0%} of {report.gpus} x one {unit} ({verdict}; "
            f"under {FLAG_BELOW:.0%} is a failure worth chasing)"
        )
        if report.flagged:
            lines.append(
                "  -> run `gpu-triage doctor`: its topology and NCCL checks (PCIe links, NVLink, NCCL_P2P_LEVEL, "
                "NUMA) say where the cards lose time talking to each other"
            )
    elif report.gpus > 1:
        lines.append("  scaling efficiency: n/a (the N-card run did not finish)")
    if report.interrupted:
        lines.append("  stopped (Ctrl-C or a stop signal): the figures above are what was measured")
    if report.recording:
        lines.append(f"  recorded to {report.recording}: `gpu-triage compare {report.recording} YOUR-RUN.parquet`")
    return "\n".join(lines)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _package_root() -> str:
    import gpu_triage

    return str(Path(gpu_triage.__file__).resolve().parent.parent)


class _Ranks:
    """The rank processes of one run: started together, ended together."""

    def __init__(self, world: int, cfg: dict[str, Any], workdir: Path) -> None:
        self.world = world
        self.result_path = Path(cfg["result_path"])
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        port = _free_port()
        env = dict(os.environ)
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
        env.update({"WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        env["LOCAL_WORLD_SIZE"] = str(world)
        try:
            for rank in range(world):
                env_r = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
                log_path = workdir / f"w{world}-rank{rank}.log"
                self.logs.append(log_path)
                with open(log_path, "wb") as err:
                    self.procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "gpu_triage.checkup.baseline_rank", json.dumps(cfg)],
                            env=env_r,
                            stdin=subprocess.DEVNULL,
                            stdout=err,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,  # Ctrl-C is ours; we end the ranks
                        )
                    )
        except BaseException:  # Ctrl-C or a failed start half way: no rank left behind
            self.end(0.0)
            raise

    def wait(self, deadline_s: float) -> None:
        """Until every rank exits 0; UserError naming the first that failed (the others are ended)."""
        end = time.monotonic() + deadline_s
        while True:
            codes = [p.poll() for p in self.procs]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                rank, code = bad[0]
                self.end()
                if self.result_path.exists():  # the measurement is complete; a rank crashed on its way out
                    log.warning("baseline rank %d exited with %s after the result was written", rank, code)
                    return
                raise UserError(
                    f"baseline on {self.world} rank(s): rank {rank} exited with status {code}: {self._last_line(rank)}"
                )
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > end:
                self.end()
                raise UserError(
                    f"baseline on {self.world} rank(s) did not finish in {deadline_s:.0f} s (a hang in NCCL set-up "
                    "or a collective?): run `gpu-triage doctor`, or try NCCL_DEBUG=INFO"
                )
            time.sleep(0.1)

    def _last_line(self, rank: int) -> str:
        try:
            text = self.logs[rank].read_text(errors="replace")
        except OSError:
            return "(no output)"
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "Error" in ln or "error" in ln]
        return (errors or lines or ["(no output)"])[-1][:300]

    def request_stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def end(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL whatever is still there after ``grace_s``; always reaps."""
        self.request_stop()
        end = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_once(world: int, cfg: dict[str, Any], workdir: Path, stopping: threading.Event) -> dict[str, Any] | None:
    result_path = workdir / f"result-w{world}.json"
    ranks = _Ranks(world, dict(cfg, result_path=str(result_path)), workdir)
    try:
        deadline = float(cfg["seconds"]) + STARTUP_MARGIN_S + INIT_TIMEOUT_S
        ranks.wait(deadline)
    except KeyboardInterrupt:
        # ask the ranks to stop at their next agreed check and report; end them if they do not
        stopping.set()
        ranks.request_stop()
        try:
            ranks.wait(10.0)
        except (UserError, KeyboardInterrupt):
            ranks.end(0.0)
            return None
    finally:
        ranks.end()
    try:
        result: dict[str, Any] = json.loads(result_path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"baseline on {world} rank(s) ended without a result ({exc})") from exc
    return result
