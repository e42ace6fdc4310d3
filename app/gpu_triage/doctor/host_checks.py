"""The doctor's checks of the host and its software: CPU cores for the loader workers, host memory, NUMA
placement of the cards, torch, and environment variables that slow a job down."""

from __future__ import annotations

from gpu_triage.doctor.facts import Facts
from gpu_triage.doctor.registry import Finding, card_list, live_gpus, register
from gpu_triage.sources.stacks import StackAccess
from gpu_triage.units import fmt_bytes

# -- host -------------------------------------------------------------------------------------------


def workers_range(cores: int | None, ranks: int) -> tuple[int, int] | None:
    """DataLoader num_workers per rank: cores/4 to cores/2 over all ranks, at least 1."""
    if not cores:
        return None
    ranks = max(1, ranks)
    lo = max(1, cores // 4 // ranks)
    hi = max(lo, cores // 2 // ranks)
    return lo, hi


@register("host.cpu", "CPU cores and num_workers")
def check_cpu(facts: Facts) -> Finding:
    h = facts.host
    cores = h.cpu_usable or h.cpu_logical
    ranks = max(1, len(live_gpus(facts)))
    rng = workers_range(cores, ranks)
    data = {"logical": h.cpu_logical, "physical": h.cpu_physical, "usable": h.cpu_usable, "ranks": ranks,
            "num_workers_per_rank": list(rng) if rng else None}
    if rng is None:
        return Finding("warn", "CPU core count n/a", "set num_workers by trying 2, 4, 8 and watching the GPU", data)
    usable = "" if h.cpu_usable in (None, h.cpu_logical) else f", {h.cpu_usable} usable here"
    workers = str(rng[0]) if rng[0] == rng[1] else f"{rng[0]}-{rng[1]}"
    summary = (f"{h.cpu_logical} cores ({h.cpu_physical or 'n/a'} physical{usable}): num_workers {workers} per rank "
               f"for {ranks} rank(s)")
    if live_gpus(facts) and cores is not None and cores // ranks < 4:
        return Finding("warn", summary + f" - only {cores / ranks:.1f} cores per card",
                       "data loading will likely starve the cards: preprocess offline, decode on the GPU (DALI), or "
                       "use "
                       "fewer ranks per machine", data)
    return Finding("ok", summary,
                   "start in that range, pin_memory=True, persistent_workers=True, prefetch_factor 2-4", data)


@register("host.memory", "host memory")
def check_host_memory(facts: Facts) -> Finding:
    h = facts.host
    gpu_total = sum(g.mem_total_bytes or 0 for g in live_gpus(facts))
    data = {"total": h.mem_total_bytes, "available": h.mem_available_bytes, "gpu_total": gpu_total or None}
    if h.mem_total_bytes is None:
        return Finding("skip", "host memory n/a", "", data)
    summary = f"{fmt_bytes(h.mem_total_bytes)} RAM, {fmt_bytes(h.mem_available_bytes)} available"
    if h.mem_available_bytes is not None and h.mem_available_bytes < 0.1 * h.mem_total_bytes:
        return Finding("warn", summary + " (under 10 % free)",
                       "other jobs or a page cache that will not drop hold the memory: DataLoader workers and pinned "
                       "buffers may be killed (OOM)", data)
    if gpu_total and h.mem_total_bytes < gpu_total:
        return Finding("warn", summary + f", less than the cards' {fmt_bytes(gpu_total)}",
                       "loading a checkpoint or offloading optimizer state to the CPU will not fit: load shards, or "
                       "map "
                       "it (mmap=True)", data)
    return Finding("ok", summary, "", data)


@register("host.numa", "NUMA placement")
def check_numa(facts: Facts) -> Finding:
    h = facts.host
    gpus = live_gpus(facts)
    per_card = {str(g.index): {"node": g.numa_node, "cpus": _ranges(g.cpus)} for g in gpus}
    data = {"nodes": {str(k): _ranges(v) for k, v in h.numa_nodes.items()}, "cards": per_card}
    nodes = sorted({g.numa_node for g in gpus if g.numa_node is not None})
    if len(h.numa_nodes) <= 1 and len(nodes) <= 1:
        return Finding("ok", "one NUMA node: no placement to get wrong", "", data)
    if not gpus:
        return Finding("ok", f"{len(h.numa_nodes)} NUMA nodes", "", data)
    if not nodes:
        return Finding("ok", f"{len(h.numa_nodes)} NUMA nodes; the cards' nodes n/a (not reported)", "", data)
    groups = "; ".join(f"node {n}: {card_list([g.index for g in gpus if g.numa_node == n])} (cores "
                       f"{_ranges(h.numa_nodes.get(n)) or 'n/a'})" for n in nodes)
    return Finding("ok", f"{max(len(h.numa_nodes), len(nodes))} NUMA nodes - {groups}",
                   "bind each rank and its DataLoader workers to its card's node (numactl --cpunodebind=N "
                   "--membind=N), "
                   "so batches are not copied across sockets", data)


def _ranges(cpus: list[int] | None) -> str | None:
    """[0,1,2,3,8] -> "0-3,8"."""
    if not cpus:
        return None
    cpus = sorted(set(cpus))
    out: list[str] = []
    start = prev = cpus[0]
    ends: list[int | None] = [*cpus[1:], None]  # None closes the last range
    for c in ends:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(out)


# -- software ---------------------------------------------------------------------------------------


@register("software.torch", "Python, torch, NCCL")
def check_torch(facts: Facts) -> Finding:
    sw = facts.software
    data = {"python": sw.python, "torch": sw.torch_version, "torch_cuda": sw.torch_cuda,
            "cuda_available": sw.torch_cuda_available, "nccl": sw.nccl_version}
    if sw.torch_version is None:
        return Finding("skip", f"Python {sw.python}; {sw.torch_note or 'torch n/a'}",
                       "run the doctor with your training environment's Python to check its torch and NCCL", data)
    summary = (f"Python {sw.python}, torch {sw.torch_version} (CUDA {sw.torch_cuda or 'none'}), NCCL "
               f"{sw.nccl_version or 'n/a'}")
    if facts.gpus and sw.torch_cuda_available is False:
        return Finding("fail", summary + ": torch sees no GPU",
                       "a CPU-only torch wheel, or a driver older than the CUDA torch was built for: install the wheel "
                       "matching the driver", data)
    return Finding("ok", summary, "", data)


#: Variables that quietly cost speed when left set from a debugging session.
_SLOW_ENV = {
    "CUDA_LAUNCH_BLOCKING": "makes every kernel launch wait for the previous kernel: unset it outside debugging",
    "NCCL_SHM_DISABLE": "stops NCCL using shared memory between local ranks: "
                        "unset it unless a container lacks /dev/shm",
    "NCCL_ALGO": "forces one all-reduce algorithm: unset it unless you measured that it helps",
    "NCCL_PROTO": "forces one NCCL protocol: unset it unless you measured that it helps",
}


@register("software.env", "environment variables")
def check_env(facts: Facts) -> Finding:
    env = facts.software.env
    nccl = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    data = {"env": env}
    flagged = [(k, why) for k, why in _SLOW_ENV.items() if k in env and env[k].strip() not in ("", "0")]
    if flagged:
        k, why = flagged[0]
        names = ", ".join(f"{k}={env[k]}" for k, _ in flagged)
        return Finding("warn", f"set from debugging? {names}", f"{k} {why}", data)
    shown = ", ".join(f"{k}={v}" for k, v in nccl.items()) or "no NCCL_* variable set"
    return Finding("ok", shown, "", data)


_PTRACE_FIX = ("run gpu-triage as root or as the job's user with kernel.yama.ptrace_scope=0 (sysctl), or give it "
               "CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE)")
_LAUNCHER_FIX = ("start the job under gpu-triage: `gpu-triage run -- torchrun ...` (its ranks are read when they "
                 "import gpu_triage.pulse); or " + _PTRACE_FIX)


def stack_ways(acc: StackAccess) -> list[str]:
    """Which of root, the job's own user, and the launcher (`gpu-triage run`) would give the job's stacks here."""
    if acc.ptrace_scope == 3:
        return []
    ways = ["root"]
    if acc.ptrace_scope in (None, 0):
        ways.append("same user")
    if acc.ptrace_scope in (None, 0, 1):
        ways.append("launcher")  # under scope 1 the job names gpu-triage as its tracer (commands/launch.py)
    return ways


@register("software.stacks", "the job's stacks (py-spy)")
def check_stacks(facts: Facts) -> Finding:
    """Whether the dashboard can tell what a waiting job's threads are doing: py-spy found, and ptrace allowed
    on the job's processes (kernel.yama.ptrace_scope, CAP_SYS_PTRACE, root), and which of root, the job's own
    user and `gpu-triage run` would give them here."""
    acc = facts.software.stacks
    if acc is None:
        return Finding("skip", "not checked", "")
    ways = stack_ways(acc)
    data = {"py_spy": acc.pyspy, "euid": acc.euid, "cap_sys_ptrace": acc.cap_sys_ptrace,
            "ptrace_scope": acc.ptrace_scope, "stacks_with": ways}
    if acc.pyspy is None and acc.refused is not None:
        who = "root" if acc.euid == 0 else "this user"
        return Finding("warn", acc.refused, f"install py-spy where only {who} can write (pip install as {who}), or "
                       "set GPU_TRIAGE_PYSPY to such a copy: one that others can replace is not run", data)
    if acc.pyspy is None:
        return Finding("skip", "py-spy not installed: the verdict reads the job from outside only",
                       "pip install 'gpu-triage[stacks]' (or py-spy) to see what a waiting job's threads are doing",
                       data)
    if acc.ptrace_scope == 3:
        return Finding("warn", "kernel.yama.ptrace_scope=3: no process may read another's stacks, root included",
                       "ptrace_scope 3 lasts until a reboot; boot with kernel.yama.ptrace_scope=1 or lower", data)
    privileged = acc.euid == 0 or acc.cap_sys_ptrace is True
    if privileged and acc.ptrace_scope in (None, 0, 1, 2):
        return Finding("ok", f"py-spy reads every process's stacks ({'root' if acc.euid == 0 else 'CAP_SYS_PTRACE'})",
                       "", data)
    if acc.ptrace_scope in (None, 0):
        return Finding("ok", "py-spy reads this user's processes only (another user's job: run as root, or start "
                       "it with `gpu-triage run`)", "", data)
    if acc.ptrace_scope == 1:
        return Finding("warn", "kernel.yama.ptrace_scope=1: py-spy may read only processes it starts, or jobs "
                       "started by `gpu-triage run` (root reads any)", _LAUNCHER_FIX, data)
    return Finding("warn", f"kernel.yama.ptrace_scope={acc.ptrace_scope}: py-spy may read nothing without "
                   "CAP_SYS_PTRACE (root does)", _PTRACE_FIX, data)
