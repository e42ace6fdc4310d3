"""The one interface every source of ticks implements: NVML+host (live), simulated, and replay.

A source is sampled from a worker thread (never the UI thread) by :class:`gpu_triage.sampler.Sampler`.
``sample()`` returns a :class:`~gpu_triage.model.Tick` covering the time since the previous call; it may
block for the time the hardware takes, but must not sleep to pace itself: the sampler paces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpu_triage.model import HostInfo, ProcSample, Tick


class GpuFault(StrEnum):
    """What is wrong with the cards themselves, which no waveform can show: said instead of a verdict (the
    dashboard's red headline, export's verdict, the fleet's first rows, ``snapshot``'s exit status)."""

    DRIVER_FAILURE = "driver_failure"  # the kernel lists NVIDIA GPUs and NVML does not start
    CARD_LOST = "card_lost"  # a card stopped answering (NVML GPU_IS_LOST, XID 79)
    CARDS_MISSING = "cards_missing"  # NVML lists fewer cards than the kernel does


@dataclass(slots=True)
class SourceStatus:
    """What a source wants the user to know beside the numbers."""

    gpu_available: bool = True  # False: no driver / no NVML; the dashboard runs host-only
    lost_gpus: set[int] = field(default_factory=set)  # NVML indexes that fell off the bus
    messages: list[str] = field(default_factory=list)  # plain one-line notices for the banner
    # why NVML does not answer on a machine whose kernel lists NVIDIA GPUs (None: it answers, or no GPU there)
    driver_failure: str | None = None
    gpus_expected: int | None = None  # NVIDIA GPUs the kernel lists (sources/gpu_inventory.py); None: unknown
    gpus_seen: int | None = None  # cards NVML lists (None: not a live source)

    @property
    def gpus_missing(self) -> int:
        """Cards the kernel lists and NVML does not (0 when either is unknown)."""
        if self.gpus_expected is None:
            return 0
        seen = 0 if self.driver_failure is not None else self.gpus_seen
        return max(0, self.gpus_expected - seen) if seen is not None else 0

    def fault(self) -> GpuFault | None:
        """The worst thing wrong with the cards, or None."""
        if self.driver_failure is not None:
            return GpuFault.DRIVER_FAILURE
        if self.lost_gpus:
            return GpuFault.CARD_LOST
        if self.gpus_missing:
            return GpuFault.CARDS_MISSING
        return None

    def fault_line(self) -> str | None:
        """The fault as one sentence with what to check, or None."""
        fault = self.fault()
        if fault is GpuFault.DRIVER_FAILURE:
            n = self.gpus_expected
            cards = f"{n} NVIDIA GPU{'' if n == 1 else 's'}" if n else "an NVIDIA GPU"
            return f"GPU FAILURE: the kernel lists {cards}, the NVIDIA driver does not answer: {self.driver_failure}"
        if fault is GpuFault.CARD_LOST:
            lost = sorted(self.lost_gpus)
            which = f"GPU {lost[0]}" if len(lost) == 1 else "GPUs " + ",".join(map(str, lost))
            return (f"GPU FAILURE: {which} fell off the bus (NVML GPU_IS_LOST, XID 79): the job on it is dead; "
                    "`dmesg | grep -i xid` says why, the card needs a reset or a reboot.")
        if fault is GpuFault.CARDS_MISSING:
            return (f"GPU FAILURE: the driver lists {self.gpus_seen} of the {self.gpus_expected} NVIDIA GPUs the "
                    f"kernel sees ({self.gpus_missing} missing: a card that did not come up this boot or fell off "
                    "the bus): check `nvidia-smi` and `dmesg | grep -i xid`.")
        return None


@runtime_checkable
class Source(Protocol):
    name: str  # "live", "sim:data_pipeline", "replay:FILE"

    def host_info(self) -> HostInfo: ...

    def sample(self) -> Tick: ...

    def status(self) -> SourceStatus: ...

    def close(self) -> None: ...


# Optional capabilities: what some sources offer beyond the protocol, declared so a caller asks with
# isinstance (checked by mypy) instead of probing for a name.


@runtime_checkable
class JobSource(Protocol):
    """Its ticks carry the job's own clock (``sources.job.WithJob``): the dashboard keeps a job pane."""

    def job_notice(self) -> str | None: ...


@runtime_checkable
class HostProcesses(Protocol):
    """It lists the host's busiest processes: the process table of a machine without a GPU."""

    def busiest_processes(self) -> list[ProcSample]: ...


@runtime_checkable
class AllHostProcesses(Protocol):
    """It lists every process of the host: the filtered table of a machine without a GPU, so that `/` then
    the PID of an idle process finds it."""

    def host_processes(self) -> list[ProcSample]: ...


@runtime_checkable
class Wrapper(Protocol):
    """It adds to the ticks of another source (``inner``), whose own capabilities stay the inner one's."""

    inner: Source


@runtime_checkable
class InsideNotice(Protocol):
    """It reads the waiting processes' stacks (the live source with py-spy on): why they are not read here."""

    def inside_notice(self) -> str | None: ...
