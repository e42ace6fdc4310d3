"""The doctor's text report fits the terminal: long summaries and advice wrap under their own column."""

from __future__ import annotations

from pathlib import Path

from gpu_triage.doctor.render import render_text
from gpu_triage.doctor.run import collect_report


def test_report_lines_fit_the_width_and_keep_every_word() -> None:
    report = collect_report(None, None, None, {"NCCL_P2P_LEVEL": "NVL"}, Path("/sys"), lambda: {})
    wide = render_text(report)
    narrow = render_text(report, width=60)
    assert all(len(line) <= 60 for line in narrow.splitlines())
    assert narrow.split() == wide.split()  # same words, only the line breaks differ
    assert len(narrow.splitlines()) > len(wide.splitlines())
