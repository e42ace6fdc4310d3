"""Host readings from psutil: every core, iowait, memory and swap, each physical disk as iostat -x shows it,
and each network interface's throughput (InfiniBand/RoCE ports also from their own sysfs data counters).

Everything is computed from cumulative counters differenced between two ticks that this reader took
itself (``cpu_times(percpu=True)``, ``disk_io_counters(perdisk=True)``), never from ``cpu_percent``'s
module-global state, so another caller of psutil in the same process cannot skew our numbers and the
interval is exactly the one the tick covers. The psutil module and the clock are injected for tests.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_triage.model import DiskSample, NetSample
from gpu_triage.safetext import clean

# Devices that are never physical storage worth watching.
_VIRTUAL_PREFIXES = ("loop", "ram", "zram", "sr", "fd", "nbd")
# Partition names, for systems without /sys/block to ask: sda1, vdb2, nvme0n1p3, mmcblk0p1, xvda1.
_PARTITION = re.compile(r"^(?:(?:s|v|xv|h)d[a-z]+\d+|nvme\d+n\d+p\d+|mmcblk\d+p\d+)$")
log = logging.getLogger(__name__)

# Fields of cpu_times that are already counted inside user/nice on Linux (psutil's own rule).
_GUEST_FIELDS = ("guest", "guest_nice")


@dataclass(slots=True)
class HostSample:
    cpu_pct: list[float] = field(default_factory=list)
    iowait_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    disks: list[DiskSample] = field(default_factory=list)
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    nets: list[NetSample] = field(default_factory=list)


# Interfaces never worth watching: the loopback.
_SKIP_NICS = frozenset({"lo"})
# sysfs InfiniBand port counters count 4-byte words (the IB spec's PortXmitData / PortRcvData).
_IB_WORD_BYTES = 4


def read_ib_counters(root: Path | None) -> dict[str, tuple[int, int]]:
    """Each InfiniBand/RoCE port's cumulative (received, sent) bytes from
    ``ROOT/DEVICE/ports/PORT/counters/port_{rcv,xmit}_data``, keyed ``DEVICE/PORT``. Missing tree: empty."""
    out: dict[str, tuple[int, int]] = {}
    if root is None or not root.is_dir():
        return out
    for counters in sorted(root.glob("*/ports/*/counters")):
        try:
            rcv = int((counters / "port_rcv_data").read_text().strip())
            xmit = int((counters / "port_xmit_data").read_text().strip())
        except (OSError, ValueError) as exc:  # a port without counters, or one that vanished meanwhile
            log.debug("no InfiniBand counters in %s: %s", counters, exc)
            continue
        port = counters.parent
        out[f"{port.parent.parent.name}/{port.name}"] = (rcv * _IB_WORD_BYTES, xmit * _IB_WORD_BYTES)
    return out


def is_physical_disk(name: str, sys_block: Path | None) -> bool:
    """Whole block devices only: no loop/ram devices, no partitions (which would double-count)."""
    if name.startswith(_VIRTUAL_PREFIXES):
        return False
    if sys_block is not None and sys_block.is_dir():
        return (sys_block / name).exists()  # /sys/block lists whole devices, never partitions
    return not _PARTITION.match(name)


def _cpu_total(times: Any) -> float:
    total = float(sum(times))
    for name in _GUEST_FIELDS:
        total -= float(getattr(times, name, 0.0) or 0.0)
    return total


def _cpu_idle(times: Any) -> float:
    return float(times.idle) + float(getattr(times, "iowait", 0.0) or 0.0)


class HostReader:
    """Call :meth:`sample` once per tick; the first call only sets the baseline (empty rates)."""

    def __init__(
        self,
        psutil_module: Any | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sys_block: Path | None = Path("/sys/block"),
        sys_infiniband: Path | None = Path("/sys/class/infiniband"),
    ) -> None:
        if psutil_module is None:
            import psutil as psutil_module  # noqa: PLC0415 - injected in tests
        self.ps: Any = psutil_module
        self._clock = clock
        self._sys_block = sys_block
        self._prev_cpu: list[Any] | None = None
        self._prev_disks: dict[str, Any] | None = None
        self._prev_t: float | None = None
        self._disk_names: dict[str, bool] = {}  # name -> physical? (cached: /sys lookups once)
        self._sys_infiniband = sys_infiniband
        self._prev_nets: dict[str, tuple[int, int]] | None = None  # name -> cumulative (rx, tx) bytes

    def sample(self) -> HostSample:
        now = self._clock()
        cpu = list(self.ps.cpu_times(percpu=True))
        try:
            disks = self.ps.disk_io_counters(perdisk=True) or {}
        except (OSError, RuntimeError):  # no /proc/diskstats (some containers)
            disks = {}
        out = HostSample()
        memory = self.ps.virtual_memory()
        out.mem_total_bytes = int(memory.total)
        available = getattr(memory, "available", None)
        out.mem_used_bytes = int(memory.total - available) if available is not None else int(memory.used)
        out.swap_used_bytes, out.swap_total_bytes = self._swap()
        nets = self._net_counters()
        if self._prev_t is not None and self._prev_cpu is not None and self._prev_disks is not None:
            elapsed = now - self._prev_t
            out.cpu_pct, out.iowait_pct = self._cpu(self._prev_cpu, cpu)
            if elapsed > 0:
                out.disks = self._disks(self._prev_disks, disks, elapsed)
                out.nets = self._nets(self._prev_nets or {}, nets, elapsed)
        self._prev_t, self._prev_cpu, self._prev_disks, self._prev_nets = now, cpu, disks, nets
        return out

    def _swap(self) -> tuple[int | None, int | None]:
        try:
            swap = self.ps.swap_memory()
        except (OSError, RuntimeError) as exc:  # no /proc/swaps (some containers): the host does not say
            log.debug("swap not readable: %s", exc)
            return None, None
        return int(swap.used), int(swap.total)

    def _net_counters(self) -> dict[str, tuple[int, int]]:
        """Cumulative (received, sent) bytes per interface, and per InfiniBand port (``DEVICE/PORT``)."""
        try:
            nics = self.ps.net_io_counters(pernic=True) or {}
        except (OSError, RuntimeError) as exc:  # no /proc/net/dev
            log.debug("network counters not readable: %s", exc)
            nics = {}
        out = {name: (int(c.bytes_recv), int(c.bytes_sent)) for name, c in nics.items() if name not in _SKIP_NICS}
        out.update(read_ib_counters(self._sys_infiniband))
        return out

    @staticmethod
    def _nets(
        before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], elapsed: float
    ) -> list[NetSample]:
        out = []
        for name in sorted(after):
            prev = before.get(name)
            if prev is None:  # an interface that just appeared: nothing to difference against yet
                continue
            (rx, tx), (rx0, tx0) = after[name], prev
            out.append(
                NetSample(
                    name=clean(name),  # `ip link add` lets any name through, escapes included
                    rx_bytes_per_s=(rx - rx0) / elapsed if rx >= rx0 else None,  # went back: reset, no rate
                    tx_bytes_per_s=(tx - tx0) / elapsed if tx >= tx0 else None,
                )
            )
        return out

    def _cpu(self, before: list[Any], after: list[Any]) -> tuple[list[float], float | None]:
        if len(before) != len(after):  # cores went on/offline: start over from this tick
            return [], None
        busy: list[float] = []
        all_total = 0.0
        all_iowait = 0.0
        has_iowait = hasattr(after[0], "iowait") if after else False
        for b, a in zip(before, after, strict=True):
            total = _cpu_total(a) - _cpu_total(b)
            idle = _cpu_idle(a) - _cpu_idle(b)
            if total <= 0:
                busy.append(0.0)  # no time passed on this core's clock: it did nothing measurable
                continue
            busy.append(min(100.0, max(0.0, 100.0 * (total - idle) / total)))
            all_total += total
            if has_iowait:
                all_iowait += float(a.iowait) - float(b.iowait)
        iowait = None
        if has_iowait and all_total > 0:
            iowait = min(100.0, max(0.0, 100.0 * all_iowait / all_total))
        return busy, iowait

    def _physical(self, name: str) -> bool:
        known = self._disk_names.get(name)
        if known is None:
            known = self._disk_names[name] = is_physical_disk(name, self._sys_block)
        return known

    def _disks(self, before: dict[str, Any], after: dict[str, Any], elapsed: float) -> list[DiskSample]:
        out = []
        for name in sorted(after):
            if not self._physical(name) or name not in before:
                continue
            a, b = after[name], before[name]
            d = DiskSample(name=clean(name))

            def delta(attr: str, a: Any = a, b: Any = b) -> float | None:  # this disk's counters, bound now
                x, y = getattr(a, attr, None), getattr(b, attr, None)
                if x is None or y is None or x < y:  # missing or reset (device re-attached)
                    return None
                return float(x - y)

            busy_ms = delta("busy_time")
            d.busy_pct = min(100.0, 100.0 * busy_ms / (elapsed * 1000.0)) if busy_ms is not None else None
            reads, writes = delta("read_count"), delta("write_count")
            read_ms, write_ms = delta("read_time"), delta("write_time")
            if None not in (reads, writes, read_ms, write_ms):
                ios = reads + writes  # type: ignore[operator]
                d.await_ms = (read_ms + write_ms) / ios if ios > 0 else None  # type: ignore[operator]
            d.reads_per_s = reads / elapsed if reads is not None else None
            d.writes_per_s = writes / elapsed if writes is not None else None
            read_b, write_b = delta("read_bytes"), delta("write_bytes")
            d.read_bytes_per_s = read_b / elapsed if read_b is not None else None
            d.write_bytes_per_s = write_b / elapsed if write_b is not None else None
            out.append(d)
        return out
