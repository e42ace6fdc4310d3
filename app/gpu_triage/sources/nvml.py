"""Per-card GPU readings from NVML, cheap enough to take every tick on an 8-card box.

Why it is built this way (figures from docs/field-notes.md, measured on an H200):

- GPU-Util comes from the driver's own sample buffer (``nvmlDeviceGetSamples``, about one sample per
  200 ms) read from the last timestamp seen, so mean/min/max describe the whole tick; a sawtooth faster
  than the tick stays visible in min/max. ``GetUtilizationRates`` (only the last slice) is the fallback.
- SM active / occupancy / tensor / DRAM come from GPM between the previous tick's sample and this one's;
  only the four metrics shown are asked for (GPM metrics are computed on the CPU: 12 cost 5 ms).
- PCIe and NVLink rates come from the same GPM sample where the card has GPM (Hopper and later): measured
  on two H200s under load (docs/performance.md), the batched ``nvmlDeviceGetFieldValues`` of the cumulative
  counters cost 2.1 ms per card per tick against 0.16 ms for the GPM sample and its 8 metrics, and the PCIe
  byte counters wrap at 4 GiB (32 bits): a 24 GB/s host-to-device copy read as -1.4..7 GB/s through them and
  24.3 GB/s through GPM; on NVLink both agree within 3 %. Cards without GPM (or a metric GPM does not
  answer) keep the counters, read in ONE batched ``nvmlDeviceGetFieldValues`` per card, which also settles
  on the first tick whether the card has NVLink at all. ``nvmlDeviceGetPcieThroughput`` blocks for a 20 ms
  window per call and is never used.
- Throttle reasons and volatile ECC counts are three plain calls per card; XID events come from one NVML
  event set per card, drained each tick with a 0 ms wait (never blocking), so a tick costs one call per card
  when nothing happened.
- A card that falls off the bus (GPU_IS_LOST) is reported lost with an all-None sample while the others
  keep updating; it is probed again with growing back-off, never at full cost every tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from gpu_triage.model import GpuInfo, GpuSample
from gpu_triage.nvmlwrap import GpuLost, Nvml, cuda_version_text
from gpu_triage.sources.nvml_card import LINK_KEYS, NvmlCard
from gpu_triage.sources.nvml_card import LOST_PROBE_FIRST_S as LOST_PROBE_FIRST_S
from gpu_triage.sources.nvml_links import SUCCESS, LinkRates, field_value

# Constant values from nvml.h, used when the binding lacks the name (older nvidia-ml-py).
_GPU_UTILIZATION_SAMPLES = 1
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_FI_NVLINK_LINK_COUNT = 91
_FI_NVLINK_TX = 138  # KiB, cumulative
_FI_NVLINK_RX = 139
_FI_PCIE_TX = 197  # bytes, cumulative
_FI_PCIE_RX = 198
_GPM_SM_UTIL = 2
_GPM_SM_OCCUPANCY = 3
_GPM_ANY_TENSOR_UTIL = 5
_GPM_DRAM_BW_UTIL = 10
_GPM_PCIE_TX_PER_SEC = 20  # MiB/s
_GPM_PCIE_RX_PER_SEC = 21
_GPM_NVLINK_TOTAL_RX_PER_SEC = 60  # MiB/s, all links
_GPM_NVLINK_TOTAL_TX_PER_SEC = 61
_INVALID_ARGUMENT = 2
_EVENT_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
_MEMORY_ERROR_CORRECTED = 0
_MEMORY_ERROR_UNCORRECTED = 1
_VOLATILE_ECC = 0
_MAX_EVENTS_PER_TICK = 256  # a storm of events is still drained over a few ticks, never in an endless loop

log = logging.getLogger(__name__)

LOST_PROBE_MAX_S = 300.0  # back-off doubles up to this


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


class NvmlGpuReader(LinkRates):
    """Reads every card once per :meth:`sample`; static facts once at construction."""

    def __init__(self, nvml: Nvml, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.nvml = nvml
        self.m = nvml.m
        self._clock = clock
        self.messages: list[str] = []
        self.driver_version = nvml.text("nvmlSystemGetDriverVersion")
        cuda = nvml.call("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = nvml.call("nvmlSystemGetCudaDriverVersion")
        self.cuda_driver_version = cuda_version_text(cuda)
        self._const = {
            name: getattr(self.m, name, default)
            for name, default in (
                ("NVML_GPU_UTILIZATION_SAMPLES", _GPU_UTILIZATION_SAMPLES),
                ("NVML_TEMPERATURE_GPU", _TEMPERATURE_GPU),
                ("NVML_CLOCK_SM", _CLOCK_SM),
                ("NVML_FI_DEV_NVLINK_LINK_COUNT", _FI_NVLINK_LINK_COUNT),
                ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", _FI_NVLINK_TX),
                ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", _FI_NVLINK_RX),
                ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", _FI_PCIE_TX),
                ("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", _FI_PCIE_RX),
                ("NVML_GPM_METRIC_SM_UTIL", _GPM_SM_UTIL),
                ("NVML_GPM_METRIC_SM_OCCUPANCY", _GPM_SM_OCCUPANCY),
                ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", _GPM_ANY_TENSOR_UTIL),
                ("NVML_GPM_METRIC_DRAM_BW_UTIL", _GPM_DRAM_BW_UTIL),
                ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", _GPM_PCIE_TX_PER_SEC),
                ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", _GPM_PCIE_RX_PER_SEC),
                ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", _GPM_NVLINK_TOTAL_TX_PER_SEC),
                ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", _GPM_NVLINK_TOTAL_RX_PER_SEC),
                ("NVML_ERROR_INVALID_ARGUMENT", _INVALID_ARGUMENT),
                ("nvmlEventTypeXidCriticalError", _EVENT_XID_CRITICAL),
                ("NVML_MEMORY_ERROR_TYPE_CORRECTED", _MEMORY_ERROR_CORRECTED),
                ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", _MEMORY_ERROR_UNCORRECTED),
                ("NVML_VOLATILE_ECC", _VOLATILE_ECC),
            )
        }
        self._gpm_ids = [
            self._const["NVML_GPM_METRIC_SM_UTIL"],
            self._const["NVML_GPM_METRIC_SM_OCCUPANCY"],
            self._const["NVML_GPM_METRIC_ANY_TENSOR_UTIL"],
            self._const["NVML_GPM_METRIC_DRAM_BW_UTIL"],
            # the link rates, in the order of LINK_KEYS, from the same two samples (no extra driver call)
            self._const["NVML_GPM_METRIC_PCIE_TX_PER_SEC"],
            self._const["NVML_GPM_METRIC_PCIE_RX_PER_SEC"],
            self._const["NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC"],
            self._const["NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC"],
        ]
        self.cards: list[NvmlCard] = []
        count = nvml.call("nvmlDeviceGetCount") or 0
        for index in range(count):
            self.cards.append(self._open_card(index))

    # ---- static facts ----
    def _open_card(self, index: int) -> NvmlCard:
        try:
            handle = self.nvml.call("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                raise GpuLost("nvmlDeviceGetHandleByIndex")
            card = NvmlCard(index=index, handle=handle, info=self._static_info(index, handle))
            self._setup_gpm(card)
            self._setup_nvlink(card)
            self._setup_xid(card)
        except GpuLost:
            card = NvmlCard(index=index, handle=None, info=GpuInfo(index=index))
            self._mark_lost(card)
        return card

    def _static_info(self, index: int, handle: Any) -> GpuInfo:
        pci = self.nvml.call("nvmlDeviceGetPciInfo", handle)
        bus_id = None
        if pci is not None:
            bus_id = _text(getattr(pci, "busId", None)) or _text(getattr(pci, "busIdLegacy", None))
        memory = self.nvml.call("nvmlDeviceGetMemoryInfo", handle)
        return GpuInfo(
            index=index,
            name=self.nvml.text("nvmlDeviceGetName", handle),
            uuid=self.nvml.text("nvmlDeviceGetUUID", handle),
            pci_bus_id=bus_id,
            mem_total_bytes=getattr(memory, "total", None),
            pcie_gen_max=self.nvml.call("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_width_max=self.nvml.call("nvmlDeviceGetMaxPcieLinkWidth", handle),
        )

    def _setup_gpm(self, card: NvmlCard) -> None:
        support = self.nvml.call("nvmlGpmQueryDeviceSupport", card.handle)
        request_type = getattr(self.m, "c_nvmlGpmMetricsGet_t", None)
        if not support or not getattr(support, "isSupportedDevice", 0) or request_type is None:
            return
        first = self.nvml.call("nvmlGpmSampleAlloc")
        second = self.nvml.call("nvmlGpmSampleAlloc")
        if first is None or second is None:
            return
        request = request_type()
        request.version = getattr(self.m, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(self._gpm_ids)
        for i, metric_id in enumerate(self._gpm_ids):
            request.metrics[i].metricId = metric_id
        card.gpm_supported = True
        card.gpm_prev, card.gpm_spare, card.gpm_request = first, second, request

    def _setup_nvlink(self, card: NvmlCard) -> None:
        """Count links once; no links -> NVLink fields are never asked for again."""
        fid = self._const["NVML_FI_DEV_NVLINK_LINK_COUNT"]
        values = self.nvml.call("nvmlDeviceGetFieldValues", card.handle, [fid])
        links = None
        if values:
            entry = values[0]
            if getattr(entry, "nvmlReturn", 1) == SUCCESS:
                count = field_value(entry.value, getattr(entry, "valueType", 1))
                links = None if count is None else int(count)
        card.nvlink_links = links
        # links None: the count is not reported; try the aggregate counters once and see.
        card.nvlink_mode = "none" if links == 0 else "aggregate"

    def _setup_xid(self, card: NvmlCard) -> None:
        """One event set per card, registered for critical XIDs where the card supports them."""
        xid = self._const["nvmlEventTypeXidCriticalError"]
        supported = self.nvml.call("nvmlDeviceGetSupportedEventTypes", card.handle)
        if supported is None or not int(supported) & xid:
            return
        event_set = self.nvml.call("nvmlEventSetCreate")
        if event_set is None:
            return
        if not self.nvml.succeeds("nvmlDeviceRegisterEvents", card.handle, xid, event_set):
            self.nvml.call("nvmlEventSetFree", event_set)
            return
        card.xid_set = event_set

    def _xids(self, card: NvmlCard) -> None:
        """Drain the card's pending XID events without waiting: count them, keep the newest code.

        The code is the event's ``eventData``: the NVML reference (nvmlEventData_t) says it "stores the XID
        error for the device in the event of nvmlEventTypeXidCriticalError", the only type registered here.
        No XID was raised on the lent H200s (it cannot be provoked safely), so the tests drive a fake event.
        """
        for _ in range(_MAX_EVENTS_PER_TICK):
            event = self.nvml.next_event(card.xid_set)
            if event is None:
                return
            code = getattr(event, "eventData", None)
            card.xid_count += 1
            card.xid_last = int(code) if code is not None else card.xid_last
            log.warning("GPU %d raised XID %s", card.index, code)

    @property
    def gpu_infos(self) -> list[GpuInfo]:
        return [card.info for card in self.cards]

    @property
    def handles(self) -> list[Any]:
        return [card.handle for card in self.cards]

    @property
    def lost(self) -> set[int]:
        return {card.index for card in self.cards if card.lost}

    # ---- per tick ----
    def sample(self) -> list[GpuSample]:
        out = []
        for card in self.cards:
            if card.lost and not self._probe(card):
                out.append(GpuSample(index=card.index))
                continue
            try:
                out.append(self._sample_card(card))
            except GpuLost:
                self._mark_lost(card)
                out.append(GpuSample(index=card.index))
        return out

    def _sample_card(self, card: NvmlCard) -> GpuSample:
        h = card.handle
        call = self.nvml.call
        s = GpuSample(index=card.index)
        s.util_pct, s.util_min_pct, s.util_max_pct = self._util(card)
        memory = call("nvmlDeviceGetMemoryInfo", h)
        if memory is not None:
            s.mem_used_bytes = getattr(memory, "used", None)
            s.mem_total_bytes = getattr(memory, "total", None)
        power_mw = call("nvmlDeviceGetPowerUsage", h)
        s.power_w = power_mw / 1000.0 if power_mw is not None else None
        energy = call("nvmlDeviceGetTotalEnergyConsumption", h)  # cumulative: what the metrics export
        s.energy_mj = int(energy) if energy is not None else None
        temp = call("nvmlDeviceGetTemperature", h, self._const["NVML_TEMPERATURE_GPU"])
        s.temp_c = float(temp) if temp is not None else None
        clock = call("nvmlDeviceGetClockInfo", h, self._const["NVML_CLOCK_SM"])
        s.sm_clock_mhz = float(clock) if clock is not None else None
        gpm = self._gpm(card) if card.gpm_supported else None
        if gpm is not None:
            s.sm_active_pct, s.sm_occupancy_pct, s.tensor_active_pct, s.dram_active_pct = gpm[:4]
        rates = self._gpm_link_rates(card, gpm[4:] if gpm is not None else None)
        missing = [key for key in LINK_KEYS if key not in rates]
        if missing:  # no GPM, its first tick, or a metric it does not answer: the counters
            rates.update(self._link_rates(card, missing))
        s.pcie_tx_bytes_per_s = rates.get("pcie_tx")
        s.pcie_rx_bytes_per_s = rates.get("pcie_rx")
        s.nvlink_tx_bytes_per_s = rates.get("nvlink_tx")
        s.nvlink_rx_bytes_per_s = rates.get("nvlink_rx")
        self._health(card, s)
        return s

    def _health(self, card: NvmlCard, s: GpuSample) -> None:
        """Throttle reasons, volatile ECC counts, XID events: each None where the card does not say."""
        h, c = card.handle, self._const
        reasons = self.nvml.call("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:  # the pre-CUDA-12 name
            reasons = self.nvml.call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        s.clock_event_reasons = int(reasons) if reasons is not None else None
        for attr, kind in (
            ("ecc_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
            ("ecc_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
        ):
            count = self.nvml.call("nvmlDeviceGetTotalEccErrors", h, c[kind], c["NVML_VOLATILE_ECC"])
            setattr(s, attr, int(count) if count is not None else None)
        if card.xid_set is not None:
            self._xids(card)
            s.xid_count, s.xid_last = card.xid_count, card.xid_last

    def _util(self, card: NvmlCard) -> tuple[float | None, float | None, float | None]:
        """Mean/min/max of the driver samples newer than the last one seen; fallback: the current rate."""
        since = card.last_util_ts or 0
        got = self.nvml.call("nvmlDeviceGetSamples", card.handle, self._const["NVML_GPU_UTILIZATION_SAMPLES"], since)
        priming = card.last_util_ts is None
        if got:
            value_type, samples = got
            values = []
            newest = since
            for sample in samples:
                ts = sample.timeStamp
                if ts <= since:
                    continue
                newest = max(newest, ts)
                value = field_value(sample.sampleValue, value_type)
                if value is not None:
                    values.append(float(value))
            if newest > since:
                card.last_util_ts = newest
            if values and not priming:  # the first read holds the driver's whole buffer: not this tick
                return sum(values) / len(values), min(values), max(values)
        rates = self.nvml.call("nvmlDeviceGetUtilizationRates", card.handle)
        gpu = getattr(rates, "gpu", None) if rates is not None else None
        if gpu is None:
            return None, None, None
        return float(gpu), float(gpu), float(gpu)

    def _gpm(self, card: NvmlCard) -> tuple[float | None, ...] | None:
        """GPM metrics between last tick's sample and a fresh one; the fresh one becomes 'previous'."""
        fresh = self.nvml.call("nvmlGpmSampleGet", card.handle, card.gpm_spare)
        if fresh is None:
            card.gpm_prev_ok = False
            return None
        result = None
        if card.gpm_prev_ok:
            request = card.gpm_request
            request.sample1, request.sample2 = card.gpm_prev, card.gpm_spare
            got = self.nvml.call("nvmlGpmMetricsGet", request)
            if got is not None:
                result = tuple(
                    float(request.metrics[i].value) if request.metrics[i].nvmlReturn == SUCCESS else None
                    for i in range(len(self._gpm_ids))
                )
        card.gpm_prev, card.gpm_spare = card.gpm_spare, card.gpm_prev
        card.gpm_prev_ok = True
        return result

    # ---- lost cards ----
    def _mark_lost(self, card: NvmlCard) -> None:
        if not card.lost:
            self.messages.append(f"GPU {card.index} stopped answering (GPU is lost): showing it as lost.")
            log.warning("GPU %d stopped answering (GPU is lost); probing it again with back-off", card.index)
        card.lost = True
        card.counters.clear()
        card.gpm_prev_ok = False
        card.last_util_ts = None
        card.next_probe_at = self._clock() + card.probe_backoff_s

    def _probe(self, card: NvmlCard) -> bool:
        """One cheap call, with doubling back-off, to see whether a lost card came back."""
        now = self._clock()
        if now < card.next_probe_at:
            return False
        card.probe_backoff_s = min(card.probe_backoff_s * 2, LOST_PROBE_MAX_S)
        card.next_probe_at = now + card.probe_backoff_s
        try:
            if card.handle is None:
                card.handle = self.nvml.call("nvmlDeviceGetHandleByIndex", card.index)
                if card.handle is None:
                    return False
                card.info = self._static_info(card.index, card.handle)
                self._setup_gpm(card)
                self._setup_nvlink(card)
                if card.xid_set is None:
                    self._setup_xid(card)
            elif self.nvml.call("nvmlDeviceGetMemoryInfo", card.handle) is None:
                return False
        except GpuLost:
            return False
        card.lost = False
        card.probe_backoff_s = LOST_PROBE_FIRST_S
        self.messages.append(f"GPU {card.index} answers again.")
        log.warning("GPU %d answers again", card.index)
        return True

    def close(self) -> None:
        for card in self.cards:
            for sample in (card.gpm_prev, card.gpm_spare):
                if sample is not None and card.gpm_supported:
                    try:
                        self.nvml.call("nvmlGpmSampleFree", sample)
                    except GpuLost:
                        pass
            card.gpm_supported = False
            if card.xid_set is not None:
                try:
                    self.nvml.call("nvmlEventSetFree", card.xid_set)
                except GpuLost:
                    pass
                card.xid_set = None
