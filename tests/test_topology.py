"""topology_matrix against fake NVML machines: the labels nvidia-smi topo -m would print."""

from __future__ import annotations

from fake_nvml import (
    FakeCard,
    FakeLink,
    FakeNvml,
    bus,
    h200_box,
    pcie_switch_two_socket_box,
)
from gpu_triage.nvmlwrap import load_nvml
from gpu_triage.topology import (
    nccl_level_for,
    normalise_bus_id,
    nvlink_count,
    path_rank,
    topology_matrix,
)


def _matrix(fake: FakeNvml, lose: tuple[int, ...] = ()) -> list[list[str]]:
    """The matrix over every card's handle; ``lose`` cards fall off the bus after their handles were taken."""
    nvml = load_nvml(fake)
    handles = [fake.nvmlDeviceGetHandleByIndex(i) for i in range(len(fake.cards))]
    for index in lose:
        fake.lose_card(index)
    return topology_matrix(nvml, handles)


def test_hgx_all_pairs_nv18_through_nvswitch() -> None:
    fake = h200_box(8)
    fake.legacy_bytes = True  # older bindings return busId as bytes: read the same
    m = _matrix(fake)
    assert len(m) == 8 and all(len(row) == 8 for row in m)
    for i in range(8):
        for j in range(8):
            assert m[i][j] == ("X" if i == j else "NV18")


def test_pcie_switches_and_sockets_with_an_nvlink_bridge() -> None:
    m = _matrix(pcie_switch_two_socket_box())
    assert m == [
        ["X", "NV4", "SYS", "SYS"],
        ["NV4", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "PXB"],
        ["SYS", "SYS", "PXB", "X"],
    ]


def test_ancestor_levels_map_to_nvidia_smi_labels() -> None:
    levels = {(0, 1): "PIX", (0, 2): "PXB", (0, 3): "PHB", (1, 2): "NODE", (1, 3): "SYS", (2, 3): None}
    cards = [FakeCard() for _ in range(4)]
    m = _matrix(FakeNvml(cards, ancestor=lambda i, j: levels[tuple(sorted((i, j)))]))
    assert [m[0][1], m[0][2], m[0][3], m[1][2], m[1][3]] == ["PIX", "PXB", "PHB", "NODE", "SYS"]
    assert m[2][3] == m[3][2] == "n/a"  # unsupported is n/a, never a guess


def test_inactive_links_are_not_counted() -> None:
    cards = [
        FakeCard(pcie_path=("socket0", "hostbridge0"), links=[FakeLink(bus(1)), FakeLink(bus(1), active=False)]),
        FakeCard(pcie_path=("socket1", "hostbridge1"), links=[FakeLink(bus(0)), FakeLink(bus(0), active=False)]),
    ]
    assert _matrix(FakeNvml(cards))[0][1] == "NV1"


def test_lost_card_gives_na_and_the_others_keep_their_labels() -> None:
    cards = [FakeCard(pcie_path=("socket0", "hostbridge0", "switch0", f"switch0{i}")) for i in range(3)]
    m = _matrix(FakeNvml(cards), lose=(2,))
    assert m[0][1] == "PXB"
    assert m[0][2] == m[2][1] == "n/a"


def test_single_card_is_just_x() -> None:
    assert _matrix(FakeNvml([FakeCard()])) == [["X"]]


def test_label_helpers() -> None:
    assert normalise_bus_id(b"00000000:17:00.0") == "0000:17:00.0"
    assert normalise_bus_id("0000:17:00.0") == "0000:17:00.0"
    assert normalise_bus_id(None) is None
    assert nvlink_count("NV18") == 18 and nvlink_count("NODE") is None and nvlink_count("NV") is None
    assert path_rank("NV12") < path_rank("PIX") < path_rank("PXB") < path_rank("PHB") < path_rank("SYS")
    assert path_rank("n/a") is None
    assert nccl_level_for("NODE") == "PHB" and nccl_level_for("NV18") == "NVL"


def test_without_nvlink_the_pcie_tree_gives_the_label() -> None:
    m = _matrix(h200_box(4, nvlink_links=0))  # each card behind its own host bridge, two per socket
    assert [m[0][1], m[0][2], m[1][3], m[2][3]] == ["NODE", "SYS", "SYS", "NODE"]
    same_bridge = [FakeCard(pcie_path=("socket0", "hostbridge0")) for _ in range(2)]
    assert _matrix(FakeNvml(same_bridge))[0][1] == "PHB"
