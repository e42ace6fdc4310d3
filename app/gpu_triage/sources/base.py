"""The one interface every source of ticks implements: NVML+host (live), simulated, and replay.

A source is sampled from a worker thread (never the UI thread) by :class:`gpu_triage.sampler.Sampler`.
``sample()`` returns a :class:`~gpu_triage.model.Tick` covering the time since the previous call; it may
block for the time the hardware takes, but must not sleep to pace itself: the sampler paces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gpu_triage.model import HostInfo, ProcSample, Tick


@dataclass(slots=True)
class SourceStatus:
    """What a source wants the user to know beside the numbers."""

    gpu_available: bool = True  # False: no driver / no NVML; the dashboard runs host-only
    lost_gpus: set[int] = field(default_factory=set)  # NVML indexes that fell off the bus
    messages: list[str] = field(default_factory=list)  # plain one-line notices for the banner


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
