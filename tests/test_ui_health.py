"""Issue 13, "what else they look for daily": swap beside host memory, the NET line, and per-card flags for
throttling, ECC errors and XID events on the live screen; drawn from hand-made ticks (pure pane functions)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpu_triage.model import NetSample
from gpu_triage.ui.formatters import health_note, slowdown_note
from gpu_triage.ui.gpu_pane import card_wave_span, gpu_pane
from gpu_triage.ui.host_panes import cpu_pane, disk_pane, net_line
from gpu_triage.ui.layout import plan_layout
from gpu_triage.ui.panes import Colours
from gpu_triage.window import RollingWindow
from tests.ui_ticks import make_tick


def _view(ticks: list):
    w = RollingWindow(10)
    w.extend(ticks)
    return w.view()


def _with_card(tick, k: int, **fields):
    return replace(tick, gpus=[replace(g, **fields) if g.index == k else g for g in tick.gpus])


@pytest.mark.parametrize(("width", "throttle"), [(80, "THR pwr,therm"), (120, "THR power,thermal")])
def test_card_rows_flag_throttle_ecc_and_xid_only_when_active(width: int, throttle: str) -> None:
    """The flags take the place of power, temperature and clock after the graph (at 80 columns with the
    reasons' short names), never the graph's columns: every card's graph starts and ends where the others'
    do (a "THR power" before the graph took 10 of its 18 columns)."""
    ticks = [make_tick(i, gpus=4) for i in range(3)]
    healthy = dict(clock_event_reasons=0x1, ecc_corrected=0, ecc_uncorrected=0, xid_count=0, xid_last=None)
    for k in range(4):
        ticks[-1] = _with_card(ticks[-1], k, **healthy)
    ticks[-1] = _with_card(ticks[-1], 1, clock_event_reasons=0x4 | 0x20)
    ticks[-1] = _with_card(ticks[-1], 2, ecc_uncorrected=2, ecc_corrected=9)
    ticks[-1] = _with_card(ticks[-1], 3, xid_count=3, xid_last=79)
    rows = gpu_pane(_view(ticks), width, 1, Colours()).plain.split("\n")[1:]
    assert all(len(r) == width for r in rows)
    assert not any(f in rows[0] for f in ("THR", "ECC", "ecc", "XID"))  # idle is no throttle; zeros say nothing
    assert throttle in rows[1]
    assert "ECC 2" in rows[2]
    assert "XID 79 ×3" in rows[3]
    left, wave_w = card_wave_span(width)
    # the graph's columns hold graph only; the figures take the same columns on every row
    assert len({r.index("SMact") for r in rows}) == 1 and rows[0].index("SMact") > left + wave_w
    assert not any(f in r[: left + wave_w] for r in rows for f in ("THR", "ECC", "XID"))


def test_unknown_health_shows_no_flag_not_a_zero() -> None:
    rows = gpu_pane(_view([make_tick(i, gpus=2) for i in range(3)]), 120, 1, Colours()).plain
    assert not any(f in rows for f in ("THR", "ECC", "XID"))


def test_swap_beside_host_memory_in_the_cpu_line() -> None:
    tick = replace(make_tick(0), host_swap_used_bytes=1 << 30, host_swap_total_bytes=8 << 30)
    assert "swap 1.0G/8.0G" in cpu_pane(_view([tick]), 200, 2, Colours()).plain.replace(" GiB", "G")
    none = replace(make_tick(0), host_swap_used_bytes=0, host_swap_total_bytes=0)
    assert "swap none" in cpu_pane(_view([none]), 200, 2, Colours()).plain
    assert "swap n/a" in cpu_pane(_view([make_tick(0)]), 200, 2, Colours()).plain


def test_net_line_busiest_interfaces_first_as_many_as_fit() -> None:
    nets = [
        NetSample("eth0", rx_bytes_per_s=2e6, tx_bytes_per_s=1e5),
        NetSample("ib0", rx_bytes_per_s=12e9, tx_bytes_per_s=11e9),
        NetSample("eth1", rx_bytes_per_s=None, tx_bytes_per_s=None),
    ]
    view = _view([replace(make_tick(0), nets=nets)])
    line = net_line(view, 200)
    assert line.startswith("NET ib0 ") and line.index("ib0") < line.index("eth0") < line.index("eth1")
    assert "eth1 ↓n/a ↑n/a" in line
    short = net_line(view, 40)
    assert len(short) <= 40 and "ib0" in short and "eth0" not in short
    assert net_line(_view([make_tick(0)]), 80) == "NET n/a"
    pane = disk_pane(view, 200, 4, net=True).plain.split("\n")
    assert pane[0].startswith("NET ib0") and pane[1].startswith("DISK")


def test_the_net_line_comes_after_the_verdict_and_only_with_room() -> None:
    roomy = plan_layout(60, 200, 8, 32, 2, 4, 3, (2, 3), n_nets=3)
    assert roomy.net == 1
    without = plan_layout(60, 200, 8, 32, 2, 4, 3, (2, 3))
    assert without.net == 0
    tight = plan_layout(24, 80, 8, 64, 2, 4, 3, (3, 4), n_nets=3)
    plain = plan_layout(24, 80, 8, 64, 2, 4, 3, (3, 4))
    assert tight.diag == plain.diag  # the verdict keeps every line it had without the NET line
    assert tight.net == 0 or tight.diag >= 3 + 4


def test_the_detail_clock_chart_says_what_held_the_clocks_down_and_for_how_long() -> None:
    """A power-capped card's SM clock saws with its load (seen on the H200 at ~690 W): the clock chart's title
    says so. Idle is no slowdown; a card that reports no reasons gets no claim at all (n/a, not "never")."""
    nan = float("nan")
    masks = np.array([0x4, 0x4 | 0x20, 0x4, 0x1, nan])  # power 3 of 4 reported ticks, thermal 1, idle 1
    assert slowdown_note(masks) == " · slowed by power 75 %, thermal 25 % of the window"
    assert slowdown_note(np.array([0x1, 0x0, 0x2])) == " · no slowdown reason in the window"
    assert slowdown_note(np.array([nan, nan])) == ""


def test_the_detail_power_chart_names_ecc_errors_and_xid_events_now() -> None:
    nan = np.array([float("nan")])
    assert health_note(np.array([0.0, 0.0]), np.array([0.0, 0.0]), nan) == " · ECC uncorrected 0, no XID"
    assert health_note(np.array([0.0, 2.0]), np.array([1.0, 3.0]), np.array([48.0, 79.0])) == (
        " · ECC uncorrected 2, XID 79 ×3"
    )
    assert health_note(nan, nan, nan) == ""  # ECC off, no events reported: nothing claimed


def test_the_power_cap_alone_is_shown_but_not_alarmed() -> None:
    """A busy H200 sits at its 700 W cap (every real tick at 650 W and more had the bit): the power cap alone
    colours the card's watts yellow and takes no column; a thermal slowdown beside it, or an ECC error, is
    written out in the alert colour, and the card's number takes that colour too."""
    ticks = [make_tick(i, gpus=3) for i in range(3)]
    ticks[-1] = _with_card(ticks[-1], 0, clock_event_reasons=0x4, power_w=690.0)
    ticks[-1] = _with_card(ticks[-1], 1, clock_event_reasons=0x4 | 0x20)
    ticks[-1] = _with_card(ticks[-1], 2, clock_event_reasons=0x4, ecc_uncorrected=1)
    pane = gpu_pane(_view(ticks), 120, 1, Colours())
    text = pane.plain

    def style_at(needle: str, row: int) -> str:
        start = sum(len(line) + 1 for line in text.split("\n")[: row + 1]) + text.split("\n")[row + 1].index(needle)
        return " ".join(str(s.style) for s in pane.spans if s.start <= start < s.end)

    assert "THR" not in text.split("\n")[1]
    assert "yellow" in style_at(" 690W", 0) and "red" not in style_at(" 690W", 0)
    assert "red" not in style_at(" 0 ", 0)
    assert "red" in style_at("THR power,thermal", 1) and "red" in style_at(" 1 ", 1)
    assert "red" in style_at("ECC 1 THR power", 2)
