"""A fake NVML module (the outside world) for topology and doctor tests.

It mimics the parts of nvidia-ml-py's ``pynvml`` that the doctor reads: same function names, same constants,
``NVMLError`` with a ``.value`` code, ``nvmlPciInfo_t``-like objects whose ``busId`` is bytes. A machine is
described by :class:`FakeCard` objects plus a function giving the common PCIe ancestor of a pair.

Written on its own because the live-source engineer's tests/fake_nvml.py was not there yet; it can be
folded into it later without changing the tests that use :func:`make_module`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NOT_SUPPORTED = 3
NOT_FOUND = 6
INVALID_ARGUMENT = 2
GPU_IS_LOST = 15
DRIVER_NOT_LOADED = 9

TOPO = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}

GIB = 1024**3


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeLink:
    remote_bus_id: str
    remote_type: int = 0  # 0 GPU, 2 NVSwitch
    active: bool = True


@dataclass
class FakeCard:
    bus_id: str  # NVML style: 00000000:17:00.0
    name: str = "NVIDIA H200"
    mem_total: int = 141 * GIB
    mem_used: int = 600 * 1024**2  # what an idle card reports: the driver's own reservation
    procs: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes)
    pcie_gen: int | None = 5
    pcie_gen_max: int | None = 5
    pcie_width: int | None = 16
    pcie_width_max: int | None = 16
    clock_reasons: int | None = 0
    ecc_uncorrected: int | None = 0
    persistence: int | None = 1
    mig: list[int] | None = None  # [current, pending]; None = unsupported
    numa_node: int | None = 0
    cpus: list[int] | None = None  # cores close to the card; None = unsupported
    links: list[FakeLink] = field(default_factory=list)
    lost: bool = False


class FakeNvmlModule:
    """Instances behave like the ``pynvml`` module for the functions the doctor and topology call."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND = NOT_FOUND
    NVML_ERROR_INVALID_ARGUMENT = INVALID_ARGUMENT
    NVML_ERROR_GPU_IS_LOST = GPU_IS_LOST
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_P2P_CAPS_INDEX_READ = (0,)  # the binding's trailing comma, on purpose
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_NOT_SUPPORTED = 5
    NVML_VOLATILE_ECC = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_AFFINITY_SCOPE_NODE = 0

    def __init__(
        self,
        cards: list[FakeCard],
        ancestor: Callable[[int, int], str | None] | None = None,
        driver: str = "580.159.04",
        cuda: int = 13000,
        init_error: int | None = None,
    ) -> None:
        self.cards = cards
        self.ancestor = ancestor or (lambda i, j: "PIX")
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.calls: list[str] = []

    # -- life cycle ---------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def _card(self, handle: int) -> FakeCard:
        card = self.cards[handle]
        if card.lost:
            raise NVMLError(GPU_IS_LOST)
        return card

    @staticmethod
    def _value(v: Any) -> Any:
        if v is None:
            raise NVMLError(NOT_SUPPORTED)
        return v

    # -- system -------------------------------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < len(self.cards):
            raise NVMLError(INVALID_ARGUMENT)
        return i

    # -- identity -----------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: int) -> str:
        return self._card(h).name

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._card(h).bus_id.encode())

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        c = self._card(h)
        return SimpleNamespace(total=c.mem_total, used=c.mem_used, free=c.mem_total - c.mem_used)

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return self._value(self._card(h).persistence)

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return self._value(self._card(h).mig)

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter: int) -> int:
        assert error_type == 1 and counter == 0, "the doctor reads volatile uncorrected errors"
        return self._value(self._card(h).ecc_uncorrected)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._value(self._card(h).clock_reasons)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._value(self._card(h).pcie_gen)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._value(self._card(h).pcie_gen_max)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._value(self._card(h).pcie_width)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._value(self._card(h).pcie_width_max)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self._card(h).procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._card(h)
        return []

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return self._value(self._card(h).numa_node)

    def nvmlDeviceGetCpuAffinity(self, h: int, words: int) -> list[int]:
        cpus = self._value(self._card(h).cpus)
        masks = [0] * words
        for cpu in cpus:
            if cpu < words * 64:  # like the driver: only what fits in the caller's buffer
                masks[cpu // 64] |= 1 << (cpu % 64)
        return masks

    # -- links --------------------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        card = self._card(h)
        if not card.links:
            raise NVMLError(NOT_SUPPORTED)
        if link >= len(card.links):
            raise NVMLError(INVALID_ARGUMENT)
        return 1 if card.links[link].active else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._card(h).links[link].remote_bus_id.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        return self._card(h).links[link].remote_type

    def nvmlDeviceGetP2PStatus(self, h1: int, h2: int, index: int) -> int:
        if not isinstance(index, int):  # the real binding fails on the one-element tuple
            raise TypeError("p2pIndex must be an int")
        a, b = self._card(h1), self._card(h2)
        if index == self.NVML_P2P_CAPS_INDEX_NVLINK:
            linked = any(l.active and l.remote_bus_id == b.bus_id for l in a.links)
            return self.NVML_P2P_STATUS_OK if linked else self.NVML_P2P_STATUS_NOT_SUPPORTED
        return self.NVML_P2P_STATUS_OK

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: int, h2: int) -> int:
        self._card(h1)
        self._card(h2)
        if h1 == h2:
            raise NVMLError(NOT_SUPPORTED)  # as on the real H200
        label = self.ancestor(h1, h2)
        if label is None:
            raise NVMLError(NOT_SUPPORTED)
        return TOPO[label]


# -- machines ---------------------------------------------------------------------------------------


def bus(i: int) -> str:
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


def switch_bus(k: int) -> str:
    return f"00000000:{0xA0 + k:02X}:00.0"


def hgx_8(**card_kwargs: Any) -> list[FakeCard]:
    """8 H200 on an HGX board: 18 links each, all to NVSwitches; 2 sockets, cards 0-3 on node 0."""
    cards = []
    for i in range(8):
        node = 0 if i < 4 else 1
        cards.append(
            FakeCard(
                bus_id=bus(i),
                numa_node=node,
                cpus=list(range(node * 48, node * 48 + 48)),
                links=[FakeLink(switch_bus(k % 4), remote_type=2) for k in range(18)],
                **card_kwargs,
            )
        )
    return cards


def hgx_ancestor(i: int, j: int) -> str:
    return "NODE" if (i < 4) == (j < 4) else "SYS"


def pcie_4_two_sockets() -> tuple[list[FakeCard], Callable[[int, int], str]]:
    """4 PCIe cards: 0-1 behind one switch (PIX), 2-3 behind two levels of switches (PXB), the pairs on
    different sockets (SYS); 0 and 1 also joined by a 4-link NVLink bridge. One node per socket."""
    cards = [
        FakeCard(bus_id=bus(i), numa_node=i // 2, cpus=list(range((i // 2) * 16, (i // 2) * 16 + 16)))
        for i in range(4)
    ]
    cards[0].links = [FakeLink(bus(1)) for _ in range(4)]
    cards[1].links = [FakeLink(bus(0)) for _ in range(4)]

    def ancestor(i: int, j: int) -> str:
        a, b = sorted((i, j))
        if (a, b) == (0, 1):
            return "PIX"
        if (a, b) == (2, 3):
            return "PXB"
        return "SYS"

    return cards, ancestor


def make_module(cards: list[FakeCard], ancestor: Callable[[int, int], str | None] | None = None, **kw: Any) -> FakeNvmlModule:
    return FakeNvmlModule(cards, ancestor, **kw)
