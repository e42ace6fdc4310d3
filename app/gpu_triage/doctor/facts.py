"""Gathering the facts the doctor judges: the only place that talks to NVML, psutil, sysfs, the
environment and torch.

Why a separate step: the checks (checks.py) are pure functions of a :class:`Facts` object, so tests build
machines that do not exist here (8 NVLinked H200, two sockets, a card at x8) by faking only the outside —
an NVML module, a psutil module, a sysfs folder, an environment dict — and run this code for real.

Every value the hardware does not give stays ``None`` (shown "n/a"), never 0.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_triage.hostmeta import training_env
from gpu_triage.nvmlwrap import GpuLost, Nvml, NvmlUnavailable, cuda_version_text, load_nvml
from gpu_triage.safetext import clean
from gpu_triage.topology import bus_id_of, topology_matrix

log = logging.getLogger(__name__)


def _psutil_errors(psutil_mod: Any) -> tuple[type[BaseException], ...]:
    """What psutil raises for a process that is gone, not ours or in another pid namespace."""
    names = ("Error", "NoSuchProcess", "AccessDenied", "ZombieProcess")
    return (OSError, *(getattr(psutil_mod, n) for n in names if isinstance(getattr(psutil_mod, n, None), type)))


@dataclass(slots=True)
class GpuProcess:
    pid: int
    used_bytes: int | None = None
    name: str | None = None
    username: str | None = None
    uid: int | None = None  # None: the process is not visible from here (another container, no permission)


@dataclass(slots=True)
class GpuFacts:
    index: int
    name: str | None = None
    bus_id: str | None = None
    mem_total_bytes: int | None = None
    mem_used_bytes: int | None = None
    persistence: bool | None = None
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    ecc_uncorrected: int | None = None  # volatile: since the last driver load
    clock_reasons: int | None = None  # bit mask of nvmlClocksEventReason*
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    processes: list[GpuProcess] | None = None  # None: NVML would not list them
    numa_node: int | None = None
    cpus: list[int] | None = None  # the cores close to the card
    lost: bool = False


@dataclass(slots=True)
class HostFacts:
    hostname: str | None = None
    kernel: str | None = None
    cpu_logical: int | None = None
    cpu_physical: int | None = None
    cpu_usable: int | None = None  # cores this process may run on (cgroups, taskset)
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    numa_nodes: dict[int, list[int]] = field(default_factory=dict)  # node -> its cores


@dataclass(slots=True)
class SoftwareFacts:
    python: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None  # the CUDA version torch was built with
    torch_cuda_available: bool | None = None
    nccl_version: str | None = None
    torch_note: str | None = None  # why the torch facts are missing
    env: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Facts:
    gpus: list[GpuFacts] = field(default_factory=list)
    gpu_error: str | None = None  # why no GPU could be read (no driver, no cards)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    topology: list[list[str]] = field(default_factory=list)
    host: HostFacts = field(default_factory=HostFacts)
    software: SoftwareFacts = field(default_factory=SoftwareFacts)
    uid: int | None = None
    username: str | None = None


# -- NVML -------------------------------------------------------------------------------------------


def _mask_to_cpus(words: Any) -> list[int] | None:
    if words is None:
        return None
    cpus = [w * 64 + bit for w, word in enumerate(list(words)) for bit in range(64) if int(word) >> bit & 1]
    return cpus or None


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` (the kernel's cpulist format) -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _pci_numa(sysfs: Path, bus_id: str | None) -> tuple[int | None, list[int] | None]:
    """The card's NUMA node and nearby cores from /sys/bus/pci/devices/<bus id>/ (-1 means none)."""
    if bus_id is None:
        return None, None
    dev = sysfs / "bus" / "pci" / "devices" / bus_id
    node_text = _read(dev / "numa_node")
    node = int(node_text) if node_text and node_text.lstrip("-").isdigit() and int(node_text) >= 0 else None
    cpus_text = _read(dev / "local_cpulist")
    cpus = parse_cpulist(cpus_text) if cpus_text else None
    return node, cpus or None


def _process_owner(psutil_mod: Any, pid: int) -> tuple[str | None, str | None, int | None]:
    try:
        proc = psutil_mod.Process(pid)
        return proc.name(), proc.username(), proc.uids().real
    except _psutil_errors(psutil_mod) as exc:  # gone, not ours, another pid namespace: "not visible"
        log.debug("pid %d on a GPU is not visible from here: %s", pid, exc)
        return None, None, None


def _gpu_processes(nvml: Nvml, handle: Any, psutil_mod: Any) -> list[GpuProcess] | None:
    compute = nvml.call("nvmlDeviceGetComputeRunningProcesses", handle)
    graphics = nvml.call("nvmlDeviceGetGraphicsRunningProcesses", handle)
    if compute is None and graphics is None:
        return None
    seen: dict[int, GpuProcess] = {}
    for p in list(compute or []) + list(graphics or []):
        pid = int(p.pid)
        used = getattr(p, "usedGpuMemory", None)
        if pid in seen:
            continue
        name, user, uid = _process_owner(psutil_mod, pid)
        seen[pid] = GpuProcess(pid=pid, used_bytes=int(used) if isinstance(used, int) else None,
                               name=name, username=user, uid=uid)
    return list(seen.values())


def _gpu_facts(nvml: Nvml, index: int, handle: Any, psutil_mod: Any, sysfs: Path, cpu_words: int) -> GpuFacts:
    g = GpuFacts(index=index)
    try:
        g.name = nvml.text("nvmlDeviceGetName", handle)
        g.bus_id = bus_id_of(nvml, handle)
        mem = nvml.call("nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            g.mem_total_bytes, g.mem_used_bytes = int(mem.total), int(mem.used)
        pm = nvml.call("nvmlDeviceGetPersistenceMode", handle)
        g.persistence = None if pm is None else bool(pm)
        mig = nvml.call("nvmlDeviceGetMigMode", handle)
        if mig is not None:
            g.mig_enabled, g.mig_pending = bool(mig[0]), bool(mig[1])
        g.ecc_uncorrected = nvml.call(
            "nvmlDeviceGetTotalEccErrors",
            handle,
            getattr(nvml.m, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
            getattr(nvml.m, "NVML_VOLATILE_ECC", 0),
        )
        reasons = nvml.call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:
            reasons = nvml.call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        g.clock_reasons = reasons
        g.pcie_gen = nvml.call("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        g.pcie_gen_max = nvml.call("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        g.pcie_width = nvml.call("nvmlDeviceGetCurrPcieLinkWidth", handle)
        g.pcie_width_max = nvml.call("nvmlDeviceGetMaxPcieLinkWidth", handle)
        g.processes = _gpu_processes(nvml, handle, psutil_mod)
        g.numa_node = nvml.call("nvmlDeviceGetNumaNodeId", handle)
        g.cpus = _mask_to_cpus(nvml.call("nvmlDeviceGetCpuAffinity", handle, cpu_words))
    except GpuLost:
        g.lost = True
        return g
    if g.numa_node is None or g.cpus is None:
        node, cpus = _pci_numa(sysfs, g.bus_id)
        g.numa_node = g.numa_node if g.numa_node is not None else node
        g.cpus = g.cpus if g.cpus is not None else cpus
    return g


def gather_gpus(facts: Facts, nvml_module: Any | None, psutil_mod: Any, sysfs: Path) -> None:
    """Fill the GPU part of ``facts``; on no driver, set ``facts.gpu_error`` and leave the rest empty."""
    try:
        nvml = load_nvml(nvml_module)
    except NvmlUnavailable as exc:
        facts.gpu_error = str(exc)
        return
    try:
        facts.driver_version = nvml.text("nvmlSystemGetDriverVersion")
        facts.cuda_driver_version = cuda_version_text(nvml.call("nvmlSystemGetCudaDriverVersion"))
        count = nvml.call("nvmlDeviceGetCount") or 0
        handles = []
        for i in range(count):
            h = nvml.call("nvmlDeviceGetHandleByIndex", i)
            if h is not None:
                handles.append((i, h))
        if not handles:
            facts.gpu_error = "NVML started but lists no GPU (CUDA_VISIBLE_DEVICES does not apply to NVML)"
            return
        cpu_words = max(1, ((facts.host.cpu_logical or os.cpu_count() or 64) + 63) // 64)
        facts.gpus = [_gpu_facts(nvml, i, h, psutil_mod, sysfs, cpu_words) for i, h in handles]
        facts.topology = topology_matrix(nvml, [h for _, h in handles])
    finally:
        nvml.shutdown()


# -- host -------------------------------------------------------------------------------------------


def gather_host(psutil_mod: Any, sysfs: Path) -> HostFacts:
    host = HostFacts(hostname=clean(socket.gethostname()), kernel=platform.release())
    host.cpu_logical = psutil_mod.cpu_count(logical=True)
    host.cpu_physical = psutil_mod.cpu_count(logical=False)
    no_affinity: tuple[type[BaseException], ...] = (AttributeError, *_psutil_errors(psutil_mod))
    try:
        host.cpu_usable = len(psutil_mod.Process().cpu_affinity())
    except no_affinity as exc:  # no cpu_affinity on macOS
        log.debug("CPU affinity n/a (%s): counting every core as usable", exc)
        host.cpu_usable = host.cpu_logical
    vm = psutil_mod.virtual_memory()
    host.mem_total_bytes, host.mem_available_bytes = int(vm.total), int(vm.available)
    node_root = sysfs / "devices" / "system" / "node"
    try:
        entries = sorted(node_root.glob("node[0-9]*"))
    except OSError:
        entries = []
    for entry in entries:
        text = _read(entry / "cpulist")
        if text is not None and entry.name[4:].isdigit():
            host.numa_nodes[int(entry.name[4:])] = parse_cpulist(text)
    return host


# -- software ---------------------------------------------------------------------------------------

_TORCH_PROBE = """
import json, platform, sys
out = {"python": platform.python_version(), "executable": sys.executable}
try:
    import torch
except Exception as exc:
    out["note"] = "torch is not importable here: " + type(exc).__name__
else:
    out["version"] = str(torch.__version__)
    out["cuda"] = getattr(torch.version, "cuda", None)
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
    except Exception:
        out["cuda_available"] = None
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)
    except Exception:
        out["nccl"] = None
print(json.dumps(out))
"""


def probe_torch(
    python: str = sys.executable, timeout_s: float = 120.0, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Ask a child Python for torch's versions: importing torch takes seconds and hundreds of MB, and a
    broken CUDA install can crash the importer, so it never happens inside gpu-triage itself."""
    try:
        done = subprocess.run(
            [python, "-c", _TORCH_PROBE],
            capture_output=True,
            text=True,
            errors="replace",  # a wrapper printing non-UTF-8 bytes was a UnicodeDecodeError traceback
            timeout=timeout_s,
            env=dict(env) if env is not None else None,
        )
    except subprocess.TimeoutExpired:
        return {"note": f"importing torch took more than {timeout_s:.0f} s"}
    except OSError as exc:
        return {"note": f"could not start {python}: {exc}"}
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else {"note": f"the torch probe exited {done.returncode}"}
    except json.JSONDecodeError:
        return {"note": "the torch probe printed something unexpected"}


def gather_software(env: Mapping[str, str], torch_probe: Callable[[], dict[str, Any]] | None) -> SoftwareFacts:
    sw = SoftwareFacts(python=platform.python_version(), env=training_env(env))
    if torch_probe is None:
        sw.torch_note = "torch not checked"
        return sw
    found = torch_probe()
    sw.torch_version = found.get("version")
    sw.torch_cuda = found.get("cuda")
    sw.torch_cuda_available = found.get("cuda_available")
    sw.nccl_version = found.get("nccl")
    sw.torch_note = found.get("note")
    if found.get("executable") and found.get("executable") != sys.executable:
        sw.python = f"{found.get('python')} ({found['executable']})"
    return sw


# -- everything -------------------------------------------------------------------------------------


def gather_facts(
    nvml_module: Any | None = None,
    psutil_module: Any | None = None,
    env: Mapping[str, str] | None = None,
    sysfs: Path = Path("/sys"),
    torch_probe: Callable[[], dict[str, Any]] | None = probe_torch,
    uid: int | None = None,
) -> Facts:
    """Read this machine. ``nvml_module=None`` imports pynvml; tests pass fakes of the outside world."""
    if psutil_module is None:
        import psutil as psutil_module  # noqa: PLC0415 - a dependency, imported here so tests can swap it
    env = os.environ if env is None else env
    uid = os.getuid() if uid is None else uid
    facts = Facts(uid=uid)
    try:
        import pwd  # noqa: PLC0415 - POSIX only

        facts.username = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        facts.username = None
    facts.host = gather_host(psutil_module, sysfs)
    gather_gpus(facts, nvml_module, psutil_module, sysfs)
    facts.software = gather_software(env, torch_probe)
    return facts
