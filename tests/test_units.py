"""One convention for bytes everywhere: binary (IEC) units; a missing value is "n/a", never 0."""

from __future__ import annotations

import pytest

from gpu_triage.units import fmt_bytes, fmt_rate, short_bytes


@pytest.mark.parametrize("fmt", [fmt_bytes, fmt_rate, short_bytes])
def test_missing_is_na_never_zero(fmt) -> None:
    assert fmt(None) == "n/a"
    assert fmt(float("nan")) == "n/a"


def test_sizes_are_binary() -> None:
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_bytes(150_754_820_096) == "140.4 GiB"  # an H200 as NVML counts it
    assert fmt_bytes(3 << 40) == "3.0 TiB"
    assert fmt_bytes(0) == "0 B"


def test_rates_signs_and_digits() -> None:
    assert fmt_rate(1 << 30) == "1.0 GiB/s"
    assert fmt_rate(250 * (1 << 20)) == "250.0 MiB/s"
    assert fmt_bytes(5 << 20, signed=True, digits=2) == "+5.00 MiB"
    assert fmt_bytes(-(5 << 20), signed=True, digits=2) == "-5.00 MiB"
    assert fmt_bytes(56e9, digits=0) == "52 GiB"


def test_short_form_is_the_same_units_compact() -> None:
    assert short_bytes(3 << 30) == "3.0G"
    assert short_bytes(340 << 20, suffix="/s") == "340M/s"
    assert short_bytes(12 << 10) == "12K"
    assert short_bytes(0) == "0"
    assert short_bytes(100) == "100B"


def test_a_percentage_is_one_formatter_for_the_panes_and_the_process_table() -> None:
    from gpu_triage import proc_columns
    from gpu_triage.model import ProcSample
    from gpu_triage.ui.formatters import pct
    from gpu_triage.units import fmt_pct

    assert [fmt_pct(v) for v in (42.4, 100.0, None, float("nan"))] == ["42%", "100%", "n/a", "n/a"]
    assert pct(7.0) == fmt_pct(7.0, 4) == "  7%" and pct(None) == " n/a"
    row = proc_columns.values(ProcSample(1, 0, cpu_pct=99.6, sm_pct=None), "alice", None, None)
    assert (row["CPU%"], row["GPU%"]) == ("100%", "n/a")
