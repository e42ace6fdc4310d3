"""THE fake NVML *module object* for every test: the outside world that our NVML code talks to.

One fake for the sampling path (``gpu_triage.sources``) and for the topology and doctor
(``gpu_triage.topology``, ``gpu_triage.doctor``), so the two never drift apart. It mimics the shapes of
nvidia-ml-py's ``pynvml`` module where our code touches them: function names and signatures,
``NVMLError(value)`` mapping to per-code subclasses with ``.value``, the constants (same values, including
the binding's one-element tuple ``NVML_P2P_CAPS_INDEX_READ``), and struct-like return objects
(``memory.used``, ``pci.busId`` as ``str`` as the binding decodes it, ``field.value.ullVal``,
``sample.sampleValue.uiVal``, ``metricsGet.metrics[i].value``...). Behaviour follows the real library
and driver:

- ``nvmlDeviceGetSamples`` returns only samples newer than the timestamp asked for and raises NOT_FOUND
  when there is none;
- ``nvmlDeviceGetFieldValues`` reads a ``(fieldId, scopeId)`` tuple and leaves scopeId at 0 for a bare
  int, as pynvml does; NVLink throughput with scopeId ``0xFFFFFFFF`` is the sum over links, a bare
  int is link 0 only; NVLink throughput counters count KiB, PCIe counters bytes;
- a lost card raises GPU_IS_LOST from every call on its handle;
- ``nvmlInit`` can fail like a machine without a driver, or with a broken one (``init_error``: DRIVER_NOT_LOADED,
  LIB_RM_VERSION_MISMATCH after an upgrade without a reboot), raising the binding's per-code error classes;
- a card field set to ``None`` (persistence, MIG, ECC, clock reasons, PCIe link, NUMA node, CPU
  affinity) answers NOT_SUPPORTED, as the driver does on cards and VMs without it;
- NVLink links past the card's last one answer INVALID_ARGUMENT, a card without NVLink NOT_SUPPORTED;
  ``nvmlDeviceGetTopologyCommonAncestor`` of a card with itself is NOT_SUPPORTED (as on the real H200).

Tests configure one :class:`FakeCard` per GPU and move time with :meth:`FakeNvml.advance`, which
advances the cumulative counters and appends driver utilisation samples.

The wiring is described once, on the cards: ``links`` (each :class:`FakeLink` ends on a peer card's bus id
or on an NVSwitch) and ``pcie_path`` (the PCIe chain above the card: socket, host bridge, switches), from
which the common ancestor of a pair follows as the driver computes it. The machine builders
:func:`h200_box` (an HGX H200 board, NVSwitch) and :func:`pcie_switch_two_socket_box` (PCIe switches, two
sockets, one NVLink bridge) give whole machines; ``FakeNvml(ancestor=...)`` overrides the PCIe answer per
pair for machines no tree describes (e.g. a driver that hides one pair).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# ---- constants (values as in pynvml / nvml.h) ----
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}

NVML_TEMPERATURE_GPU = 0
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeXidCriticalError = 0x8
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

NVML_NVLINK_MAX_LINKS = 36
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198

NVML_GPM_METRIC_GRAPHICS_UTIL = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_INTEGER_UTIL = 4
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60
NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61
NVML_GPM_METRIC_MAX = 477
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1

UINT_MAX = 0xFFFFFFFF

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10  # PIX
NVML_TOPOLOGY_MULTIPLE = 20  # PXB
NVML_TOPOLOGY_HOSTBRIDGE = 30  # PHB
NVML_TOPOLOGY_NODE = 40  # NODE
NVML_TOPOLOGY_SYSTEM = 50  # SYS
NVML_P2P_CAPS_INDEX_READ = (0,)  # the binding's trailing comma, on purpose: passing it fails like ctypes does
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_AFFINITY_SCOPE_NODE = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

#: nvidia-smi topo -m label -> the driver's nvmlGpuTopologyLevel_t, for ``FakeNvml(ancestor=...)``.
TOPOLOGY_LEVEL = {
    "PIX": NVML_TOPOLOGY_SINGLE,
    "PXB": NVML_TOPOLOGY_MULTIPLE,
    "PHB": NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": NVML_TOPOLOGY_NODE,
    "SYS": NVML_TOPOLOGY_SYSTEM,
}

GIB = 1024**3


def bus(i: int) -> str:
    """The PCI bus id NVML gives card ``i`` of a fake machine (unless the test sets ``pci_bus_id``)."""
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


def nvswitch_bus(k: int) -> str:
    """The bus id of NVSwitch ``k``: what ``nvmlDeviceGetNvLinkRemotePciInfo`` says for a link to it."""
    return f"00000000:{0xA0 + k:02X}:00.0"


# ---- errors: NVMLError(value) builds the per-code subclass, like pynvml ----
class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}

    def __new__(cls, value: int) -> NVMLError:  # noqa: D102 - mirrors pynvml
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)  # .value was set by __new__

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _make_error_class(name: str, code: int) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {"__new__": lambda typ, *a: NVMLError.__new__(typ, code)})
    NVMLError._valClassMapping[code] = cls
    return cls


NVMLError_NotSupported = _make_error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NotFound = _make_error_class("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_NoPermission = _make_error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_GpuIsLost = _make_error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_LibraryNotFound = _make_error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_DriverNotLoaded = _make_error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibRmVersionMismatch = _make_error_class(
    "NVMLError_LibRmVersionMismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH
)
NVMLError_Uninitialized = _make_error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _make_error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_Unknown = _make_error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


# ---- struct-like return objects ----
class Struct:
    """A plain attribute bag standing in for a ctypes structure."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({inner})"


class c_nvmlValue_t(Struct):
    def __init__(self, **fields: Any) -> None:
        base = {"dVal": 0.0, "uiVal": 0, "ulVal": 0, "ullVal": 0, "sllVal": 0, "siVal": 0, "usVal": 0}
        base.update(fields)
        super().__init__(**base)


class c_nvmlFieldValue_t(Struct):
    pass


class c_nvmlSample_t(Struct):
    pass


class c_nvmlMemory_t(Struct):
    pass


class c_nvmlUtilization_t(Struct):
    pass


class c_nvmlGpmSupport_t(Struct):
    pass


class c_nvmlGpmMetric_t(Struct):
    def __init__(self) -> None:
        super().__init__(metricId=0, nvmlReturn=NVML_SUCCESS, value=0.0, metricInfo=None)


class c_nvmlGpmMetricsGet_t:
    """Mirrors the ctypes struct: the caller sets version, numMetrics, sample1/2, metrics[i].metricId."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: FakeGpmSample | None = None
        self.sample2: FakeGpmSample | None = None
        self.metrics = [c_nvmlGpmMetric_t() for _ in range(NVML_GPM_METRIC_MAX)]


@dataclass
class FakeGpmSample:
    card: int | None = None
    t_us: int | None = None
    freed: bool = False


@dataclass
class FakeHandle:
    index: int


@dataclass
class FakeLink:
    """One NVLink link of a card: where it ends (a peer card's or an NVSwitch's bus id) and whether it is up."""

    remote_bus_id: str
    remote_type: int = NVML_NVLINK_DEVICE_TYPE_GPU
    active: bool = True


@dataclass
class FakeProcess:
    """One entry of nvmlDeviceGetComputeRunningProcesses; ``usedGpuMemory`` None = hidden by the driver."""

    pid: int
    usedGpuMemory: int | None = None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF
    sm_util: int | None = None  # its smUtil in the driver's process-utilization samples; None: no sample


# ---- configuration of one card ----
@dataclass
class FakeCard:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:00:00.0"
    mem_total: int = 150_754_820_096
    mem_used: int = 1_000_000_000
    power_mw: int = 120_000
    temp_c: int = 40
    sm_clock_mhz: int = 1980
    # PCIe link: current (an idle card may drop its generation to save power) and maximum
    pcie_gen: int | None = 5
    pcie_width: int | None = 16
    pcie_gen_max: int | None = 5
    pcie_width_max: int | None = 16
    # health facts the doctor reads; None = the driver answers NOT_SUPPORTED
    clock_reasons: int | None = 0  # nvmlClocksEventReason* bit mask
    ecc_uncorrected: int | None = 0  # volatile (since the driver loaded) uncorrected errors
    ecc_corrected: int = 0  # volatile corrected errors (NOT_SUPPORTED with the uncorrected ones when None)
    energy_mj: int | None = 0  # nvmlDeviceGetTotalEnergyConsumption (NOT_SUPPORTED when None: pre-Volta)
    # NVML events: the mask nvmlDeviceGetSupportedEventTypes answers, and XID codes raised and not yet read
    event_types: int | None = 0x1 | 0x8
    xids: list[int] = field(default_factory=list)
    persistence: int | None = 1
    mig: list[int] | None = None  # [current, pending]
    numa_node: int | None = None  # the lab H200 does not say (field notes)
    cpus: list[int] | None = None  # cores close to the card (nvmlDeviceGetCpuAffinity)
    # wiring: NVLink links (see FakeLink) and the PCIe chain above the card, from the socket down:
    # (socket, host bridge, switch, switch...). Empty = the driver hides it (common ancestor NOT_SUPPORTED).
    links: list[FakeLink] = field(default_factory=list)
    pcie_path: tuple[str, ...] = ()
    # GPU-Util: the driver appends one sample every `sample_period_s` with value util(seconds since start).
    util: Callable[[float], float] | float = 0.0
    sample_period_s: float = 0.2
    samples_supported: bool = True
    # GPM (Hopper+): metric id -> value over the interval between two samples.
    gpm_supported: bool = True
    gpm: dict[int, float] = field(default_factory=dict)
    gpm_unsupported: set[int] = field(default_factory=set)  # metric ids answering NOT_SUPPORTED
    # cumulative counters and how fast they grow (bytes/s; NVLink per link, KiB counters underneath)
    pcie_tx_bytes: int = 0
    pcie_rx_bytes: int = 0
    pcie_tx_rate: float = 0.0
    pcie_rx_rate: float = 0.0
    nvlink_links: int = 0  # 0 = no NVLink: the fields answer NOT_SUPPORTED; len(links) when links are given
    nvlink_tx_kib: list[int] = field(default_factory=list)
    nvlink_rx_kib: list[int] = field(default_factory=list)
    nvlink_tx_rate_per_link: float = 0.0  # bytes/s on each link
    nvlink_rx_rate_per_link: float = 0.0
    unsupported_fields: set[int] = field(default_factory=set)  # field ids answering NOT_SUPPORTED
    unsupported: set[str] = field(default_factory=set)  # function names raising NOT_SUPPORTED on this card
    failing: dict[str, int] = field(default_factory=dict)  # function name -> error code it raises
    processes: list[FakeProcess] = field(default_factory=list)
    graphics_processes: list[FakeProcess] = field(default_factory=list)
    process_utilization_not_found: bool = True  # real driver: NOT_FOUND until a process has a sample
    lost: bool = False
    # internal state
    samples: list[tuple[int, float]] = field(default_factory=list)
    _next_sample_us: int | None = None
    _tx_frac: float = 0.0
    _rx_frac: float = 0.0

    def __post_init__(self) -> None:
        if self.links and not self.nvlink_links:
            self.nvlink_links = len(self.links)
        elif self.nvlink_links and not self.links:  # links nobody described end on NVSwitches, as on HGX boards
            self.links = [
                FakeLink(nvswitch_bus(k % 4), NVML_NVLINK_DEVICE_TYPE_SWITCH) for k in range(self.nvlink_links)
            ]
        if self.nvlink_links and not self.nvlink_tx_kib:
            self.nvlink_tx_kib = [0] * self.nvlink_links
        if self.nvlink_links and not self.nvlink_rx_kib:
            self.nvlink_rx_kib = [0] * self.nvlink_links

    def util_at(self, t_s: float) -> float:
        return float(self.util(t_s)) if callable(self.util) else float(self.util)


class FakeNvml:
    """A module-like object with pynvml's functions, backed by :class:`FakeCard` configs.

    ``now_us`` is the fake CPU timestamp (microseconds) used for sample and field timestamps.
    ``calls`` counts every function call by name, so tests can check what the code asked for.
    """

    # expose constants and classes as attributes, like the module
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError

    def __init__(
        self,
        cards: list[FakeCard] | None = None,
        *,
        init_error: int | None = None,
        driver_version: str = "580.159.04",
        cuda_driver_version: int = 13000,
        start_us: int = 1_700_000_000_000_000,
        missing: set[str] | None = None,
        ancestor: Callable[[int, int], str | None] | None = None,
        legacy_bytes: bool = False,
    ) -> None:
        """``ancestor(i, j)`` -> a topo label or None (NOT_SUPPORTED) overrides what the cards' ``pcie_path``
        say; ``legacy_bytes`` makes strings come back as ``bytes``, as older bindings returned them."""
        self.cards = cards if cards is not None else [FakeCard()]
        self.init_error = init_error
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.start_us = start_us
        self.now_us = start_us
        self.missing = set(missing or ())  # functions the "binding" does not have
        self.ancestor = ancestor
        self.legacy_bytes = legacy_bytes
        self.calls: Counter[str] = Counter()
        self.card_calls: Counter[tuple[int, str]] = Counter()  # (card index, function) -> calls
        self.initialised = False
        for i, card in enumerate(self.cards):
            if card.uuid == FakeCard.uuid:
                card.uuid = f"GPU-{i:08x}-0000-0000-0000-000000000000"
            if card.pci_bus_id == FakeCard.pci_bus_id:
                card.pci_bus_id = bus(i)
        self.advance(0.0)  # seed the sample buffer with one sample

    # ---- module-like attribute access ----
    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # constants defined at module level (NVML_*), looked up like the real module's attributes
        if name.startswith("NVML_") and name in globals():
            return globals()[name]
        raise AttributeError(name)

    # ---- test controls ----
    def advance(self, seconds: float) -> None:
        """Move time: append driver GPU-Util samples and grow the cumulative counters."""
        end_us = self.now_us + int(round(seconds * 1e6))
        for card in self.cards:
            period_us = int(card.sample_period_s * 1e6)
            if card._next_sample_us is None:
                card._next_sample_us = self.now_us
            while card._next_sample_us <= end_us:
                t_us = card._next_sample_us
                card.samples.append((t_us, card.util_at((t_us - self.start_us) / 1e6)))
                card._next_sample_us += period_us
            del card.samples[:-600]  # the driver keeps a bounded ring
            card.pcie_tx_bytes += int(round(card.pcie_tx_rate * seconds))
            card.pcie_rx_bytes += int(round(card.pcie_rx_rate * seconds))
            for link in range(card.nvlink_links):
                card.nvlink_tx_kib[link] += int(round(card.nvlink_tx_rate_per_link * seconds / 1024))
                card.nvlink_rx_kib[link] += int(round(card.nvlink_rx_rate_per_link * seconds / 1024))
        self.now_us = end_us

    def lose_card(self, index: int) -> None:
        self.cards[index].lost = True

    # ---- helpers ----
    def _card(self, fn: str, handle: FakeHandle) -> FakeCard:
        self.calls[fn] += 1
        self.card_calls[(handle.index, fn)] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        card = self.cards[handle.index]
        if card.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if fn in card.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if fn in card.failing:
            raise NVMLError(card.failing[fn])
        return card

    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.legacy_bytes else value

    @staticmethod
    def _supported(value: Any) -> Any:
        """A card fact set to None is one the driver does not give: NOT_SUPPORTED."""
        if value is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return value

    def _sys(self, fn: str) -> None:
        self.calls[fn] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    # ---- init / system ----
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._sys("nvmlSystemGetDriverVersion")
        return self._text(self.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._sys("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._sys("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._sys("nvmlDeviceGetCount")
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._sys("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.cards):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.cards[index].lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return FakeHandle(index)

    # ---- static facts ----
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        return self._text(self._card("nvmlDeviceGetName", handle).name)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str | bytes:
        return self._text(self._card("nvmlDeviceGetUUID", handle).uuid)

    def _pci_info(self, bus_id: str) -> Struct:
        """nvmlPciInfo_t: ``busId`` is ``00000000:18:00.0``; domain/bus/device as numbers."""
        domain, bus_no, rest = bus_id.split(":")
        return Struct(
            busId=self._text(bus_id), busIdLegacy=self._text(bus_id[4:]),
            domain=int(domain, 16), bus=int(bus_no, 16), device=int(rest.split(".")[0], 16),
        )

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> Struct:
        return self._pci_info(self._card("nvmlDeviceGetPciInfo", handle).pci_bus_id)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width)

    # ---- health facts (the doctor) ----
    def nvmlDeviceGetPersistenceMode(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetPersistenceMode", handle).persistence)

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        return list(self._supported(self._card("nvmlDeviceGetMigMode", handle).mig))

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter_type: int) -> int:
        """Only volatile uncorrected errors are configured; the other counters read 0 where ECC is on."""
        card = self._card("nvmlDeviceGetTotalEccErrors", handle)
        if error_type not in (
            NVML_MEMORY_ERROR_TYPE_CORRECTED,
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        ) or counter_type not in (NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        value = self._supported(card.ecc_uncorrected)
        if counter_type != NVML_VOLATILE_ECC:
            return 0
        return value if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else card.ecc_corrected

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:  # the pre-12.x name
        return self._supported(self._card("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_reasons)

    def nvmlDeviceGetNumaNodeId(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetNumaNodeId", handle).numa_node)

    def nvmlDeviceGetCpuAffinity(self, handle: FakeHandle, cpu_set_size: int) -> list[int]:
        """64-bit words of the card's near cores; like the driver, only what fits in the caller's buffer."""
        cpus = self._supported(self._card("nvmlDeviceGetCpuAffinity", handle).cpus)
        words = [0] * cpu_set_size
        for cpu in cpus:
            if cpu < cpu_set_size * 64:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    # ---- wiring (the topology) ----
    def _link(self, fn: str, handle: FakeHandle, link: int) -> FakeLink:
        card = self._card(fn, handle)
        if not card.links:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(card.links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return card.links[link]

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        active = self._link("nvmlDeviceGetNvLinkState", handle, link).active
        return NVML_FEATURE_ENABLED if active else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> Struct:
        return self._pci_info(self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link).remote_bus_id)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link).remote_type

    def nvmlDeviceGetP2PStatus(self, handle1: FakeHandle, handle2: FakeHandle, p2p_index: int) -> int:
        """NVLink P2P works over an active direct link or when both cards reach an NVSwitch; PCIe P2P is OK."""
        if not isinstance(p2p_index, int):  # the binding's ctypes call rejects NVML_P2P_CAPS_INDEX_READ's tuple
            raise TypeError("p2pIndex must be an int")
        a = self._card("nvmlDeviceGetP2PStatus", handle1)
        b = self._card("nvmlDeviceGetP2PStatus", handle2)
        if p2p_index != NVML_P2P_CAPS_INDEX_NVLINK:
            return NVML_P2P_STATUS_OK
        direct = any(link.active and link.remote_bus_id == b.pci_bus_id for link in a.links)

        def switched(card: FakeCard) -> bool:
            return any(link.active and link.remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH for link in card.links)

        return NVML_P2P_STATUS_OK if direct or (switched(a) and switched(b)) else NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, handle1: FakeHandle, handle2: FakeHandle) -> int:
        a = self._card("nvmlDeviceGetTopologyCommonAncestor", handle1)
        b = self._card("nvmlDeviceGetTopologyCommonAncestor", handle2)
        if handle1.index == handle2.index:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # as on the real H200
        label = (
            self.ancestor(handle1.index, handle2.index) if self.ancestor else _pcie_ancestor(a.pcie_path, b.pcie_path)
        )
        if label is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return TOPOLOGY_LEVEL[label]

    # ---- per tick ----
    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: Any = None) -> c_nvmlMemory_t:
        card = self._card("nvmlDeviceGetMemoryInfo", handle)
        return c_nvmlMemory_t(total=card.mem_total, used=card.mem_used, free=card.mem_total - card.mem_used)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._card("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        card = self._card("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return card.temp_c

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        card = self._card("nvmlDeviceGetClockInfo", handle)
        if clock_type != NVML_CLOCK_SM:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return card.sm_clock_mhz

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> c_nvmlUtilization_t:
        card = self._card("nvmlDeviceGetUtilizationRates", handle)
        last = card.samples[-1][1] if card.samples else card.util_at(0.0)
        return c_nvmlUtilization_t(gpu=int(round(last)), memory=0)

    def nvmlDeviceGetSamples(self, handle: FakeHandle, sampling_type: int, timestamp: int) -> tuple[int, list[Any]]:
        card = self._card("nvmlDeviceGetSamples", handle)
        if sampling_type != NVML_GPU_UTILIZATION_SAMPLES or not card.samples_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        newer = [(t, v) for t, v in card.samples if t > timestamp]
        if not newer:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return (
            NVML_VALUE_TYPE_UNSIGNED_INT,
            [c_nvmlSample_t(timeStamp=t, sampleValue=c_nvmlValue_t(uiVal=int(round(v)))) for t, v in newer],
        )

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[Any]) -> list[c_nvmlFieldValue_t]:
        card = self._card("nvmlDeviceGetFieldValues", handle)
        out = []
        for entry in field_ids:
            try:
                field_id, scope = entry
            except TypeError:
                field_id, scope = entry, 0
            out.append(self._field(card, field_id, scope))
        return out

    def _field(self, card: FakeCard, field_id: int, scope: int) -> c_nvmlFieldValue_t:
        def answer(ret: int, vtype: int = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, **value: Any) -> c_nvmlFieldValue_t:
            return c_nvmlFieldValue_t(
                fieldId=field_id, scopeId=scope, timestamp=self.now_us, latencyUsec=0,
                valueType=vtype, nvmlReturn=ret, value=c_nvmlValue_t(**value),
            )

        if field_id in card.unsupported_fields:
            return answer(NVML_ERROR_NOT_SUPPORTED)
        if field_id == NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
            return answer(NVML_SUCCESS, ullVal=card.pcie_tx_bytes)
        if field_id == NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
            return answer(NVML_SUCCESS, ullVal=card.pcie_rx_bytes)
        if field_id == NVML_FI_DEV_NVLINK_LINK_COUNT:
            if card.nvlink_links == 0:
                return answer(NVML_ERROR_NOT_SUPPORTED)
            return answer(NVML_SUCCESS, NVML_VALUE_TYPE_UNSIGNED_INT, uiVal=card.nvlink_links)
        if field_id in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
            if card.nvlink_links == 0:
                return answer(NVML_ERROR_NOT_SUPPORTED)
            counters = card.nvlink_tx_kib if field_id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else card.nvlink_rx_kib
            if scope == UINT_MAX:
                return answer(NVML_SUCCESS, ullVal=sum(counters))
            if scope < card.nvlink_links:
                return answer(NVML_SUCCESS, ullVal=counters[scope])
            return answer(NVML_ERROR_INVALID_ARGUMENT)
        return answer(NVML_ERROR_NOT_SUPPORTED)

    # ---- GPM ----
    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> c_nvmlGpmSupport_t:
        card = self._card("nvmlGpmQueryDeviceSupport", handle)
        return c_nvmlGpmSupport_t(version=NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(card.gpm_supported))

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self._sys("nvmlGpmSampleAlloc")
        return FakeGpmSample()

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        self._sys("nvmlGpmSampleFree")
        sample.freed = True

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: FakeGpmSample) -> FakeGpmSample:
        card = self._card("nvmlGpmSampleGet", handle)
        if not card.gpm_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if sample.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        sample.card, sample.t_us = handle.index, self.now_us
        return sample

    def nvmlGpmMetricsGet(self, metrics_get: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        self._sys("nvmlGpmMetricsGet")
        if metrics_get.version != NVML_GPM_METRICS_GET_VERSION:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        s1, s2 = metrics_get.sample1, metrics_get.sample2
        if s1 is None or s2 is None or s1.t_us is None or s2.t_us is None or s1.card != s2.card:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if s2.t_us <= s1.t_us:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        card = self.cards[s2.card]
        if card.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        self.calls["gpm_metrics_requested"] += metrics_get.numMetrics
        for i in range(metrics_get.numMetrics):
            metric = metrics_get.metrics[i]
            derived = self._gpm_link_metric(card, metric.metricId)
            if metric.metricId in card.gpm_unsupported:
                metric.nvmlReturn, metric.value = NVML_ERROR_NOT_SUPPORTED, 0.0
            elif metric.metricId in card.gpm:
                metric.nvmlReturn, metric.value = NVML_SUCCESS, float(card.gpm[metric.metricId])
            elif derived is not None:
                metric.nvmlReturn, metric.value = NVML_SUCCESS, derived
            else:
                metric.nvmlReturn, metric.value = NVML_ERROR_NOT_SUPPORTED, 0.0
        return metrics_get

    @staticmethod
    def _gpm_link_metric(card: FakeCard, metric_id: int) -> float | None:
        """GPM's PCIe and NVLink rates (MiB/s) follow the same traffic as the cumulative counters; a card without
        NVLink does not answer the NVLink ones. ``card.gpm`` overrides (e.g. to make GPM disagree)."""
        mib = float(2**20)
        if metric_id == NVML_GPM_METRIC_PCIE_TX_PER_SEC:
            return card.pcie_tx_rate / mib
        if metric_id == NVML_GPM_METRIC_PCIE_RX_PER_SEC:
            return card.pcie_rx_rate / mib
        if card.nvlink_links and metric_id == NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
            return card.nvlink_tx_rate_per_link * card.nvlink_links / mib
        if card.nvlink_links and metric_id == NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
            return card.nvlink_rx_rate_per_link * card.nvlink_links / mib
        return None

    # ---- events (XIDs): one set holds the cards registered in it; waiting with 0 ms never blocks ----
    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        return self._supported(self._card("nvmlDeviceGetSupportedEventTypes", handle).event_types)

    def nvmlEventSetCreate(self) -> Struct:
        self._sys("nvmlEventSetCreate")
        return Struct(cards=[], freed=False)

    def nvmlEventSetFree(self, event_set: Struct) -> None:
        self._sys("nvmlEventSetFree")
        event_set.freed = True

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, event_types: int, event_set: Struct) -> None:
        card = self._card("nvmlDeviceRegisterEvents", handle)
        if card.event_types is None or event_types & ~card.event_types:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        event_set.cards.append(handle.index)

    def nvmlEventSetWait(self, event_set: Struct, timeout_ms: int) -> Struct:  # the pre-v2 name, same answers
        return self._event_wait("nvmlEventSetWait", event_set, timeout_ms)

    def nvmlEventSetWait_v2(self, event_set: Struct, timeout_ms: int) -> Struct:
        return self._event_wait("nvmlEventSetWait_v2", event_set, timeout_ms)

    def _event_wait(self, fn: str, event_set: Struct, timeout_ms: int) -> Struct:
        self._sys(fn)
        assert timeout_ms == 0, "a live tick must never block on NVML events"
        if event_set.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        for index in event_set.cards:
            card = self.cards[index]
            if card.lost:
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            if card.xids:
                return Struct(
                    device=FakeHandle(index), eventType=nvmlEventTypeXidCriticalError, eventData=card.xids.pop(0),
                    gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF,
                )
        raise NVMLError(NVML_ERROR_TIMEOUT)

    # ---- processes ----
    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcess]:
        return list(self._card("nvmlDeviceGetComputeRunningProcesses", handle).processes)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[FakeProcess]:
        return list(self._card("nvmlDeviceGetGraphicsRunningProcesses", handle).graphics_processes)

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, timestamp: int) -> list[Struct]:
        """The driver's latest sample of each process that has one, newer than ``timestamp`` (µs); NOT_FOUND
        when there is none (what the real driver answers, docs/field-notes.md)."""
        card = self._card("nvmlDeviceGetProcessUtilization", handle)
        sampled = [p for p in card.processes if p.sm_util is not None and self.now_us > timestamp]
        if card.process_utilization_not_found or not sampled:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return [
            Struct(pid=p.pid, timeStamp=self.now_us, smUtil=p.sm_util, memUtil=0, encUtil=0, decUtil=0)
            for p in sampled
        ]

    # ---- never to be called per tick (blocks 20 ms on real hardware) ----
    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        self._card("nvmlDeviceGetPcieThroughput", handle)
        return 0


def _pcie_ancestor(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """The driver's common ancestor of two cards from their PCIe chains (socket, host bridge, switches...).

    Other socket: SYS; same socket, other host bridge: NODE; same host bridge, no shared switch: PHB; right
    below the same switch: PIX; sharing only upper switches: PXB. A hidden chain (empty) is NOT_SUPPORTED.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    if a[0] != b[0]:
        return "SYS"
    if a[1] != b[1]:
        return "NODE"
    shared = 0
    for x, y in zip(a[2:], b[2:], strict=False):  # paths of different depth share a prefix
        if x != y:
            break
        shared += 1
    if shared == 0:
        return "PHB"
    return "PIX" if shared == len(a) - 2 == len(b) - 2 else "PXB"


def _socket_cores(node: int, cores_per_socket: int) -> list[int]:
    return list(range(node * cores_per_socket, (node + 1) * cores_per_socket))


def h200_box(count: int = 8, *, cores_per_socket: int = 48, **card_kwargs: Any) -> FakeNvml:
    """An HGX H200 board of ``count`` cards: each card's 18 NVLink links go to 4 NVSwitches (so every pair is
    NV18), GPM supported and busy; the first half of the cards sits on socket/NUMA node 0, the rest on 1,
    each card behind its own host bridge (NODE within a socket, SYS across). Every card field can be
    overridden per call (``nvlink_links=0`` gives a box without NVLink)."""
    defaults: dict[str, Any] = {
        "nvlink_links": 18,
        "gpm": {
            NVML_GPM_METRIC_SM_UTIL: 90.0,
            NVML_GPM_METRIC_SM_OCCUPANCY: 20.0,
            NVML_GPM_METRIC_ANY_TENSOR_UTIL: 40.0,
            NVML_GPM_METRIC_DRAM_BW_UTIL: 30.0,
        },
        "util": 95.0,
    }
    defaults.update(card_kwargs)
    cards = []
    for i in range(count):
        node = 0 if i < max(1, count // 2) else 1
        wiring: dict[str, Any] = {
            "pci_bus_id": bus(i),
            "numa_node": node,
            "cpus": _socket_cores(node, cores_per_socket),
            "pcie_path": (f"socket{node}", f"hostbridge{i}", f"switch{i}"),
        }
        wiring.update({k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                       for k, v in defaults.items()})
        cards.append(FakeCard(**wiring))
    return FakeNvml(cards)


def pcie_switch_two_socket_box(*, cores_per_socket: int = 16, **card_kwargs: Any) -> FakeNvml:
    """4 PCIe cards on two sockets (one NUMA node each): cards 0-1 right below one switch (PIX) and joined by
    a 4-link NVLink bridge (NV4), cards 2-3 below two levels of switches (PXB), the pairs across sockets (SYS)."""
    paths = [
        ("socket0", "hostbridge0", "switch0"),
        ("socket0", "hostbridge0", "switch0"),
        ("socket1", "hostbridge1", "switch1", "switch1a"),
        ("socket1", "hostbridge1", "switch1", "switch1b"),
    ]
    bridge = {0: 1, 1: 0}
    cards = [
        FakeCard(
            **{
                "pci_bus_id": bus(i),
                "numa_node": i // 2,
                "cpus": _socket_cores(i // 2, cores_per_socket),
                "pcie_path": paths[i],
                "links": [FakeLink(bus(bridge[i])) for _ in range(4)] if i in bridge else [],
                **card_kwargs,
            }
        )
        for i in range(4)
    ]
    return FakeNvml(cards)
