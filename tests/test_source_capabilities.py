"""The optional capabilities a source may offer are declared in sources/base.py and asked with isinstance,
so the dashboard's job pane and its host-only process table follow what the source really offers."""

from __future__ import annotations

from pathlib import Path

import fake_nvml
from gpu_triage.sources import live
from gpu_triage.sources.base import AllHostProcesses, HostProcesses, JobSource, Source, Wrapper
from gpu_triage.sources.job import JobMonitor, WithJob
from gpu_triage.sources.sim import SimulatedSource


def test_the_job_wrapper_offers_the_job_and_its_inner_source(tmp_path: Path) -> None:
    inner = SimulatedSource("healthy", gpus=1, cores=2)
    src = WithJob(inner, JobMonitor(pulse_directory=str(tmp_path)), 2.0)
    try:
        assert isinstance(src, Source) and isinstance(src, JobSource) and isinstance(src, Wrapper)
        assert src.inner is inner
        assert src.job_notice() is None or isinstance(src.job_notice(), str)
    finally:
        src.close()


def test_a_plain_source_offers_neither() -> None:
    src = SimulatedSource("healthy", gpus=1, cores=2)
    assert isinstance(src, Source)
    assert not isinstance(src, JobSource) and not isinstance(src, Wrapper) and not isinstance(src, HostProcesses)
    assert not isinstance(src, AllHostProcesses)


def test_the_live_source_lists_the_hosts_busiest_processes() -> None:
    src = live.LiveSource(nvml_module=fake_nvml.FakeNvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))
    try:
        assert isinstance(src, HostProcesses) and isinstance(src, AllHostProcesses)
        assert not isinstance(src, JobSource)
        assert isinstance(src.busiest_processes(), list) and isinstance(src.host_processes(), list)
    finally:
        src.close()
