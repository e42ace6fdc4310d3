"""Thresholds of the diagnosis, each derived from a mechanism or a public figure (see docs/diagnosis.md).

They are configurable under ``[diagnosis]`` in the config file; every field here is a valid key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Thresholds:
    idle_util_pct: float = 5.0  # below: no kernel ran (KempnerPulse's idle)
    stall_util_pct: float = 10.0  # below: a stalled tick (SageMaker's "GPU < 10 %")
    high_util_pct: float = 80.0  # steady_high when the card holds above this
    cpu_saturated_pct: float = 75.0  # mean busy of all cores: the host cannot prepare more input
    core_pegged_pct: float = 90.0  # one core at or above this is pegged (a lone DataLoader worker)
    disk_busy_pct: float = 80.0  # iostat %util near saturation for one-request-at-a-time devices
    iowait_pct: float = 20.0  # share of CPU time waiting on IO
    await_ms: float = 20.0  # mean time per IO, queue included
    sm_low_pct: float = 50.0  # SM activity below this is "likely ineffective" (DCGM guide: SM_ACTIVE < 0.5)
    sm_idle_pct: float = 5.0  # SMs essentially unused
    link_busy_bytes_per_s: float = 1e9  # PCIe or NVLink traffic worth noticing (KempnerPulse: 1 GB/s)
    mem_held_frac: float = 0.10  # memory held: share of the card's memory in use
    imbalance_pct: float = 30.0  # spread of mean GPU-Util between cards
    sawtooth_min_swing_pct: float = 50.0  # p95 - p5 of GPU-Util (ticks, or min/max inside ticks) for a sawtooth
    burst_util_pct: float = 70.0  # a burst reaches this (SageMaker "fluctuating": p95 > 70 while p5 < 10)
    sawtooth_min_acf: float = 0.3  # autocorrelation at the period for a periodic stall
    hold_s: float = 6.0  # a new verdict must hold this long before it replaces the old one
    recent_s: float = 20.0  # the current verdict judges this much recent history (levels, causes)
    regime_min_s: float = 4.0  # a steady stretch this long at the end is a new regime of its own

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Thresholds:
        return cls(**{k: float(v) for k, v in values.items()})

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]
