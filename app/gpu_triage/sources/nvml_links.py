"""PCIe and NVLink rates of one card, for :class:`gpu_triage.sources.nvml.NvmlGpuReader`.

Two ways, chosen per card and per rate (the reasons and figures are in :mod:`gpu_triage.sources.nvml`'s
docstring): the GPM metrics of this tick's sample where the card answers them, else the cumulative byte
counters read in one batched ``nvmlDeviceGetFieldValues`` and differenced between ticks. The counters'
NVLink scope adapts to the driver: all links at once, link by link, or none (a card without NVLink).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gpu_triage.nvmlwrap import Nvml
from gpu_triage.sources.nvml_card import LINK_KEYS, LinkCounter, NvmlCard

log = logging.getLogger(__name__)

_MIB = 1024.0 * 1024.0
_SCOPE_ALL_LINKS = 0xFFFFFFFF  # nvml.h: scopeId UINT_MAX = aggregate over all links
SUCCESS = 0

# nvmlValue_t union member for each nvmlValueType_t
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(value: Any, value_type: int | None) -> float | int | None:
    """Read an ``nvmlValue_t`` union as the member its ``valueType`` names."""
    member = _VALUE_MEMBER.get(value_type if value_type is not None else 3)
    if member is None or value is None:
        return None
    return getattr(value, member, None)


class LinkRates:
    """The link-rate half of the reader (a mixin: the reader holds the NVML handle, constants and clock)."""

    nvml: Nvml
    _const: dict[str, Any]
    _clock: Callable[[], float]

    def _gpm_link_rates(self, card: NvmlCard, values: tuple[float | None, ...] | None) -> dict[str, float | None]:
        """PCIe/NVLink bytes/s from this tick's GPM metrics (MiB/s), for the keys GPM answers on this card.

        A metric GPM does not answer is dropped for good (the counters take over for that key); NVLink is
        None on a card without links, whatever GPM says (it may answer 0 for links that do not exist)."""
        if values is None:
            return {}
        rates: dict[str, float | None] = {}
        for key, value in zip(LINK_KEYS, values, strict=True):
            if key not in card.gpm_link_keys:
                continue
            if value is None:
                card.gpm_link_keys.discard(key)
                log.debug("GPU %d: GPM does not answer %s; reading its counter instead", card.index, key)
                continue
            if key.startswith("nvlink") and card.nvlink_mode == "none":
                rates[key] = None
                continue
            rates[key] = max(0.0, value) * _MIB
        return rates

    def _field_request(self, card: NvmlCard, keys: list[str]) -> list[tuple[str, Any]]:
        c = self._const
        request: list[tuple[str, Any]] = []
        if "pcie_tx" in keys:
            request.append(("pcie_tx", c["NVML_FI_DEV_PCIE_COUNT_TX_BYTES"]))
        if "pcie_rx" in keys:
            request.append(("pcie_rx", c["NVML_FI_DEV_PCIE_COUNT_RX_BYTES"]))
        tx, rx = c["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"], c["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"]
        scopes: list[int] = []
        if card.nvlink_mode == "aggregate":
            scopes = [_SCOPE_ALL_LINKS]
        elif card.nvlink_mode == "per_link" and card.nvlink_links:
            scopes = list(range(card.nvlink_links))
        for scope in scopes:
            if "nvlink_tx" in keys:
                request.append(("nvlink_tx", (tx, scope)))
            if "nvlink_rx" in keys:
                request.append(("nvlink_rx", (rx, scope)))
        return request

    def _link_rates(self, card: NvmlCard, keys: list[str]) -> dict[str, float | None]:
        """One batched field read of the counters behind ``keys``; rates from the deltas of the counters."""
        request = self._field_request(card, keys)
        if not request:
            return {key: None for key in keys}
        now = self._clock()
        values = self.nvml.call("nvmlDeviceGetFieldValues", card.handle, [fid for _, fid in request])
        if not values:
            return {key: None for key in keys}
        totals: dict[str, tuple[int, int]] = {}  # key -> (sum of counters, newest timestamp)
        failed: dict[str, int] = {}
        for (key, _), entry in zip(request, values, strict=False):
            ret = getattr(entry, "nvmlReturn", SUCCESS)
            if ret != SUCCESS:
                failed[key] = ret
                continue
            value = field_value(entry.value, getattr(entry, "valueType", 3))
            if value is None:
                failed[key] = -1
                continue
            total, ts = totals.get(key, (0, 0))
            totals[key] = (total + int(value), max(ts, int(getattr(entry, "timestamp", 0) or 0)))
        self._adapt_nvlink(card, failed)
        rates: dict[str, float | None] = {}
        for key in {k for k, _ in request}:
            if key in failed or key not in totals:
                card.counters.pop(key, None)
                rates[key] = None
                continue
            value, ts = totals[key]
            rates[key] = self._rate(card, key, LinkCounter(value, ts, now))
        return rates

    def _adapt_nvlink(self, card: NvmlCard, failed: dict[str, int]) -> None:
        if card.nvlink_mode == "aggregate" and "nvlink_tx" in failed:
            # A driver that rejects the aggregate scope: sum per-link scopes if we know the link count.
            if failed["nvlink_tx"] == self._const["NVML_ERROR_INVALID_ARGUMENT"] and card.nvlink_links:
                card.nvlink_mode = "per_link"
            else:
                card.nvlink_mode = "none"  # no NVLink on this card: stop asking
        elif card.nvlink_mode == "per_link" and "nvlink_tx" in failed:
            card.nvlink_mode = "none"

    def _rate(self, card: NvmlCard, key: str, now: LinkCounter) -> float | None:
        prev = card.counters.get(key)
        card.counters[key] = now
        if prev is None:
            return None  # first reading: nothing to difference against
        delta = now.value - prev.value
        if delta < 0:
            return None  # counter reset or wrap: no honest rate for this tick
        elapsed = now.mono - prev.mono
        if now.ts_us and prev.ts_us and now.ts_us > prev.ts_us:
            driver_elapsed = (now.ts_us - prev.ts_us) / 1e6
            # the driver's own timestamps are exact, unless stale (a cached value): then the host clock
            if elapsed <= 0 or 0.5 * elapsed <= driver_elapsed <= 2.0 * elapsed:
                elapsed = driver_elapsed
        if elapsed <= 0:
            return None
        scale = 1024.0 if key.startswith("nvlink") else 1.0  # NVLink counters count KiB
        return delta * scale / elapsed
