"""The live source: this machine's GPUs (NVML), cores, memory and disks (psutil), and GPU processes.

Without an NVIDIA driver it still runs, host-only, and says why: a dashboard of CPU cores and disks is
useful on its own, and ``gpu-triage demo`` shows what the GPU panes look like.

Everything is primed at construction (driver sample timestamps, GPM samples, cumulative counters, CPU
times), so the first :meth:`LiveSource.sample` already has rates over a real interval. ``sample()``
blocks only for the NVML/psutil reads (a few ms per card, see benchmarks/bench_sampler.py); it never
sleeps and never calls the 20 ms ``nvmlDeviceGetPcieThroughput``.

With an :class:`~gpu_triage.sources.inside.InsideSampler` (``[inside] enabled``, not ``--no-stacks``) each tick
also carries the stack samples finished since the previous one, and tells the sampler which processes wait now:
the dashboard, ``record`` and ``export --record`` all build their ticks here, so all of them get the same stacks.
"""

from __future__ import annotations

import logging
import platform
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_triage import __version__
from gpu_triage.hostmeta import training_env
from gpu_triage.model import HostInfo, ProcSample, Tick
from gpu_triage.nvmlwrap import Nvml, NvmlUnavailable, load_nvml
from gpu_triage.safetext import clean
from gpu_triage.sources.base import SourceStatus
from gpu_triage.sources.gpu_inventory import system_gpus
from gpu_triage.sources.host import HostReader
from gpu_triage.sources.inside import InsideSampler
from gpu_triage.sources.nvml import NvmlGpuReader
from gpu_triage.sources.procs import BusiestProcesses, GpuProcessReader
from gpu_triage.topology import topology_matrix

log = logging.getLogger(__name__)


def no_gpu_message(reason: str) -> str:
    return (
        f"No NVIDIA driver found ({reason}): showing host only. "
        "Try `gpu-triage demo` to see a recorded H200 session."
    )


# NVML's error codes of nvmlInit on a machine whose cards are there (nvml.h), and what to do about each
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_LIB_RM_VERSION_MISMATCH = 18
_DRIVER_HINTS = {
    _DRIVER_NOT_LOADED: "the nvidia kernel module is not loaded (after a kernel upgrade: rebuild it, e.g. dkms, "
    "and reboot; `dmesg | grep -i nvrm` says why)",
    _LIBRARY_NOT_FOUND: "libnvidia-ml.so is not found (the driver's user-space part is missing; in a "
    "container: started without GPU access)",
    _LIB_RM_VERSION_MISMATCH: "its library and the loaded kernel module are of different versions (upgraded "
    "without a reboot): reboot, or reload the nvidia modules",
}


def driver_failure_text(exc: NvmlUnavailable) -> str:
    """Why NVML does not start, and what to do, in words (the driver's own reason in brackets)."""
    reason = _short_reason(exc)
    hint = _DRIVER_HINTS.get(exc.code) if exc.code is not None else None
    if hint is None:
        return f"NVML could not start ({reason}); `nvidia-smi` and `dmesg` say more"
    return f"{hint} (NVML: {reason.rstrip('.')})"


class LiveSource:
    """NVML + psutil host + GPU processes, implementing :class:`gpu_triage.sources.base.Source`."""

    name = "live"

    def __init__(
        self,
        nvml_module: Any | None = None,
        psutil_module: Any | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        inside: InsideSampler | None = None,
        system_root: Path | None = None,
    ) -> None:
        """``system_root``: where the kernel's ``/proc`` and ``/sys`` are read (default ``/`` or
        ``$GPU_TRIAGE_HOST_ROOT``, sources/gpu_inventory.py)."""
        if psutil_module is None:
            import psutil as psutil_module  # noqa: PLC0415
        self._ps: Any = psutil_module
        self._clock = clock
        self._wall = wall_clock
        self._status = SourceStatus()
        self._nvml: Nvml | None = None
        self._gpus: NvmlGpuReader | None = None
        self._procs: GpuProcessReader | None = None
        system = system_gpus(system_root)  # what the kernel lists, to tell a broken driver from no GPU
        self._status.gpus_expected = system.expected
        try:
            self._nvml = load_nvml(nvml_module)
        except NvmlUnavailable as exc:
            self._status.gpu_available = False
            if system.present:  # the cards are there and nothing can read them: a failure, not host-only mode
                self._status.driver_failure = driver_failure_text(exc)
                log.error("NVIDIA driver failure: %s", self._status.fault_line())
            else:
                log.info("live source without GPUs: %s", exc)
                self._status.messages.append(no_gpu_message(_short_reason(exc)))
        if self._nvml is not None:
            self._gpus = NvmlGpuReader(self._nvml, clock=clock)
            self._status.gpus_seen = len(self._gpus.cards)
            if self._status.gpus_missing:
                log.error("%s", self._status.fault_line())
            elif not self._gpus.cards:
                self._status.messages.append("The NVIDIA driver answers but lists no GPU: showing host only.")
            self._procs = GpuProcessReader(
                self._nvml,
                [(card.index, card.handle) for card in self._gpus.cards],
                psutil_module,
                clock=clock,
                wall_clock=wall_clock,
            )
        self._host = HostReader(psutil_module, clock=clock)
        # no card to watch: the process table shows the busiest processes of the host instead
        no_card = self._gpus is None or not self._gpus.cards
        self._busiest = BusiestProcesses(psutil_module, clock=clock) if no_card else None
        self._host_info = self._read_host_info()
        # stacks only of processes on a card: without one (host-only) there is no card to wait
        self._inside = inside if self._procs is not None else None
        self._inside_said: str | None = None
        if self._inside is not None and self._inside.available:
            self._inside.start()
        self._prev_t = clock()
        self.sample()  # prime every counter: the first real tick then covers a real interval

    # ---- Source protocol ----
    def host_info(self) -> HostInfo:
        return self._host_info

    def status(self) -> SourceStatus:
        if self._gpus is not None:
            self._status.lost_gpus = set(self._gpus.lost)
            while self._gpus.messages:
                self._status.messages.append(self._gpus.messages.pop(0))
            del self._status.messages[:-20]  # keep the banner's history short
        notice = self.inside_notice()
        if notice is not None and notice != self._inside_said:  # once per reason: the log has said it too
            self._inside_said = notice
            self._status.messages.append(notice)
            log.warning("inside evidence: %s", notice)
        return self._status

    def inside_notice(self) -> str | None:
        """Why the processes' stacks are not read here, with the fix; None while they read or when off."""
        return self._inside.notice() if self._inside is not None else None

    def sample(self) -> Tick:
        gpus = self._gpus.sample() if self._gpus is not None else []
        procs = self._procs.sample(self._gpus.lost) if self._procs is not None and self._gpus is not None else []
        host = self._host.sample()
        if self._busiest is not None:
            self._busiest.sample()
        now = self._clock()
        interval = now - self._prev_t
        self._prev_t = now
        tick = Tick(
            ts=datetime.fromtimestamp(self._wall(), tz=UTC),
            interval_s=interval,
            gpus=gpus,
            cpu_pct=host.cpu_pct,
            iowait_pct=host.iowait_pct,
            host_mem_used_bytes=host.mem_used_bytes,
            host_mem_total_bytes=host.mem_total_bytes,
            disks=host.disks,
            procs=procs,
            host_swap_used_bytes=host.swap_used_bytes,
            host_swap_total_bytes=host.swap_total_bytes,
            nets=host.nets,
        )
        if self._inside is not None and self._inside.available:
            tick.stacks = self._inside.drain()  # the dumps that finished since the previous tick
            self._inside.follow(tick)  # none while every card is busy: nothing is dumped
        return tick

    def busiest_processes(self) -> list[ProcSample]:
        """Host-only mode: the busiest processes at the last tick (empty with a GPU: the table shows GPU ones)."""
        return list(self._busiest.latest) if self._busiest is not None else []

    def host_processes(self) -> list[ProcSample]:
        """Host-only mode: every process with a CPU figure at the last tick (what a filter searches)."""
        return list(self._busiest.everyone) if self._busiest is not None else []

    def close(self) -> None:
        if self._inside is not None:
            self._inside.stop()
        if self._gpus is not None:
            self._gpus.close()
        if self._nvml is not None:
            self._nvml.shutdown()
            self._nvml = None

    # ---- static facts ----
    def _read_host_info(self) -> HostInfo:
        info = HostInfo(
            hostname=clean(socket.gethostname()),
            cpu_count=self._ps.cpu_count(logical=True),
            extra={
                "tool": "gpu-triage",
                "tool_version": __version__,
                "source": self.name,
                "kernel": platform.release(),
                "os": platform.system(),
                "env": training_env(),
            },
        )
        if self._gpus is not None and self._nvml is not None:
            info.driver_version = self._gpus.driver_version
            info.cuda_driver_version = self._gpus.cuda_driver_version
            info.gpus = self._gpus.gpu_infos
            info.topology = self._topology()
        return info

    def _topology(self) -> list[list[str]]:
        """``nvidia-smi topo -m`` labels (``n/a`` for a pair the driver does not describe or a lost card)."""
        assert self._gpus is not None and self._nvml is not None
        handles = self._gpus.handles
        if not handles or any(h is None for h in handles):
            return []
        return [list(map(str, row)) for row in topology_matrix(self._nvml, handles)]


def _short_reason(exc: BaseException) -> str:
    cause = exc.__cause__
    if cause is not None and str(cause):
        return str(cause)
    text = str(exc)
    return text.split(":")[0] if text else type(exc).__name__
