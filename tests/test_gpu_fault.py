"""A broken driver, a lost card or a missing one is a fault everywhere, never a healthy idle host; a machine that
never had a GPU stays calm (issue 33, blocker 1).

The outside world is faked as it is: a fake NVML module whose ``nvmlInit`` raises as a broken driver's does
(DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH), whose card raises GPU_IS_LOST, and a directory laid out as the
kernel's ``/proc/driver/nvidia`` and ``/sys/bus/pci/devices`` (tests/fake_sysfs.py). Everything else is the real
thing: the live source, the dashboard (Textual's pilot, its SVG), the exporter's page over HTTP, ``fleet --once``
and the ``snapshot`` command's exit status.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.export.run import Exporter
from gpu_triage.sources.base import GpuFault, Source
from gpu_triage.sources.gpu_inventory import system_gpus
from gpu_triage.sources.live import LiveSource
from gpu_triage.sources.sim import SimulatedSource
from tests import fake_nvml
from tests.fake_sysfs import machine_root

MISMATCH = fake_nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
NOT_LOADED = fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED


def broken(code: int = MISMATCH) -> fake_nvml.FakeNvml:
    return fake_nvml.FakeNvml([], init_error=code)


# -- what the kernel lists --------------------------------------------------------------------------------------


def test_the_kernel_lists_nvidia_display_devices_not_nvswitches_or_other_vendors(tmp_path: Path) -> None:
    found = system_gpus(machine_root(tmp_path / "a", pci_gpus=8, driver_gpus=8, nvswitches=4))
    assert found.present and found.expected == 8 and len(found.pci) == 8 and found.driver_loaded
    # the module not loaded (a kernel upgrade without its rebuild): the PCI bus still says the cards are there
    unloaded = system_gpus(machine_root(tmp_path / "b", pci_gpus=2))
    assert unloaded.present and not unloaded.driver_loaded and unloaded.expected == 2
    # a container given 2 of the host's 8 cards: the driver's own list is the one to trust
    assert system_gpus(machine_root(tmp_path / "c", pci_gpus=8, driver_gpus=2)).expected == 2
    never = system_gpus(machine_root(tmp_path / "d"))
    assert not never.present and never.expected is None
    assert not system_gpus(tmp_path / "nothing-there").present


# -- the live source ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "words"), [
    (MISMATCH, "of different versions (upgraded without a reboot)"),
    (NOT_LOADED, "kernel module is not loaded"),
])
def test_nvml_failing_on_a_machine_with_cards_is_a_driver_failure(tmp_path: Path, code: int, words: str) -> None:
    source = LiveSource(nvml_module=broken(code), system_root=machine_root(tmp_path, pci_gpus=8, driver_gpus=8))
    try:
        status = source.status()
        assert status.fault() is GpuFault.DRIVER_FAILURE and not status.gpu_available
        line = status.fault_line()
        assert line is not None and line.startswith("GPU FAILURE") and "8 NVIDIA GPUs" in line and words in line
        assert not any("demo" in m for m in status.messages)  # not the calm "no driver, try the demo" notice
    finally:
        source.close()


def test_a_machine_that_never_had_a_gpu_stays_calm(tmp_path: Path) -> None:
    source = LiveSource(nvml_module=broken(NOT_LOADED), system_root=machine_root(tmp_path))
    try:
        status = source.status()
        assert status.fault() is None and status.fault_line() is None and not status.gpu_available
        assert any("showing host only" in m for m in status.messages)
    finally:
        source.close()


def test_fewer_cards_than_the_kernel_lists_are_missing(tmp_path: Path) -> None:
    source = LiveSource(nvml_module=fake_nvml.h200_box(7), system_root=machine_root(tmp_path, pci_gpus=8,
                                                                                     driver_gpus=8))
    try:
        status = source.status()
        assert status.fault() is GpuFault.CARDS_MISSING and status.gpus_missing == 1
        assert "lists 7 of the 8 NVIDIA GPUs" in (status.fault_line() or "")
    finally:
        source.close()


def test_all_cards_there_is_no_fault_and_a_lost_one_is(tmp_path: Path) -> None:
    nvml = fake_nvml.h200_box(4)
    source = LiveSource(nvml_module=nvml, system_root=machine_root(tmp_path, pci_gpus=4, driver_gpus=4))
    try:
        source.sample()
        assert source.status().fault() is None and source.status().gpus_missing == 0
        nvml.advance(2.0)
        nvml.lose_card(2)
        source.sample()
        assert source.status().fault() is GpuFault.CARD_LOST
        assert "GPU 2 fell off the bus" in (source.status().fault_line() or "")
    finally:
        source.close()


# -- the dashboard ------------------------------------------------------------------------------------------------


def _red_reverse(strip: object) -> bool:
    return any(seg.style is not None and seg.style.reverse and seg.style.color is not None
               and seg.style.color.name == "red" for seg in strip)  # type: ignore[attr-defined]


async def test_the_dashboard_puts_a_dead_driver_in_a_red_headline_with_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu_triage.ui.app import TriageApp
    from gpu_triage.ui.pane_widget import Pane
    from gpu_triage.ui.run import build_app

    root = machine_root(tmp_path, pci_gpus=8, driver_gpus=8)
    source = LiveSource(nvml_module=broken(), system_root=root)
    app = TriageApp(Config(), source=source, source_label="live", autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(5):
            app.ingest(source.sample())
        await pilot.pause()
        header = app.query_one("#header", Pane)
        lines = header.shown_plain.split("\n")
        assert lines[1].startswith("GPU FAILURE: the kernel lists 8 NVIDIA GPUs"), lines
        assert _red_reverse(header.render_line(1))
        diag = app.query_one("#diag", Pane).shown_plain
        assert "idle" not in diag.split("\n")[0] and "no verdict: the driver cannot read" in diag  # no idle/none
        assert "NVIDIA driver failure" in app.query_one("#gpu", Pane).shown_plain
        svg = app.export_screenshot()
        assert "GPU&#160;FAILURE" in svg or "GPU FAILURE" in svg
    source.close()
    # and `gpu-triage live` on that machine shows no calm "no GPU, try the demo" banner
    import argparse

    monkeypatch.setenv("GPU_TRIAGE_HOST_ROOT", str(root))
    monkeypatch.setitem(sys.modules, "pynvml", broken())
    live = build_app("live", argparse.Namespace(record=None, job_log=None, batch_size=None, no_stacks=True), Config())
    assert live.header.banner is None and live.source.status().fault() is GpuFault.DRIVER_FAILURE
    live.source.close()


async def test_a_card_lost_while_watching_turns_the_headline_red_and_exports_the_fault(tmp_path: Path) -> None:
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.ui.app import TriageApp
    from gpu_triage.ui.pane_widget import Pane

    nvml = fake_nvml.h200_box(4)
    source = LiveSource(nvml_module=nvml, system_root=machine_root(tmp_path, pci_gpus=4, driver_gpus=4))
    monitor = Monitor(source.host_info(), Config(), source.name)
    app = TriageApp(Config(), source=source, source_label="live", autostart=False)
    async with app.run_test(size=(120, 30)) as pilot:
        tick = source.sample()
        app.ingest(tick)
        monitor.ingest(tick, source.status())
        await pilot.pause()
        assert "GPU FAILURE" not in app.query_one("#header", Pane).shown_plain and monitor.snapshot.fault is None
        nvml.advance(2.0)
        nvml.lose_card(1)
        tick = source.sample()
        app.ingest(tick)
        monitor.ingest(tick, source.status())
        await pilot.pause()
        header = app.query_one("#header", Pane)
        assert header.shown_plain.split("\n")[1].startswith("GPU FAILURE: GPU 1 fell off the bus")
        assert _red_reverse(header.render_line(1))
    source.close()
    snap = monitor.snapshot
    assert snap.fault is GpuFault.CARD_LOST and snap.lost_gpus == {1}
    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_triage.export.collector import TriageCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot))
    page = generate_latest(registry).decode()
    assert 'gpu_triage_verdict{bottleneck="gpu_fault",cards="1",pattern="card_lost"} 1.0' in page
    assert 'gpu_triage_gpu_fault{reason="card_lost"} 1.0' in page and "gpu_triage_gpus_missing 0.0" in page


# -- the exporter's page, the fleet and the snapshot ------------------------------------------------------------


def _page(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture
def exporters(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Real exporters (server, collector, monitor) on loopback: one over a machine with a dead driver, one over
    a machine that never had a GPU, one over a simulated healthy server; each has diagnosed a few ticks."""
    sources: dict[str, Source] = {
        "dead": LiveSource(nvml_module=broken(), system_root=machine_root(tmp_path / "dead", pci_gpus=8)),
        "no_gpu": LiveSource(nvml_module=broken(NOT_LOADED), system_root=machine_root(tmp_path / "cpu")),
        "healthy": SimulatedSource("healthy", gpus=2, seed=1, interval_s=1.0),
    }
    running = []
    try:
        addresses = {}
        for name, source in sources.items():
            exporter = Exporter("127.0.0.1:0", Config(interval_s=1.0))
            running.append(exporter)
            monitor = exporter.attach(source)
            for _ in range(8):
                monitor.ingest(source.sample(), source.status())
            exporter.start()
            addresses[name] = exporter.server.url.removeprefix("http://").removesuffix("/metrics")
        yield addresses
    finally:
        for exporter in running:
            exporter.close()
        for source in sources.values():
            source.close()


def test_the_exporter_serves_the_fault_not_an_idle_verdict(exporters: dict[str, str]) -> None:
    dead = _page(f"http://{exporters['dead']}/metrics")
    verdicts = {dict(k[1])["bottleneck"]: (dict(k[1]), v) for k, v in dead.items() if k[0] == "gpu_triage_verdict"}
    assert set(verdicts) == {"gpu_fault"} and verdicts["gpu_fault"][0]["pattern"] == "driver_failure"
    assert dead[("gpu_triage_gpu_driver_available", ())] == 0
    assert dead[("gpu_triage_gpu_fault", (("reason", "driver_failure"),))] == 1
    assert dead[("gpu_triage_gpu_fault", (("reason", "card_lost"),))] == 0
    assert dead[("gpu_triage_gpus_expected", ())] == 8 and dead[("gpu_triage_gpus_missing", ())] == 8
    calm = _page(f"http://{exporters['no_gpu']}/metrics")
    assert calm[("gpu_triage_gpu_fault", (("reason", "driver_failure"),))] == 0
    assert ("gpu_triage_gpus_missing", ()) not in calm  # the kernel lists no GPU: nothing can be missing
    assert not any(k[0] == "gpu_triage_verdict" and dict(k[1])["bottleneck"] == "gpu_fault" for k in calm)


def test_fleet_once_puts_the_dead_driver_first_and_exits_non_zero(exporters: dict[str, str], capsys) -> None:
    listed = ",".join([exporters["healthy"], exporters["no_gpu"], exporters["dead"]])
    assert main(["fleet", "--exporters", listed, "--json"]) == 3
    hosts = json.loads(capsys.readouterr().out)["hosts"]
    assert hosts[0]["address"] == exporters["dead"] and hosts[0]["bottleneck"] == "gpu_fault"
    assert hosts[0]["pattern"] == "driver_failure"
    assert main(["fleet", "--exporters", listed, "--once"]) == 3
    out = capsys.readouterr().out.splitlines()
    first = next(i for i, ln in enumerate(out) if exporters["dead"] in ln or "gpu_fault" in ln)
    assert "gpu_fault" in out[first] and all("gpu_fault" not in ln for ln in out[first + 1:])
    # the healthy host and the one without a GPU alone: nothing needs a human, exit 0
    assert main(["fleet", "--exporters", f"{exporters['healthy']},{exporters['no_gpu']}", "--once"]) == 0


def test_snapshot_exits_3_with_the_fault_and_0_on_a_machine_without_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_TRIAGE_HOST_ROOT", str(machine_root(tmp_path / "dead", pci_gpus=4, driver_gpus=4)))
    monkeypatch.setitem(sys.modules, "pynvml", broken())
    args = ["snapshot", "--seconds", "0.2", "--interval", "0.1", "--no-stacks"]
    assert main(args) == 3
    out = capsys.readouterr().out
    assert "GPU FAILURE: the kernel lists 4 NVIDIA GPUs" in out and "host only" not in out
    assert "VERDICT driver_failure · gpu_fault" in out and "idle · none" not in out
    assert main([*args, "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["fault"]["kind"] == "driver_failure" and doc["verdict"]["bottleneck"] == "gpu_fault"
    monkeypatch.setenv("GPU_TRIAGE_HOST_ROOT", str(machine_root(tmp_path / "cpu")))
    monkeypatch.setitem(sys.modules, "pynvml", broken(NOT_LOADED))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "no NVIDIA GPU/driver: host only" in out and "FAILURE" not in out
