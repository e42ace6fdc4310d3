"""The simulator's physics: what the cards, the cores and the disks do in each scenario, one entry per
scenario in :data:`PHYSICS`, and the state of a scenario while it plays (:class:`Phase`).

:class:`gpu_triage.sources.sim.SimulatedSource` builds the ticks (time, the fields every scenario shares,
memory, processes, disks); this module says, per scenario, how busy each card is inside the tick, how its
SMs, tensor cores, memory, power and links follow, how busy the ranks' and workers' cores are, and what a
phase sets up when it begins. A new scenario is one entry here and one in :mod:`gpu_triage.scenarios`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gpu_triage.model import DiskSample
from gpu_triage.scenarios import REGISTRY

_EPOCH_S, _EPOCH_ON_S = 7.5, 3.0
_DISK_NAMES = ("nvme0n1", "nvme1n1")  # system disk, dataset disk


@dataclass(slots=True)
class Phase:
    """What stays fixed while one scenario plays: which rank runs where, memory held, worker pids."""

    scenario: str
    start_s: float  # offset from the source's start
    mem_frac: np.ndarray  # (G,) share of each card's memory held by processes
    has_context: np.ndarray  # (G,) bool: a process holds a CUDA context on the card
    rank_gpu: np.ndarray  # (R,) card of each rank
    rank_mem: np.ndarray  # (R,) bytes each rank holds
    workers: int  # DataLoader workers per rank
    main_pids: list[int]
    worker_pids: list[list[int]]
    thread_core: np.ndarray  # (R + R*W,) core each thread runs on: mains first, then workers rank by rank
    straggler: int | None = None
    levels: np.ndarray | None = None  # imbalanced: each card's mean GPU-Util
    offset_s: float = 0.0  # periodic_stall: where in its cycle the phase starts
    level: float = 0.0  # too_few_workers: slowly wandering GPU-Util level
    bursts: list[tuple[float, float]] = field(default_factory=list)  # data_pipeline: (start, end) on-times
    next_burst_s: float = 0.0
    epoch: int = -1  # epoch_restart: the epoch whose workers are alive
    job_id: str | None = None  # the simulated Slurm job the ranks belong to: a new one for each phase


# Each function draws from the source's random stream in a fixed order (the simulated traces are
# reproducible from their seed), so a scenario's numbers only ever change with its own entry.


class Machine(Protocol):
    """What a scenario's physics reads of the simulated source (``sim.SimulatedSource``): a protocol, so that
    the physics needs nothing from the module that imports it."""

    @property
    def cores(self) -> int: ...


@dataclass(slots=True)
class Ctx:
    """What a scenario's physics may read for one tick."""

    sim: Machine
    ph: Phase
    rng: np.random.Generator
    G: int  # cards
    S: int  # driver GPU-Util samples per card in the tick
    t_sub: np.ndarray | None  # (S,) phase-relative sample times (GPU physics only)
    t_end: float  # seconds since the source's start at the end of the tick


@dataclass(slots=True)
class _GpuShape:
    """One tick of a scenario's cards: the driver's GPU-Util samples and the ratios that turn them into SM,
    tensor, DRAM activity, power and link traffic. The defaults are a healthy dense-compute job's."""

    subs: np.ndarray  # (G, S) GPU-Util samples
    on_frac: float = 1.0  # share of the tick the job computed (drives the main process's CPU)
    sm_ratio: np.ndarray | None = None  # (G,) SM activity per util point; None: 0.965 everywhere
    tensor_ratio: float = 0.97
    occ_ratio: float = 0.148
    dram_ratio: float = 0.184
    spin_w: float = 0.0  # watts per util point not spent on SMs (NCCL kernels spinning)
    rx_per_pct: float = 0.5e6  # PCIe bytes/s per util point, host to device
    tx_share: float = 0.46  # PCIe tx as a share of rx
    nvlink: np.ndarray | None = None  # (G,) bytes/s each way at 100 % util; None: no NVLink traffic


_Cpu = tuple[np.ndarray, np.ndarray, float]  # each rank's main process %, each worker's % (R, W), iowait %


@dataclass(frozen=True, slots=True)
class _Physics:
    gpu: Callable[[Ctx], _GpuShape]
    cpu: Callable[[Ctx, int, int, float, float], _Cpu]  # (ctx, ranks, workers, on_frac, default iowait)
    setup: Callable[[Phase, np.random.Generator, int], None] | None = None  # once, when the phase begins
    migrates: bool = False  # the scheduler moves the ranks' main processes between cores within a tick
    random_reads: bool = False  # the dataset disk serves random O_DIRECT reads flat out
    checkpoint_writes: bool = False  # rank 0 writes a checkpoint onto the system disk


def _nvlink_busy(c: Ctx) -> np.ndarray:
    return c.rng.uniform(9e9, 14e9, c.G)


def _gpu_healthy(c: Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    dip = rng.random(S) < 0.015  # eval / logging hiccups, all ranks in lock step
    subs = 98.3 + rng.normal(0.0, 0.6, (G, S))
    subs[:, dip] = rng.uniform(40.0, 80.0, int(dip.sum()))
    return _GpuShape(subs, nvlink=rng.uniform(8e9, 16e9, G))


def _gpu_data_pipeline(c: Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    assert c.t_sub is not None
    on = _bursts_on(c.ph, c.rng, c.t_sub)
    subs = on * rng.uniform(84.0, 90.0, (G, 1)) + rng.normal(0.0, 0.8, (G, S)) * on
    sm_ratio = rng.uniform(0.85, 0.88, G)
    return _GpuShape(subs, on_frac=float(on.mean()), sm_ratio=sm_ratio, rx_per_pct=4.8e6, tx_share=0.105,
                     nvlink=_nvlink_busy(c))


def _gpu_starved(c: Ctx) -> _GpuShape:  # too_few_workers, starved_no_procs: a wandering low level
    rng, G, S, ph = c.rng, c.G, c.S, c.ph
    ph.level = float(np.clip(ph.level + rng.normal(0.0, 1.5) + 0.1 * (37.0 - ph.level), 28.0, 45.0))
    subs = ph.level + rng.normal(0.0, 1.5, (G, 1)) + rng.normal(0.0, 6.0, (G, S))
    subs = np.clip(subs, ph.level - 16.0, ph.level + 18.0)
    sm_ratio = rng.uniform(0.88, 0.91, G)
    return _GpuShape(subs, sm_ratio=sm_ratio, rx_per_pct=0.57e6, tx_share=0.22, nvlink=_nvlink_busy(c))


def _gpu_storage_io(c: Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    arrive = rng.random(S) < 0.35  # a batch landed: a short burst, ranks nearly together
    subs = arrive * rng.uniform(25.0, 44.0, (G, S)) + rng.uniform(0.0, 1.0, (G, S))
    sm_ratio = rng.uniform(0.8, 0.88, G)
    return _GpuShape(subs, on_frac=float(arrive.mean()), sm_ratio=sm_ratio, rx_per_pct=1.6e6, tx_share=0.13,
                     nvlink=_nvlink_busy(c))


def _gpu_communication(c: Ctx) -> _GpuShape:
    rng, G, S, ph = c.rng, c.G, c.S, c.ph
    subs = 96.0 + rng.normal(0.0, 1.2, (G, S))
    sm_ratio = rng.uniform(0.20, 0.27, G)  # NCCL holds a few SMs; compute ~20 % of the time
    nvlink = rng.uniform(45e9, 75e9, G)
    if ph.straggler is not None:
        subs[ph.straggler] = 80.0 + rng.normal(0.0, 3.0, S)
        sm_ratio[ph.straggler] = rng.uniform(0.95, 0.98)
    return _GpuShape(subs, sm_ratio=sm_ratio, tensor_ratio=0.75, occ_ratio=0.16, dram_ratio=0.55, spin_w=2.1,
                     nvlink=nvlink)


def _gpu_single_card_busy(c: Ctx) -> _GpuShape:
    G, S = c.G, c.S
    subs = np.zeros((G, S))
    subs[0] = 95.0 + c.rng.normal(0.0, 2.0, S)
    return _GpuShape(subs, sm_ratio=np.where(np.arange(G) == 0, 0.95, 0.0))


def _gpu_imbalanced(c: Ctx) -> _GpuShape:
    assert c.ph.levels is not None
    subs = c.ph.levels[:, None] + c.rng.normal(0.0, 2.5, (c.G, c.S))
    return _GpuShape(subs, nvlink=c.rng.uniform(5e9, 12e9, c.G))


def _gpu_launch_overhead(c: Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    level = 28.0 + rng.normal(0.0, 1.0, (G, 1))
    subs = np.minimum(level + rng.normal(0.0, 2.5, (G, S)), 31.0)
    sm_ratio = rng.uniform(0.0011, 0.0014, G)
    return _GpuShape(subs, sm_ratio=sm_ratio, tensor_ratio=0.0058, occ_ratio=0.053, dram_ratio=0.0,
                     rx_per_pct=8.6e6, tx_share=0.163, nvlink=rng.uniform(0.0, 2e7, G))


def _gpu_memory_idle(c: Ctx) -> _GpuShape:
    blip = c.rng.random((c.G, c.S)) < 0.004
    subs = blip * c.rng.uniform(2.0, 6.0, (c.G, c.S))
    return _GpuShape(subs, on_frac=0.0, sm_ratio=np.zeros(c.G))


def _gpu_periodic_stall(c: Ctx) -> _GpuShape:
    assert c.t_sub is not None
    on = ((c.t_sub + c.ph.offset_s) % 24.0) < 10.0
    subs = on * (98.2 + c.rng.normal(0.0, 0.5, (c.G, c.S)))
    return _GpuShape(subs, on_frac=float(on.mean()), nvlink=c.rng.uniform(8e9, 12e9, c.G))


def _gpu_epoch_restart(c: Ctx) -> _GpuShape:
    rng, G, S, ph = c.rng, c.G, c.S, c.ph
    assert c.t_sub is not None
    on = ((c.t_sub + ph.offset_s) % _EPOCH_S) < _EPOCH_ON_S
    subs = on * (94.5 + rng.normal(0.0, 0.8, (G, S)))
    sm_ratio = rng.uniform(0.94, 0.96, G)
    nvlink = rng.uniform(8e9, 12e9, G)
    _respawn(ph, int((c.t_end + ph.offset_s) // _EPOCH_S))  # fresh workers each epoch
    return _GpuShape(subs, on_frac=float(on.mean()), sm_ratio=sm_ratio, rx_per_pct=0.55e6, tx_share=0.22,
                     nvlink=nvlink)


def _gpu_h2d_copy(c: Ctx) -> _GpuShape:  # pageable copies: the card waits on PCIe, kernels are tiny
    rng, G, S = c.rng, c.G, c.S
    subs = 15.0 + rng.normal(0.0, 1.5, (G, 1)) + rng.normal(0.0, 4.0, (G, S))
    return _GpuShape(subs, sm_ratio=rng.uniform(0.015, 0.025, G), rx_per_pct=4.7e8, tx_share=0.01)


def _gpu_in_process_loader(c: Ctx) -> _GpuShape:  # num_workers=0: each step waits for its own batch
    rng, G, S = c.rng, c.G, c.S
    subs = 35.0 + rng.normal(0.0, 2.0, (G, 1)) + rng.normal(0.0, 6.0, (G, S))
    return _GpuShape(subs, sm_ratio=rng.uniform(0.88, 0.92, G), rx_per_pct=0.6e6, tx_share=0.2)


def _gpu_checkpoint_stall(c: Ctx) -> _GpuShape:  # rank 0 in fsync; the others' NCCL kernels spin at the barrier
    rng, G, S = c.rng, c.G, c.S
    subs = 99.0 + rng.normal(0.0, 0.6, (G, S))
    subs[0] = rng.uniform(0.0, 3.0, S)
    sm_ratio = rng.uniform(0.13, 0.17, G)
    sm_ratio[0] = 0.9
    return _GpuShape(subs, sm_ratio=sm_ratio, tensor_ratio=0.1, occ_ratio=0.16, dram_ratio=0.2, spin_w=2.1,
                     rx_per_pct=0.0, tx_share=0.0)


def _gpu_hung_collective(c: Ctx) -> _GpuShape:  # a peer is gone: every rank spins in the collective
    rng, G, S = c.rng, c.G, c.S
    subs = 100.0 - np.abs(rng.normal(0.0, 0.3, (G, S)))
    return _GpuShape(subs, sm_ratio=rng.uniform(0.15, 0.19, G), tensor_ratio=0.0, occ_ratio=0.16, dram_ratio=0.01,
                     spin_w=2.1, rx_per_pct=0.0, tx_share=0.0)


def _gpu_shared_box(c: Ctx) -> _GpuShape:  # jobs side by side: a stalling one, a healthy one, idle cards
    assert c.t_sub is not None
    rng, G, S = c.rng, c.G, c.S
    on = ((c.t_sub + c.ph.offset_s) % 24.0) < 10.0
    subs = np.zeros((G, S))
    subs[0] = on * (98.2 + rng.normal(0.0, 0.5, S))
    subs[1:2] = 98.3 + rng.normal(0.0, 0.6, (min(1, G - 1), S))
    sm_ratio = np.where(np.arange(G) < 2, 0.965, 0.0)
    return _GpuShape(subs, on_frac=float(on.mean()), sm_ratio=sm_ratio, nvlink=np.zeros(G))


def _cpu_uniform(main: tuple[float, float], work: tuple[float, float] | None) -> Callable[..., _Cpu]:
    """Main processes and workers each busy within a range (no workers: ``work`` None)."""

    def cpu(c: Ctx, R: int, W: int, _on_frac: float, iowait: float) -> _Cpu:
        mains = c.rng.uniform(main[0], main[1], R)
        return mains, (c.rng.uniform(work[0], work[1], (R, W)) if work else np.zeros((R, 0))), iowait

    return cpu


def _cpu_data_pipeline(c: Ctx, R: int, W: int, on_frac: float, iowait: float) -> _Cpu:
    main = 12.0 + 80.0 * on_frac + c.rng.normal(0.0, 3.0, R)
    return main, c.rng.uniform(85.0, 98.0, (R, W)), iowait


def _cpu_storage_io(c: Ctx, R: int, W: int, _on_frac: float, _iowait: float) -> _Cpu:
    main = c.rng.uniform(2.0, 6.0, R)
    work = c.rng.uniform(10.0, 16.0, (R, W))  # blocked in read(): iowait, not busy
    return main, work, float(c.rng.uniform(36.0, 46.0))


def _cpu_checkpoint_stall(c: Ctx, R: int, W: int, _on_frac: float, _iowait: float) -> _Cpu:
    # rank 0 blocked in fsync (D state), the others spin in NCCL; one core's worth of iowait
    main = c.rng.uniform(99.0, 101.0, R)
    main[0] = c.rng.uniform(3.0, 8.0)
    work = c.rng.uniform(0.0, 3.0, (R, W))
    return main, work, float(c.rng.uniform(2.5, 3.5)) * 32.0 / c.sim.cores


def _cpu_epoch_restart(c: Ctx, R: int, W: int, on_frac: float, iowait: float) -> _Cpu:
    # fresh workers start up, fill a few batches, then the epoch ends
    main = 0.5 + 97.0 * on_frac + c.rng.normal(0.0, 0.5, R)
    return main, c.rng.uniform(28.0, 55.0, (R, W)) * min(1.0, 1.5 * on_frac), iowait


def _cpu_periodic_stall(c: Ctx, R: int, _W: int, on_frac: float, iowait: float) -> _Cpu:
    # the job sleeps between bursts
    return 0.5 + 99.5 * on_frac + c.rng.normal(0.0, 0.5, R), np.zeros((R, 0)), iowait


def _setup_communication(ph: Phase, rng: np.random.Generator, G: int) -> None:
    if G > 1:
        ph.straggler = int(rng.integers(G))


def _setup_imbalanced(ph: Phase, rng: np.random.Generator, G: int) -> None:
    spread = 95.0 - 60.0 * (np.arange(G) / max(1, G - 1)) ** 0.8
    ph.levels = rng.permutation(spread)


def _setup_periodic_stall(ph: Phase, rng: np.random.Generator, _G: int) -> None:
    ph.offset_s = float(rng.uniform(0.0, 24.0))


def _setup_epoch_restart(ph: Phase, rng: np.random.Generator, _G: int) -> None:
    ph.offset_s = float(rng.uniform(0.0, _EPOCH_S))


def _setup_starved(ph: Phase, rng: np.random.Generator, _G: int) -> None:
    ph.level = float(rng.uniform(34.0, 40.0))


def _setup_data_pipeline(ph: Phase, rng: np.random.Generator, _G: int) -> None:
    ph.next_burst_s = float(rng.uniform(0.0, 4.0))


_STARVED = _Physics(_gpu_starved, _cpu_uniform((38.0, 46.0), (97.0, 100.0)), _setup_starved)
PHYSICS: dict[str, _Physics] = {
    "healthy": _Physics(_gpu_healthy, _cpu_uniform((99.0, 106.0), (22.0, 40.0))),
    "data_pipeline": _Physics(_gpu_data_pipeline, _cpu_data_pipeline, _setup_data_pipeline),
    "too_few_workers": _STARVED,
    "starved_no_procs": _STARVED,
    "storage_io": _Physics(_gpu_storage_io, _cpu_storage_io, random_reads=True),
    "communication": _Physics(_gpu_communication, _cpu_uniform((99.0, 102.0), (15.0, 30.0)), _setup_communication),
    "single_card_busy": _Physics(_gpu_single_card_busy, _cpu_uniform((99.0, 101.0), (10.0, 20.0))),
    "imbalanced": _Physics(_gpu_imbalanced, _cpu_uniform((99.0, 101.0), (20.0, 35.0)), _setup_imbalanced),
    "launch_overhead": _Physics(_gpu_launch_overhead, _cpu_uniform((99.5, 100.5), None)),
    "memory_idle": _Physics(_gpu_memory_idle, _cpu_uniform((0.0, 0.5), None)),
    "periodic_stall": _Physics(_gpu_periodic_stall, _cpu_periodic_stall, _setup_periodic_stall),
    "epoch_restart": _Physics(_gpu_epoch_restart, _cpu_epoch_restart, _setup_epoch_restart),
    # the main thread copies pageable batches (memcpy into the staging buffer)
    "h2d_copy": _Physics(_gpu_h2d_copy, _cpu_uniform((97.0, 100.0), (15.0, 30.0))),
    "in_process_loader": _Physics(_gpu_in_process_loader, _cpu_uniform((97.0, 100.0), None), migrates=True),
    "checkpoint_stall": _Physics(_gpu_checkpoint_stall, _cpu_checkpoint_stall, checkpoint_writes=True),
    "hung_collective": _Physics(_gpu_hung_collective, _cpu_uniform((99.0, 101.0), (0.0, 2.0))),
    "shared_box": _Physics(_gpu_shared_box, _cpu_uniform((0.5, 101.0), (5.0, 20.0)), _setup_periodic_stall),
}


def _respawn(ph: Phase, epoch: int) -> None:
    """epoch_restart: persistent_workers=False starts a fresh set of worker processes every epoch."""
    if epoch == ph.epoch:
        return
    ph.epoch = epoch
    R, W = len(ph.main_pids), ph.workers
    base = ph.main_pids[0] + 100 + (epoch % 500) * (R * W + 3)  # pids climb as the kernel hands them out
    ph.worker_pids = [[base + r * W + w for w in range(W)] for r in range(R)]


def _bursts_on(ph: Phase, rng: np.random.Generator, t_sub: np.ndarray) -> np.ndarray:
    """data_pipeline: the GPU computes for 2-3.5 s whenever the workers have a batch ready, then
    waits 3.5-5.5 s for the next; all ranks in lock step (gradient sync)."""
    while ph.next_burst_s <= t_sub[-1]:
        length = float(rng.uniform(2.0, 3.5))
        ph.bursts.append((ph.next_burst_s, ph.next_burst_s + length))
        ph.next_burst_s += length + float(rng.uniform(3.5, 5.5))
    ph.bursts = [b for b in ph.bursts if b[1] > t_sub[0]]
    on = np.zeros(t_sub.shape[0], dtype=bool)
    for s, e in ph.bursts:
        on |= (t_sub >= s) & (t_sub < e)
    return on


# ---- the cores and the disks in the tick, from the scenario's entry ----


def cores_busy(c: Ctx, on_frac: float, core_perm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per-core busy %, each rank's main process %, each worker's %, and iowait."""
    ph, rng, cores = c.ph, c.rng, c.sim.cores
    R, W, sc = len(ph.main_pids), ph.workers, ph.scenario
    iowait = float(abs(rng.normal(0.0, 0.02)))
    main, work, iowait = PHYSICS[sc].cpu(c, R, W, on_frac, iowait)
    main = np.maximum(main, 0.0)
    loads = np.concatenate([main, work.ravel()])
    per_core = np.minimum(loads, 100.0)  # one thread of a process fills at most one core
    total = float(per_core.sum())
    if total > 0.8 * 100.0 * cores:
        # More runnable threads than cores: the scheduler spreads them, every core is nearly full
        # (85-99 %, as in the real dataloader_cpu_saturated window) and each thread gets its share.
        cpu: np.ndarray = min(100.0, total / cores) * rng.uniform(0.88, 0.99, cores)
        loads = loads * min(1.0, float(cpu.sum()) / total)
    else:
        # Few busy threads stay on their cores: a pegged core among idle ones, as in dataloader_starved.
        demand = np.bincount(ph.thread_core, weights=per_core, minlength=cores)
        if PHYSICS[sc].migrates:  # the scheduler moves the loading process between cores in a tick
            for r in range(R):
                home, other = int(ph.thread_core[r]), int(core_perm[(r + R) % cores])
                if other != home:
                    moved = per_core[r] * float(rng.uniform(0.25, 0.45))
                    demand[home] -= moved
                    demand[other] += moved
        share = np.minimum(1.0, 100.0 / np.maximum(demand, 1e-9))  # time-sharing one core
        loads = loads * share[ph.thread_core]
        cpu = np.abs(rng.normal(0.3, 0.5, cores)) + np.minimum(demand, 100.0)
    cpu = np.round(np.minimum(cpu, 100.0), 1)
    loads = np.round(loads, 1)
    return cpu, loads[:R], loads[R:].reshape(R, W), round(iowait, 3)


def disks_busy(sc: str, rng: np.random.Generator) -> list[DiskSample]:
    """The system disk writes logs; the dataset disk reads what the DataLoader asks for."""
    writes = float(rng.poisson(1.2))
    sys_disk = DiskSample(
        name=_DISK_NAMES[0],
        busy_pct=round(writes * 0.08, 2),
        await_ms=round(float(rng.uniform(0.5, 1.2)), 3) if writes else 0.0,
        read_bytes_per_s=0.0,
        write_bytes_per_s=writes * 20480.0,
        reads_per_s=0.0,
        writes_per_s=writes,
    )
    if PHYSICS[sc].random_reads:  # random O_DIRECT reads, as in the real io_bound window
        reads = float(rng.normal(1800.0, 120.0))
        busy = float(min(100.0, rng.normal(99.6, 0.3)))
        await_ms = float(rng.uniform(4.5, 6.5))
        size = float(rng.normal(700e3, 25e3))
    else:
        rate = REGISTRY[sc].disk_reads_per_s
        reads = float(rng.poisson(rate)) if rate else 0.0
        busy = reads * 0.012  # ~0.12 ms service per cached-friendly sequential read
        await_ms = float(rng.uniform(0.15, 0.45)) if reads else 0.0
        size = 131072.0
    if PHYSICS[sc].checkpoint_writes:  # rank 0's torch.save + fsync onto the system disk
        w_bytes = float(rng.normal(1.5e9, 1e8))
        sys_disk = DiskSample(name=_DISK_NAMES[0], busy_pct=round(float(min(100.0, rng.normal(96.0, 2.0))), 2),
                              await_ms=round(float(rng.uniform(25.0, 45.0)), 3), read_bytes_per_s=0.0,
                              write_bytes_per_s=w_bytes, reads_per_s=0.0, writes_per_s=w_bytes / 1048576.0)
    data_disk = DiskSample(
        name=_DISK_NAMES[1],
        busy_pct=round(busy, 2),
        await_ms=round(await_ms, 3),
        read_bytes_per_s=reads * size,
        write_bytes_per_s=0.0,
        reads_per_s=reads,
        writes_per_s=0.0,
    )
    return [sys_disk, data_disk]
