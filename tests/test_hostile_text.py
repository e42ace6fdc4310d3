"""What another user's process can put on the screen or in the metrics: names and command lines holding
terminal escapes (title, clear screen, a fake line, OSC 52 clipboard writes), NIC names with escapes or
undecodable bytes. Real processes renamed with prctl, real interfaces in a network namespace of their own,
a real scrape over loopback."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpu_triage.config import Config
from gpu_triage.export.collector import TriageCollector
from gpu_triage.export.monitor import Monitor
from gpu_triage.export.server import MetricsServer
from gpu_triage.model import HostInfo, NetSample, ProcSample, Tick
from gpu_triage.nvmlwrap import load_nvml
from gpu_triage.proc_control import ProcControl
from gpu_triage.safetext import clean
from gpu_triage.sources.base import SourceStatus
from gpu_triage.sources.procs import GpuProcessReader
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.palette import NoControlCodes
from tests.fake_nvml import FakeHandle, FakeProcess, h200_box
from tests.ui_ticks import TickListSource, make_tick
from tests.waits import wait_for

EVIL_NAME = b"\x1b]2;PWN\x07\x1b[2J"  # 12 bytes: fits the kernel's 16-byte comm
EVIL_ARGV = ["\x1b]2;x\x07\x1b[2J\x1b[HFAKE: all GPUs healthy", "\x1b]52;c;cHduZWQ=\x07", "[b]bold[/b]"]
NASTY = ("\x1b", "\x07", "\x9b", "\x9d")  # ESC, BEL, and the one-character CSI and OSC


def test_clean_makes_every_control_character_visible_and_keeps_the_rest() -> None:
    assert clean("\x1b]2;PWN\x07\x1b[2J") == "␛]2;PWN␇␛[2J"
    assert clean("a\tb\nc\rd\x7f") == "a␉b␊c␍d␡"
    assert clean("x\udcff\udcfe") == "x\ufffd\ufffd"  # psutil's surrogateescape of undecodable bytes
    assert clean("\x9b2J \x9d0;t\x9c") == "\ufffd2J \ufffd0;t\ufffd"  # C1: CSI, OSC, ST
    assert clean("admin\u202egnp.exe") == "admin\ufffdgnp.exe"  # a right-to-left override reorders the line
    plain = "python train.py --lr 3e-4 [b]x[/b] ünï ✓ 训练"
    assert clean(plain) is plain
    assert all(len(clean(chr(c))) == 1 for c in range(0x110000) if c < 0xD800 or c > 0xDFFF)
    assert clean("\ud800").encode("utf-8")  # no lone surrogate survives


@pytest.fixture
def evil_process() -> Iterator[subprocess.Popen[bytes]]:
    """A real process named with prctl(PR_SET_NAME) and started with escape codes in its argv."""
    code = (
        "import ctypes, sys, time; libc = ctypes.CDLL(None); "
        f"libc.prctl(15, {EVIL_NAME!r}, 0, 0, 0); print('ready', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, *EVIL_ARGV], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        with open(f"/proc/{child.pid}/comm", "rb") as fh:
            assert fh.read().rstrip(b"\n") == EVIL_NAME  # the kernel holds the escape codes
        yield child
    finally:
        child.kill()
        child.wait()


def _real_procs(pid: int) -> list[ProcSample]:
    """The process reader on the real process, as NVML would list it on card 0 (the driver is faked)."""
    fake = h200_box(1)
    fake.cards[0].processes = [FakeProcess(pid=pid, usedGpuMemory=1 << 30)]
    reader = GpuProcessReader(load_nvml(fake), [(0, FakeHandle(0))])
    return reader.sample()


@pytest.mark.slow
def test_a_process_name_with_escapes_is_read_as_visible_characters(evil_process: subprocess.Popen[bytes]) -> None:
    procs = _real_procs(evil_process.pid)
    assert [p.name for p in procs] == ["␛]2;PWN␇␛[2J"]
    details = ProcControl().details(evil_process.pid)
    assert details.cmdline is not None and "FAKE: all GPUs healthy" in details.cmdline
    assert not any(c in details.cmdline for c in NASTY) and "␛]52;c;" in details.cmdline


def _app(procs: list[ProcSample], nets: list[NetSample] | None = None) -> TriageApp:
    prefill = [dataclasses.replace(make_tick(i, gpus=2, cores=4), procs=procs, nets=nets or []) for i in range(4)]
    app = TriageApp(Config(), source=TickListSource(2, 4), source_label="test", prefill=prefill, autostart=False)
    app.procs.control = ProcControl()
    return app


def _no_escape(text: str) -> None:
    assert not any(c in text for c in NASTY), repr(text)


@pytest.mark.slow
async def test_the_dashboard_and_the_kill_dialog_draw_no_escape(evil_process: subprocess.Popen[bytes]) -> None:
    """The real process in the table (name), its detail line and the kill dialog (argv): every character
    drawn, none sent to the terminal as a control; Rich markup in argv is shown, not applied."""
    app = _app(_real_procs(evil_process.pid))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("tab")
        await pilot.pause()
        table = app.query_one("#procs").shown_plain
        _no_escape(table)
        # COMMAND is its command line (the name, "␛]2;PWN␇", is what a recording shows: the test below)
        assert "-c import ctypes, sys, time; libc = ctypes.CDLL(None); libc.prctl(15, b'" in table
        _no_escape(app.export_screenshot())
        await pilot.press("x")
        await pilot.pause()
        dialog = str(app.screen.query_one("#signal").render())
        _no_escape(dialog)
        assert "␛[HFAKE: all GPUs healthy" in dialog and "[b]bold[/b]" in dialog  # markup drawn as typed
        _no_escape(app.export_screenshot())
        await pilot.press("escape")
    assert evil_process.poll() is None  # Esc: nothing sent


async def test_the_last_guard_drops_escapes_that_reached_a_pane_uncleaned() -> None:
    """A tick built by hand (no source cleaned it): the panes and the terminal lines still carry none."""
    procs = [ProcSample(pid=4242, gpu_index=0, name="\x1b]2;T\x07x", gpu_mem_bytes=1 << 30, cpu_pct=1.0, workers=0)]
    nets = [NetSample("e\x1b]2;NICPWN\x07", rx_bytes_per_s=1e6, tx_bytes_per_s=1e6)]
    app = _app(procs, nets)
    async with app.run_test(size=(160, 70)) as pilot:

        def panes() -> str:
            return "\n".join(str(getattr(w, "shown_plain", "")) for w in app.query("Pane"))

        await wait_for(pilot, lambda: "NET e" in panes(), "the host panes drawn with the tick's NIC")
        shown = panes()
        _no_escape(shown)
        assert "NET e␛]2;NICPWN" in shown and "␛]2;T" in shown  # (Rich itself drops a BEL)
        _no_escape(app.export_screenshot())
        assert any(isinstance(f, NoControlCodes) for f in app._filters)


def test_the_terminal_filter_drops_controls_and_keeps_widths() -> None:
    """The line filter every strip passes on its way to the terminal (the last guard)."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.color import Color
    from textual.strip import Strip

    segments = [Segment("ok "), Segment("e\x1b]2;X\x1b[2J\x9b1m\u202e", Style(bold=True)), Segment("\udcff!")]
    strip = Strip(segments)
    out = strip.apply_filter(NoControlCodes(), Color(0, 0, 0))
    text = "".join(seg.text for seg in out)
    assert text == "ok e]2;X[2J1m\ufffd!" and out.cell_length == strip.cell_length == len(text)
    assert [seg.style for seg in out] == [seg.style for seg in segments]
    clean_strip = Strip([Segment("plain")])
    assert clean_strip.apply_filter(NoControlCodes(), Color(0, 0, 0)).text == "plain"


# -- NIC names: a network namespace of our own ---------------------------------------------------------

NETNS_CHILD = r"""
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
names = ["e\x1b]2;NICPWN\x07", os.fsdecode(b"bad\xff\xfe")]
for name in names:
    subprocess.run(["ip", "link", "add", os.fsencode(name), "type", "bridge"], check=True)
    subprocess.run(["ip", "link", "set", os.fsencode(name), "up"], check=True)
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
import psutil
from gpu_triage.sources.host import HostReader
reader = HostReader()
reader.sample()
time.sleep(0.2)
sample = reader.sample()
print(json.dumps({"psutil": sorted(psutil.net_io_counters(pernic=True)), "read": sorted(n.name for n in sample.nets)}))
"""


def _in_netns() -> dict[str, list[str]]:
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare(1) and ip(8) for a network namespace")
    app_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "app")
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", NETNS_CHILD, app_dir],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "Unknown device type" in done.stderr:
        pytest.skip("no bridge interfaces in this kernel")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_nic_names_with_escapes_or_undecodable_bytes_are_read_visibly() -> None:
    got = _in_netns()
    assert "bad\udcff\udcfe" in got["psutil"] and "e\x1b]2;NICPWN\x07" in got["psutil"]  # what psutil gives
    assert "e␛]2;NICPWN␇" in got["read"] and "bad\ufffd\ufffd" in got["read"]
    for name in got["read"]:
        _no_escape(name)
        name.encode("utf-8")


@pytest.mark.slow
def test_a_non_utf8_nic_or_process_name_does_not_break_the_scrape() -> None:
    """psutil's names of a real NIC named b'bad\\xff\\xfe', of a process renamed likewise (a label with
    --pid-labels) and of its user (the owner label), given to the collector as they are: every scrape over
    loopback still answers 200, verdict included."""
    raw_nic = next(n for n in _in_netns()["psutil"] if n.startswith("bad"))
    monitor = Monitor(HostInfo(hostname="h\udcff", cpu_count=1), Config(), "fake")
    bad_proc = 'x\udcff\udcfe"}\n{'
    for i in range(3):
        tick = Tick(ts=datetime.now(UTC), interval_s=2.0, cpu_pct=[10.0],
                    nets=[NetSample(raw_nic, rx_bytes_per_s=1.0, tx_bytes_per_s=2.0)],
                    procs=[ProcSample(pid=7, gpu_index=0, name=bad_proc, gpu_mem_bytes=1 << 20, cpu_pct=5.0,
                                      user="u\udcff\x1b")])
        monitor.ingest(tick, SourceStatus())
        time.sleep(0.01 * i)  # ticks stamped at distinct times, as a sampler's are
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot, pid_labels=True))
    server = MetricsServer("127.0.0.1:0", registry)
    server.start()
    try:
        import urllib.request

        for _ in range(2):
            with urllib.request.urlopen(server.url, timeout=10) as resp:
                assert resp.status == 200
                body = resp.read().decode("utf-8")
    finally:
        server.close()
    labels = {v for fam in text_string_to_metric_families(body) for s in fam.samples for v in s.labels.values()}
    assert "bad\ufffd\ufffd" in labels and 'x\ufffd\ufffd"}␊{' in labels and "h\ufffd" in labels
    assert "u\ufffd␛" in labels  # the owner: owner_kind="user"
    assert "gpu_triage_verdict" in body



@pytest.mark.parametrize("content", [None, b"not a recording"])
def test_an_error_line_naming_a_file_with_escapes_holds_none(content: bytes | None, tmp_path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A file in a shared directory is named by whoever made it: `diagnose DIR/<name>` says so visibly."""
    from gpu_triage.cli import main

    path = tmp_path / "\x1b]2;PWN\x07\x1b[2J.parquet"
    if content is not None:
        path.write_bytes(content)
    assert main(["diagnose", str(path)]) == 2
    err = capsys.readouterr().err
    _no_escape(err)
    assert "␛]2;PWN␇␛[2J.parquet" in err


async def test_a_recording_with_escapes_in_its_names_replays_without_any(tmp_path) -> None:
    """Anyone may hand over a recording: its process and NIC names (written raw here) are read back and
    drawn visibly by replay, the process table included."""
    import argparse

    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.trace.writer import TraceWriter
    from gpu_triage.ui.run import build_app

    src = SimulatedSource("healthy", gpus=2, cores=4, seed=3, interval_s=2.0)
    writer = TraceWriter(tmp_path / "evil.parquet", src.host_info(), 2.0)
    for _ in range(6):
        tick = src.sample()
        tick.procs = [ProcSample(pid=77, gpu_index=0, name="\x1b]2;PWN\x07\x1b[2J", gpu_mem_bytes=1 << 30, cpu_pct=3.0)]
        tick.nets = [NetSample("e\x1b]2;NICPWN\x07", rx_bytes_per_s=1e6, tx_bytes_per_s=1e6)]
        writer.append(tick)
    path = writer.close()
    app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
    async with app.run_test(size=(160, 70)) as pilot:
        await pilot.pause()
        await pilot.press("tab")
        await pilot.pause()
        shown = "\n".join(str(getattr(w, "shown_plain", "")) for w in app.query("Pane"))
        _no_escape(shown)
        assert "␛]2;PWN␇␛[2J" in shown and "e␛]2;NICPWN␇" in shown
        _no_escape(app.export_screenshot())
