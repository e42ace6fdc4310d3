"""What the NVML reader keeps about one card between ticks, shared by the reader (``nvml``) and its link-rate
half (``nvml_links``), so that neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_triage.model import GpuInfo

LINK_KEYS = ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")
LOST_PROBE_FIRST_S = 5.0  # first re-probe of a lost card after this long


@dataclass
class LinkCounter:
    value: int
    ts_us: int
    mono: float


@dataclass
class NvmlCard:
    """What we keep about one card between ticks."""

    index: int
    handle: Any
    info: GpuInfo
    last_util_ts: int | None = None  # newest driver GPU-Util sample timestamp seen (µs)
    gpm_supported: bool = False
    gpm_prev: Any = None  # the GPM sample taken last tick (valid when gpm_prev_ok)
    gpm_spare: Any = None
    gpm_prev_ok: bool = False
    gpm_request: Any = None  # reused c_nvmlGpmMetricsGet_t
    nvlink_mode: str = "aggregate"  # "aggregate" (scope UINT_MAX), "per_link", "none"
    nvlink_links: int | None = None
    gpm_link_keys: set[str] = field(default_factory=lambda: set(LINK_KEYS))  # rates GPM answers on this card
    counters: dict[str, LinkCounter] = field(default_factory=dict)
    xid_set: Any = None  # this card's NVML event set for critical XIDs (None: the card cannot report them)
    xid_count: int = 0
    xid_last: int | None = None
    lost: bool = False
    next_probe_at: float = 0.0
    probe_backoff_s: float = LOST_PROBE_FIRST_S
