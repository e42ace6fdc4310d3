"""DoctorScreen in a bare Textual app: shows a given report, gathers one in a worker thread when none is
given, closes with Esc; q quits the app."""

from __future__ import annotations

import threading
from pathlib import Path

from textual.app import App
from textual.widgets import Static

from fake_nvml import h200_box
from gpu_triage.doctor.run import Report, collect_report
from gpu_triage.ui.doctor_screen import DoctorScreen
from test_doctor import FakePsutil, sysfs_with_nodes


def _report(tmp_path: Path) -> Report:
    fake = h200_box(8)
    fake.cards[2].pcie_width = 8
    return collect_report(params=7e9, nvml_module=fake, psutil_module=FakePsutil(),
                          env={}, sysfs=sysfs_with_nodes(tmp_path / "sys", {0: "0-95"}), torch_probe=None)


def _body(app: App) -> str:
    return str(app.screen.query_one("#doctor-body", Static).render())


async def test_shows_a_given_report_and_closes_on_escape(tmp_path: Path) -> None:
    app = App()
    async with app.run_test(size=(140, 60)) as pilot:
        app.push_screen(DoctorScreen(_report(tmp_path)))
        await pilot.pause()
        body = _body(app)
        assert "gpu.pcie" in body and "card 2 x8 of x16" in body
        assert "NV18" in body and "\x1b[" not in body  # colours became styles
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DoctorScreen)


async def test_gathers_off_the_ui_thread_then_q_quits(tmp_path: Path) -> None:
    report = _report(tmp_path)
    ui_thread = threading.get_ident()
    seen: list[int] = []

    def loader() -> Report:
        seen.append(threading.get_ident())
        return report

    app = App()
    async with app.run_test(size=(140, 60)) as pilot:
        app.push_screen(DoctorScreen(loader=loader))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert seen and seen[0] != ui_thread
        assert "traffic.gradients" in _body(app)
        await pilot.press("q")  # README: q quits, on the doctor too (it used to close the overlay only)
        await pilot.pause()
    assert not app.is_running


async def test_a_failing_loader_is_shown_not_raised() -> None:
    def loader() -> Report:
        raise RuntimeError("driver wedged")

    app = App()
    async with app.run_test(size=(100, 30)) as pilot:
        app.push_screen(DoctorScreen(loader=loader))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "driver wedged" in _body(app)


async def test_at_80_columns_no_line_is_wrapped_twice(tmp_path: Path) -> None:
    """The report wraps itself under its column; Textual must not wrap it again ("run on the / GPU / machine")."""
    app = App()
    report = collect_report(params=None, nvml_module=None, psutil_module=FakePsutil(), env={},
                            sysfs=sysfs_with_nodes(tmp_path / "sys", {0: "0-95"}), torch_probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(DoctorScreen(report))
        await pilot.pause()
        body = app.screen.query_one("#doctor-body", Static)
        lines = str(body.render()).split("\n")
        assert body.size.height == len(lines)  # one screen line per report line
        assert all(len(line) <= body.size.width for line in lines)
