"""The doctor on machines that do not exist here: fake NVML modules, a fake psutil, a fake sysfs tree and an
environment dict are the outside world; gathering, checks and the report run for real."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fake_nvml import (
    GIB,
    NVML_ERROR_DRIVER_NOT_LOADED,
    FakeCard,
    FakeNvml,
    FakeProcess,
    h200_box,
    pcie_switch_two_socket_box,
)
from gpu_triage.doctor.checks import REGISTRY
from gpu_triage.doctor.facts import parse_cpulist, probe_torch
from gpu_triage.doctor.gpu_checks import REASON_HW_SLOWDOWN, REASON_IDLE, REASON_SW_POWER_CAP
from gpu_triage.doctor.registry import worst
from gpu_triage.doctor.run import JSON_KEYS, Report, collect_report

ME = 1000


class FakePsutilProcess:
    def __init__(self, owner: FakePsutil, pid: int | None) -> None:
        if pid is not None and pid not in owner.procs:
            raise owner.NoSuchProcess(pid)
        self.info = owner.procs.get(pid, ("python", "me", ME))
        self.cores = owner.cores

    def name(self) -> str:
        return self.info[0]

    def username(self) -> str:
        return self.info[1]

    def uids(self) -> SimpleNamespace:
        return SimpleNamespace(real=self.info[2], effective=self.info[2], saved=self.info[2])

    def cpu_affinity(self) -> list[int]:
        return list(range(self.cores))


class FakePsutil:
    """The few psutil calls the doctor makes, on a machine of ``cores`` cores."""

    class NoSuchProcess(Exception):
        pass

    def __init__(self, cores: int = 96, mem_gib: float = 2048, avail_gib: float = 1900,
                 procs: dict[int, tuple[str, str, int]] | None = None) -> None:
        self.cores = cores
        self.mem = int(mem_gib * GIB)
        self.avail = int(avail_gib * GIB)
        self.procs = procs or {}

    def cpu_count(self, logical: bool = True) -> int:
        return self.cores if logical else self.cores // 2

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(total=self.mem, available=self.avail)

    def Process(self, pid: int | None = None) -> FakePsutilProcess:  # noqa: N802 - psutil's name
        return FakePsutilProcess(self, pid)


def sysfs_with_nodes(root: Path, nodes: dict[int, str], cards: dict[str, tuple[int, str]] | None = None) -> Path:
    for n, cpulist in nodes.items():
        d = root / "devices" / "system" / "node" / f"node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
    for bus_id, (node, cpus) in (cards or {}).items():
        d = root / "bus" / "pci" / "devices" / bus_id
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{node}\n")
        (d / "local_cpulist").write_text(cpus + "\n")
    return root


def report_for(module, tmp_path: Path, env: dict[str, str] | None = None, psutil=None, params: float | None = None,
               nodes: dict[int, str] | None = None, pci: dict[str, tuple[int, str]] | None = None) -> Report:
    sysfs = sysfs_with_nodes(tmp_path / "sys", nodes or {0: "0-95"}, pci)
    return collect_report(
        params=params,
        nvml_module=module,
        psutil_module=psutil or FakePsutil(),
        env=env or {},
        sysfs=sysfs,
        torch_probe=lambda: {"version": "2.5.1", "cuda": "12.4", "cuda_available": True, "nccl": "2.21.5"},
    )


def status(report: Report, check_id: str) -> str:
    check = report.check(check_id)
    assert check is not None, f"{check_id} missing from {[c.id for c in report.checks]}"
    return check.status


TWO_NODES = {0: "0-47", 1: "48-95"}


# -- topology verdicts ------------------------------------------------------------------------------


def test_eight_cards_all_nvlink_is_healthy(tmp_path: Path) -> None:
    r = report_for(h200_box(8), tmp_path, nodes=TWO_NODES)
    assert r.topology.verdict == "all_nvlink"
    assert r.topology.nccl_level == "NVL"
    assert r.topology.bandwidth_gbps == pytest.approx(450)
    assert status(r, "topology.links") == "ok"
    assert r.status == "ok" and r.exit_code == 0, [c for c in r.checks if c.status != "ok"]


def test_pcie_switches_and_sockets_give_a_mixed_verdict_and_sys_level(tmp_path: Path) -> None:
    r = report_for(pcie_switch_two_socket_box(), tmp_path, nodes={0: "0-15", 1: "16-31"}, psutil=FakePsutil(cores=32))
    assert r.topology.verdict == "mixed"
    assert r.topology.slowest == "SYS"
    assert r.topology.nccl_level == "SYS"
    links = r.check("topology.links")
    assert links.status == "warn" and "slowest SYS" in links.summary
    # The slowest pairs are the ones across sockets; gen5 x16 is ~63 GB/s, half of it across sockets.
    assert sorted(r.topology.slowest_pairs) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert r.topology.bandwidth_gbps == pytest.approx(3.938 * 16 * 0.5)


def test_pcie_only_machine_within_one_switch_tree_recommends_pxb(tmp_path: Path) -> None:
    cards = [FakeCard(pcie_path=("socket0", "hostbridge0", "switch0", f"switch0{i // 2}")) for i in range(4)]
    r = report_for(FakeNvml(cards), tmp_path)
    assert r.topology.verdict == "mixed"  # PIX pairs next to PXB pairs
    assert r.topology.nccl_level == "PXB"
    assert status(r, "topology.nccl_p2p_level") == "ok"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("PIX", "warn"), ("NVL", "warn"), ("SYS", "ok"), ("5", "ok"), ("2", "warn"), ("NODE", "warn"), ("fast", "warn")],
)
def test_nccl_p2p_level_from_the_environment_must_allow_every_pair(tmp_path: Path, value: str, expected: str) -> None:
    r = report_for(pcie_switch_two_socket_box(), tmp_path, env={"NCCL_P2P_LEVEL": value})
    check = r.check("topology.nccl_p2p_level")
    assert check.status == expected, check
    if expected == "warn":
        assert "SYS" in check.advice  # says what fits
    assert check.data["env"] == value


def test_nccl_p2p_disable_on_nvlink_is_warned(tmp_path: Path) -> None:
    r = report_for(h200_box(8), tmp_path, env={"NCCL_P2P_DISABLE": "1"})
    assert status(r, "topology.nccl_p2p_level") == "warn"


# -- host -------------------------------------------------------------------------------------------


def test_two_numa_nodes_from_nvml_affinity(tmp_path: Path) -> None:
    r = report_for(h200_box(8), tmp_path, nodes=TWO_NODES)
    numa = r.check("host.numa")
    assert numa.data["cards"]["0"] == {"node": 0, "cpus": "0-47"}
    assert numa.data["cards"]["7"] == {"node": 1, "cpus": "48-95"}
    assert "node 0: cards 0,1,2,3" in numa.summary and "node 1: cards 4,5,6,7" in numa.summary
    assert "numactl" in numa.advice


def test_numa_falls_back_to_sysfs_when_nvml_does_not_say(tmp_path: Path) -> None:
    cards = [FakeCard(numa_node=None, cpus=None, pcie_path=(f"socket{i}", f"hostbridge{i}")) for i in range(2)]
    pci = {"0000:18:00.0": (0, "0-15"), "0000:28:00.0": (1, "16-31")}
    r = report_for(FakeNvml(cards), tmp_path, nodes={0: "0-15", 1: "16-31"}, pci=pci)
    assert [(g.numa_node, g.cpus[0]) for g in r.facts.gpus] == [(0, 0), (1, 16)]


def test_num_workers_range_divides_the_cores_among_the_ranks(tmp_path: Path) -> None:
    r = report_for(h200_box(8), tmp_path, psutil=FakePsutil(cores=96))
    cpu = r.check("host.cpu")
    assert cpu.data["num_workers_per_rank"] == [3, 6]  # 96/4/8 .. 96/2/8
    assert cpu.status == "ok"
    starved = report_for(h200_box(8), tmp_path / "b", psutil=FakePsutil(cores=16))
    assert starved.check("host.cpu").status == "warn"  # 2 cores per card


# -- cards ------------------------------------------------------------------------------------------


def test_card_at_x8_fails_and_the_exit_code_says_so(tmp_path: Path) -> None:
    fake = h200_box(8)
    fake.cards[5].pcie_width = 8
    r = report_for(fake, tmp_path)
    pcie = r.check("gpu.pcie")
    assert pcie.status == "fail" and "card 5 x8 of x16" in pcie.summary
    assert r.exit_code == 1


def test_lower_pcie_generation_at_full_width_says_check_under_load(tmp_path: Path) -> None:
    fake = h200_box(8)
    fake.cards[2].pcie_gen = 1  # an idle card saving power
    r = report_for(fake, tmp_path)
    pcie = r.check("gpu.pcie")
    assert pcie.status == "warn" and "under load" in pcie.advice
    assert r.exit_code == 0


def test_leftover_memory_without_a_process_is_flagged(tmp_path: Path) -> None:
    fake = h200_box(8)
    fake.cards[3].mem_used = 40 * GIB
    fake.cards[4].mem_used = 40 * GIB
    fake.cards[4].processes = [FakeProcess(4242, usedGpuMemory=40 * GIB)]  # held by a live process: not a leftover
    psutil = FakePsutil(procs={4242: ("python", "me", ME)})
    r = report_for(fake, tmp_path, psutil=psutil)
    mem = r.check("gpu.memory")
    assert mem.status == "warn"
    assert "card 3" in mem.summary and "card 4" not in mem.summary


def test_other_users_processes_are_warned_and_own_are_not(tmp_path: Path) -> None:
    fake = h200_box(8)
    fake.cards[0].processes = [FakeProcess(100, usedGpuMemory=10 * GIB)]
    fake.cards[1].processes = [FakeProcess(200, usedGpuMemory=10 * GIB)]
    psutil = FakePsutil(procs={100: ("python", "me", ME), 200: ("python", "alice", 1001)})
    from gpu_triage.doctor.facts import gather_facts
    from gpu_triage.doctor.run import build_report

    facts = gather_facts(fake, psutil, env={}, sysfs=tmp_path, torch_probe=None, uid=ME)
    r = build_report(facts)
    procs = r.check("gpu.processes")
    assert procs.status == "warn" and "alice" in procs.summary
    assert procs.data["other_users"] == [{"card": 1, "pid": 200, "user": "alice", "used_bytes": 10 * GIB}]
    assert [p["pid"] for p in procs.data["yours"]] == [100]


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        (REASON_IDLE, "ok"),
        (0x2, "ok"),
        (REASON_SW_POWER_CAP, "warn"),
        (REASON_HW_SLOWDOWN, "fail"),
        (0x80, "fail"),
        (0x40, "fail"),
    ],
)
def test_clock_event_reasons(tmp_path: Path, reasons: int, expected: str) -> None:
    fake = h200_box(8)
    fake.cards[6].clock_reasons = reasons
    assert status(report_for(fake, tmp_path), "gpu.clocks") == expected


def test_uncorrected_ecc_fails_and_unsupported_fields_are_na_not_zero(tmp_path: Path) -> None:
    fake = h200_box(8, ecc_uncorrected=None, persistence=None)
    fake.cards[1].ecc_uncorrected = 3
    r = report_for(fake, tmp_path)
    assert status(r, "gpu.ecc") == "fail"
    assert r.check("gpu.ecc").data["volatile_uncorrected"]["0"] is None
    assert r.check("gpu.persistence").summary == "persistence mode n/a"


def test_persistence_off_and_mig_on_are_warned(tmp_path: Path) -> None:
    fake = h200_box(8)
    fake.cards[0].persistence = 0
    fake.cards[1].mig = [1, 1]
    r = report_for(fake, tmp_path)
    assert status(r, "gpu.persistence") == "warn"
    assert status(r, "gpu.mig") == "warn" and "card 1" in r.check("gpu.mig").summary


# -- gradient traffic -------------------------------------------------------------------------------


def test_gradient_traffic_estimate_over_nvlink_and_over_sys(tmp_path: Path) -> None:
    nv = report_for(h200_box(8), tmp_path / "a", params=7e9).check("traffic.gradients")
    assert nv.data["bytes_fp32"] == pytest.approx(56e9)
    assert nv.data["seconds_fp32"] == pytest.approx(56e9 / 450e9)
    assert nv.data["seconds_mixed"] == pytest.approx(28e9 / 450e9)
    assert nv.status == "ok"
    sys_ = report_for(pcie_switch_two_socket_box(), tmp_path / "b", params=7e9).check("traffic.gradients")
    assert sys_.data["seconds_mixed"] == pytest.approx(28e9 / (3.938 * 16 * 0.5 * 1e9))
    assert sys_.status == "warn"


# -- no driver --------------------------------------------------------------------------------------


def test_no_driver_still_checks_host_and_software_and_fails(tmp_path: Path) -> None:
    module = FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    r = report_for(module, tmp_path, env={"NCCL_DEBUG": "INFO", "CUDA_LAUNCH_BLOCKING": "1"}, params=7e9)
    ids = [c.id for c in r.checks]
    assert ids[0] == "gpu.driver" and not any(i.startswith("gpu.") for i in ids[1:])
    assert r.check("gpu.driver").status == "fail" and "no GPU found" in r.check("gpu.driver").summary
    for cid in ("host.cpu", "host.memory", "host.numa", "software.torch", "software.env", "traffic.gradients"):
        assert cid in ids
    assert r.check("software.env").status == "warn"  # CUDA_LAUNCH_BLOCKING left on
    assert r.exit_code == 1


def test_json_keys_are_stable(tmp_path: Path) -> None:
    for module in (h200_box(8), FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED)):
        obj = json.loads(
            json.dumps(report_for(module, tmp_path / str(id(module)), params=1e9).to_json_obj(), default=str)
        )
        assert tuple(obj) == JSON_KEYS
        for check in obj["checks"]:
            assert list(check) == ["id", "status", "summary", "advice", "data"]
            assert check["status"] in ("ok", "warn", "fail", "skip")
        assert {"matrix", "verdict", "nccl_p2p_level", "slowest", "bandwidth_gbps"} <= set(obj["topology"])
        assert {"cpu_logical", "mem_total_bytes", "numa_nodes"} <= set(obj["host"])


# -- the outside, read for real ---------------------------------------------------------------------


def test_torch_probe_reads_a_fake_torch_in_a_child_python(tmp_path: Path) -> None:
    pkg = tmp_path / "torch"
    (pkg / "cuda").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from types import SimpleNamespace\n__version__ = '9.9.0'\nversion = SimpleNamespace(cuda='12.8')\n"
        "from torch import cuda\n"
    )
    (pkg / "cuda" / "__init__.py").write_text(
        "from types import SimpleNamespace\ndef is_available():\n    return False\n"
        "nccl = SimpleNamespace(version=lambda: (2, 27, 3))\n"
    )
    found = probe_torch(env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert found["version"] == "9.9.0" and found["cuda"] == "12.8"
    assert found["nccl"] == "2.27.3" and found["cuda_available"] is False


def test_torch_that_sees_no_gpu_on_a_gpu_machine_fails(tmp_path: Path) -> None:
    sysfs = sysfs_with_nodes(tmp_path / "sys", {0: "0-95"})
    r = collect_report(nvml_module=h200_box(8), psutil_module=FakePsutil(), env={}, sysfs=sysfs,
                       torch_probe=lambda: {"version": "2.5.1+cpu", "cuda": None, "cuda_available": False})
    assert status(r, "software.torch") == "fail"


def test_cpulist_parsing() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_every_registered_check_is_documented_once_and_runs_on_a_full_machine(tmp_path: Path) -> None:
    """The registry is the one list of check ids: each is documented in docs/doctor.md, and a full
    machine with --params runs them all, in registry order."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "doctor.md").read_text()
    ids = [spec.id for spec in REGISTRY]
    assert len(ids) == len(set(ids))
    assert [i for i in ids if f"`{i}`" not in doc] == []
    r = report_for(h200_box(8), tmp_path, params=7e9)
    assert [c.id for c in r.checks] == ids


def test_a_check_with_nothing_to_look_at_is_skip_not_ok_and_changes_no_status(tmp_path: Path) -> None:
    """Issue #13: "OK software.torch ... torch is not importable here" and "OK topology.links no GPU" read
    as passes. They are SKIP in text and JSON, and neither the report's status nor the exit code moves."""
    from gpu_triage.doctor.render import render_text

    no_torch = {"version": None, "note": "torch is not importable here: ModuleNotFoundError"}
    sysfs = sysfs_with_nodes(tmp_path / "sys", {0: "0-95"})
    r = collect_report(nvml_module=h200_box(8), psutil_module=FakePsutil(), env={}, sysfs=sysfs,
                       torch_probe=lambda: no_torch)
    assert status(r, "software.torch") == "skip"
    assert "SKIP  software.torch" in render_text(r)
    assert r.status == worst([c.status for c in r.checks if c.status != "skip"])
    assert r.exit_code == (1 if r.status == "fail" else 0)

    none = report_for(FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED), tmp_path / "none", params=7e9)
    assert [status(none, i) for i in ("topology.links", "topology.nccl_p2p_level", "traffic.gradients")] == [
        "skip"] * 3
    text = render_text(none)
    assert "SKIP  topology.links" in text and "OK    topology.links" not in text
    assert "skipped" in text.splitlines()[-1]
    obj = none.to_json_obj()
    assert {c["id"]: c["status"] for c in obj["checks"]}["topology.links"] == "skip"
    assert obj["status"] == "fail"  # gpu.driver; skips neither hide nor add a failure


def test_only_skips_and_oks_make_an_ok_report() -> None:
    assert worst(["skip", "skip"]) == "ok"
    assert worst(["skip", "ok", "warn"]) == "warn"
