"""The host's panes: CPU cores (bars or a heat strip), memory and swap, the network line and the disks."""

from __future__ import annotations

import math

import numpy as np
from rich.text import Text

from gpu_triage.model import NetSample
from gpu_triage.ui.formatters import (
    last,
    num,
    ok,
    pct,
    rate,
    used_of_total,
)
from gpu_triage.ui.glyphs import (
    Runs,
    block,
)
from gpu_triage.ui.layout import (
    CORE_LABEL,
    core_bars_per_line,
    core_cells_per_line,
)
from gpu_triage.ui.panes import Colours
from gpu_triage.window import WindowView


def _heat(v: float) -> str:
    if math.isnan(v):
        return "grey30"
    if v >= 90:
        return "bold red"  # bold: the busiest cores stand out without colour too (NO_COLOR)
    if v >= 60:
        return "yellow"
    if v >= 20:
        return "green"
    return "grey50"


def _core_bars(out: Text, cores: np.ndarray, per_line: int, bar_lines: int) -> None:
    """htop-like bars, ``per_line`` cores a line: the core's number, 7 cells, its %."""
    n = cores.shape[0]
    for row in range(bar_lines):
        out.append("\n")
        for k in range(row * per_line, min(n, (row + 1) * per_line)):
            v = float(cores[k])
            filled = 0 if math.isnan(v) else round(v / 100 * 7)
            out.append(f"{k:>3}", "grey50")
            out.append("█" * filled + "░" * (7 - filled), _heat(v))
            out.append(f"{pct(v, 5)} "[:6])  # " 100%": never run into the bar ("███████100%")


def cpu_pane(view: WindowView, width: int, lines: int, colours: Colours) -> Text:
    """Every core: heat cells (compact) or htop-like bars with % (when the budget allows), then a summary."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    cores = view.cpu[-1] if view.n else np.zeros(0)
    n = cores.shape[0]
    busy = float(np.nanmean(cores)) if n and not np.all(np.isnan(cores)) else float("nan")
    hot = int(np.sum(cores >= 90)) if n else 0
    io = last(view.iowait)
    mem = used_of_total(last(view.host_mem_used), last(view.host_mem_total))
    summary = f"CPU {n} core{'' if n == 1 else 's'} avg{pct(busy)} · {hot} ≥90% · iowait{pct(io)} · mem {mem}"
    summary += f" · swap {swap_text(view)}"
    per_line = core_bars_per_line(width)
    bar_lines = math.ceil(n / per_line) if n else 0
    if n and lines - 1 >= bar_lines and bar_lines > 1 or (n and lines - 1 >= bar_lines and n <= per_line):
        out.append(summary[:width], "bold")
        _core_bars(out, cores, per_line, bar_lines)
        return out
    out.append(summary[:width], "bold")
    cell_w = core_cells_per_line(width)
    rows = min(lines - 1, math.ceil(n / cell_w)) if n else 0
    for row in range(rows):
        out.append("\n")
        out.append(CORE_LABEL, "grey50")
        runs = Runs(out)
        for k in range(row * cell_w, min(n, (row + 1) * cell_w)):
            v = float(cores[k])
            runs.add(block(v) if not math.isnan(v) else " ", _heat(v))
        runs.flush()
    return out


def swap_text(view: WindowView) -> str:
    """Swap in use of configured at the newest tick: "1.2G/8.0G", "none" (no swap configured), "n/a"."""
    used, total = view.swap[-1] if view.swap else (None, None)
    if total == 0:
        return "none"
    return used_of_total(_f(used), _f(total))


def _f(v: int | None) -> float:
    return float("nan") if v is None else float(v)


VIRTUAL_NICS = ("ifb", "veth", "docker", "virbr", "br-", "cni", "flannel", "cali", "tun", "tap", "vxlan", "dummy")


def net_line(view: WindowView, width: int) -> str:
    """One line, busiest interfaces first: "NET ib0 ↓11.9G/s ↑11.9G/s · eth0 ↓2.0M/s ↑140K/s"; as many as fit."""
    nets = view.nets[-1] if view.nets else []
    if not nets:
        return "NET n/a"

    def total(n: NetSample) -> float:
        return (n.rx_bytes_per_s or 0.0) + (n.tx_bytes_per_s or 0.0)

    out = "NET"
    sep = " "
    # idle virtual interfaces (ifb, veth, bridges, tunnels) are noise beside the NICs; shown once they carry traffic
    shown = [n for n in nets if total(n) > 0 or not n.name.startswith(VIRTUAL_NICS)] or nets[:1]
    for n in sorted(shown, key=lambda n: (-total(n), n.name)):
        part = f"{sep}{n.name} ↓{rate(n.rx_bytes_per_s)} ↑{rate(n.tx_bytes_per_s)}"
        if len(out) + len(part) > width:
            break
        out += part
        sep = " · "
    return out


DISK_HEAD = f"{'DISK':<9} {'BUSY%':>6} {'AWAIT':>7} {'READ/s':>8} {'WRITE/s':>8} {'R IOPS':>7} {'W IOPS':>7}"


def disk_pane(view: WindowView, width: int, lines: int, *, net: bool = False) -> Text:
    """iostat-like, busiest disks first; with ``net`` the NET line first (one of ``lines``)."""
    out = Text(no_wrap=True, end="")
    if lines <= 0:
        return out
    if net:
        out.append(net_line(view, width)[:width], "bold")
        lines -= 1
        if lines <= 0:
            return out
        out.append("\n")
    out.append(DISK_HEAD[:width], "bold")
    if not view.disk_names or not view.n:
        return out
    newest = {f: a[-1] for f, a in view.disk.items()}
    order = sorted(range(len(view.disk_names)), key=lambda k: -np.nan_to_num(newest["busy_pct"][k], nan=-1))
    for k in order[: lines - 1]:
        aw = newest["await_ms"][k]
        line = (
            f"{view.disk_names[k][:9]:<9} {pct(newest['busy_pct'][k], 6)}"
            f" {f'{aw:5.1f}ms' if ok(aw) else '    n/a'}"
            f" {rate(newest['read_bytes_per_s'][k]):>8} {rate(newest['write_bytes_per_s'][k]):>8}"
            f" {num(newest['reads_per_s'][k]):>7} {num(newest['writes_per_s'][k]):>7}"
        )
        out.append("\n")
        busy = newest["busy_pct"][k]
        out.append(line[:width], "bold red" if ok(busy) and busy >= 90 else "")
    return out
