"""How the cards are wired to each other, in the labels of ``nvidia-smi topo -m``.

The matrix is what people already read: ``X`` on the diagonal, ``NV#`` for a pair joined by # NVLink links,
else the PCIe path between them (``PIX`` one PCIe switch, ``PXB`` several switches, ``PHB`` through the CPU's
host bridge, ``NODE`` between host bridges of one NUMA node, ``SYS`` across CPU sockets). ``n/a`` when the
driver will not say (a lost card, a VM that hides the PCIe tree).

Why it matters: an all-reduce runs at the pace of its slowest pair, so one ``SYS`` pair among ``NV18`` pairs
sets the speed of every step; and ``NCCL_P2P_LEVEL`` must allow the paths the machine has.

Every NVML call goes through :meth:`gpu_triage.nvmlwrap.Nvml.call`, so unsupported calls become ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_triage.nvmlwrap import GpuLost, Nvml

# nvml.h values, used when the module object lacks the constant (older bindings, fakes).
_TOPOLOGY_LABELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_MAX_LINKS = 18  # NVLink 4 (H100/H200); the binding's NVML_NVLINK_MAX_LINKS is used when present
_DEVICE_TYPE_SWITCH = 2
_P2P_CAPS_INDEX_NVLINK = 2
_P2P_STATUS_OK = 0

#: Path labels from the fastest to the slowest (``NV#`` stands for any NVLink label).
PATH_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")

#: NCCL_P2P_LEVEL names, from the strictest to the loosest: P2P is used for paths up to this distance.
NCCL_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")

#: Per direction, per link, NVLink 2, 3 and 4 alike (V100 NV6 = 150, A100 NV12 = 300, H100/H200 NV18 = 450 GB/s).
NVLINK_GBPS_PER_LINK = 25.0


def is_nvlink(label: str) -> bool:
    """``NV18``, ``NV4``, ``NV`` are NVLink; ``NODE`` is not."""
    return label.startswith("NV") and label != "NODE"


def path_kind(label: str) -> str | None:
    """The label's class in :data:`PATH_ORDER` (``NV`` for every NVLink label); ``None`` for X and n/a."""
    if is_nvlink(label):
        return "NV"
    return label if label in PATH_ORDER else None


def path_rank(label: str) -> int | None:
    """0 for NVLink up to 5 for SYS: larger is slower. ``None`` when unknown."""
    kind = path_kind(label)
    return None if kind is None else PATH_ORDER.index(kind)


def nvlink_count(label: str) -> int | None:
    """The number in ``NV18``; ``None`` when the label is not NVLink or the count is unknown (``NV``)."""
    if not is_nvlink(label):
        return None
    digits = label[2:]
    return int(digits) if digits.isdigit() else None


def nccl_level_for(label: str) -> str | None:
    """The NCCL_P2P_LEVEL that lets NCCL use P2P over this path. nvidia-smi's NODE (two host bridges of
    one NUMA node) is what NCCL calls PHB."""
    kind = path_kind(label)
    if kind is None:
        return None
    return {"NV": "NVL", "PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}[kind]


def normalise_bus_id(raw: Any) -> str | None:
    """``00000000:17:00.0`` (NVML, bytes or str) and ``0000:17:00.0`` (sysfs) -> ``0000:17:00.0``."""
    if raw is None:
        return None
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    text = text.strip().strip("\x00").lower()
    if not text:
        return None
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    if ":" not in rest:  # no domain given: "17:00.0"
        return f"0000:{text}"
    return f"{int(domain, 16):04x}:{rest}" if _is_hex(domain) else text


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def bus_id_of(nvml: Nvml, handle: Any) -> str | None:
    """The card's PCI bus id, normalised; ``None`` when NVML does not give it."""
    info = nvml.call("nvmlDeviceGetPciInfo", handle)
    if info is None:
        return None
    return normalise_bus_id(getattr(info, "busId", None) or getattr(info, "busIdLegacy", None))


def _nvlink_links(nvml: Nvml, handles: Sequence[Any], bus_ids: list[str | None]) -> tuple[list[list[int]], list[int]]:
    """Active NVLink links per pair of cards, and per card the active links that end on an NVSwitch.

    On HGX boards (H100/H200) every link goes to an NVSwitch, so the remote end is the switch, not the
    peer card: such a pair is joined by min(switch links of each card), which is what nvidia-smi prints.
    """
    n = len(handles)
    index_of = {b: i for i, b in enumerate(bus_ids) if b is not None}
    direct = [[0] * n for _ in range(n)]
    switch = [0] * n
    max_links = int(getattr(nvml.m, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS))
    switch_type = getattr(nvml.m, "NVML_NVLINK_DEVICE_TYPE_SWITCH", _DEVICE_TYPE_SWITCH)
    enabled = getattr(nvml.m, "NVML_FEATURE_ENABLED", 1)
    for i, h in enumerate(handles):
        try:
            for link in range(max_links):
                state = nvml.call("nvmlDeviceGetNvLinkState", h, link)
                if state is None:  # no NVLink on this card, or past its last link
                    break
                if state != enabled:
                    continue
                remote = nvml.call("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                remote_id = None if remote is None else normalise_bus_id(
                    getattr(remote, "busId", None) or getattr(remote, "busIdLegacy", None)
                )
                j = index_of.get(remote_id) if remote_id is not None else None
                if j is not None and j != i:
                    direct[i][j] += 1
                elif nvml.call("nvmlDeviceGetNvLinkRemoteDeviceType", h, link) == switch_type:
                    switch[i] += 1
        except GpuLost:
            continue
    return direct, switch


def _pair_label(nvml: Nvml, h1: Any, h2: Any, direct: int, switch_links: int) -> str:
    if direct > 0:
        return f"NV{direct}"
    if switch_links > 0:
        return f"NV{switch_links}"
    try:
        nvlink_index = getattr(nvml.m, "NVML_P2P_CAPS_INDEX_NVLINK", _P2P_CAPS_INDEX_NVLINK)
        status = nvml.call("nvmlDeviceGetP2PStatus", h1, h2, nvlink_index)
        if status == getattr(nvml.m, "NVML_P2P_STATUS_OK", _P2P_STATUS_OK):
            return "NV"  # NVLink peer-to-peer works, but the driver did not tell how many links
        level = nvml.call("nvmlDeviceGetTopologyCommonAncestor", h1, h2)
    except GpuLost:
        return "n/a"
    if level is None:
        return "n/a"
    return _TOPOLOGY_LABELS.get(int(level), "n/a")


def topology_matrix(nvml: Nvml, handles: list) -> list[list[str]]:
    """The ``nvidia-smi topo -m`` matrix of these cards, rows and columns in the order of ``handles``.

    Symmetric by construction (each pair is asked once). A card that falls off the bus gives ``n/a``.
    Cost: a few NVML calls per card and per pair, read once (the topology does not change while running).
    """
    n = len(handles)
    bus_ids: list[str | None] = []
    for h in handles:
        try:
            bus_ids.append(bus_id_of(nvml, h))
        except GpuLost:
            bus_ids.append(None)
    direct, switch = _nvlink_links(nvml, handles, bus_ids)
    matrix = [["X" if i == j else "n/a" for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            label = _pair_label(
                nvml,
                handles[i],
                handles[j],
                direct=max(direct[i][j], direct[j][i]),
                switch_links=min(switch[i], switch[j]),
            )
            matrix[i][j] = matrix[j][i] = label
    return matrix
