"""A simulated multi-GPU server: ground truth for the tests and the ``demo`` subcommand.

:class:`SimulatedSource` plays one known case (a *scenario*) on N simulated H200 cards and a host of
M cores, deterministically from a seed, and fills every trace-v1 field the way a real H200 fills it.
Its ticks are plain :class:`~gpu_triage.model.Tick` objects, so the dashboard, the recorder and the
diagnosis cannot tell them from live ones, and :data:`EXPECTED` says what a correct diagnosis must find.

Why it is shaped after real recordings: a simulation that only looks plausible would let the diagnosis
learn the simulation. Each scenario copies the magnitudes (GPU-Util vs SM active, power per SM activity,
clocks, temperatures, PCIe rates, per-core CPU, disk await and iowait, DataLoader worker processes) of
the H200 recordings bundled in ``gpu_triage/data`` (``h200-scenarios-{2s,0.5s}.parquet``, windows named
in their ``labels.json``) and scales them to N cards the way data-parallel training does (one rank and
its DataLoader workers per card, ranks in lock step).

==================  ==========================  ====================================================
scenario            EXPECTED (pattern, cause)   what it shows; real window it is shaped after
==================  ==========================  ====================================================
healthy             steady_high, none           util 97-99 %, SM ~95 %, ~690 W, 1500 MHz, 60-80 % memory,
                                                14 workers' worth of busy cores; ``compute_healthy``,
                                                ``dataloader_tuned``
data_pipeline       sawtooth, data_pipeline     every core 85-100 % (workers), GPU bursts of 2-3.5 s at
                                                ~87 % between 3.5-5.5 s at 0 %; ``dataloader_cpu_saturated``
too_few_workers     steady_low, data_pipeline   one worker core per rank (two on 1-2 cards) pegged, rest
                                                idle; util flat 28-45 %, min/max 20-57; ``dataloader_starved``
storage_io          steady_low, storage_io      data disk 99-100 % busy, await 4.5-6.5 ms, ~1.2 GB/s of
                                                random reads, iowait 36-46 %; GPU jumps 0 to 25-44 inside
                                                each tick, mean 5-25 %; ``io_bound``
communication       steady_high, communication  util ~96 % but SM active 19-26 % (NCCL kernels waiting),
                                                NVLink 45-75 GB/s each way; one straggler card at util
                                                ~80 %, SM ~78 % holds the rest (NVIDIA/nccl#403)
single_card_busy    single_card_busy, none      every rank on cuda:0: card 0 ~95 % holding all ranks'
                                                memory and processes, the others at 0 % with no context
                                                (345 MHz, 76 W as in the ``idle`` window)
imbalanced          imbalanced, none            cards flat at different means, from 95 % down to ~35 %
launch_overhead     steady_low, launch_overhead util 20-31 %, SM ~0.04 %, 121 W, 1980 MHz, one core per
                                                rank at 100 %, PCIe rx ~250 MB/s; ``launch_bound``
memory_idle         idle, memory_idle           cards 65-75 % full, util 0, SM 0, processes holding the
                                                memory at 0 % CPU; ``mem_hog_idle``
periodic_stall      sawtooth, stall_unexplained 24 s period: 10 s at 98 %, 14 s at 0 %; CPU, disks and
                                                links quiet; ``sawtooth_stall`` (8 s period there)
------------------  --------------------------  ----------------------------------------------------
epoch_restart       sawtooth, data_pipeline     extra case, not in SCENARIOS: DataLoader workers
                                                re-spawned every 7.5 s epoch with a slow start: 4.5 s
                                                at 0 %, 3 s at ~94 %, new worker pids each epoch;
                                                ``dataloader_epoch_restart``
==================  ==========================  ====================================================

Scenarios about several cards (communication, single_card_busy, imbalanced) need ``gpus >= 2`` to show
their mechanism; with one card they still run and produce valid ticks (NVLink is then null, as on the
real one-card H200). ``storage_io`` is documented as ``steady_low``: the tick means stay low and level
while min/max jump, as a 2 s tick shows random reads on a real machine.

Sub-tick behaviour: each tick is built from ~10 virtual driver samples (one per 200 ms, like
``nvmlDeviceGetSamples``); ``util_pct`` is their mean and ``util_min_pct``/``util_max_pct`` their extremes,
so a sawtooth faster than the tick still shows in min/max.

Time: tick ``k`` (k = 1, 2, ...) covers ``[start + (k-1)*interval, start + k*interval]`` and carries
``ts = start + k*interval``. A schedule (:meth:`SimulatedSource.from_schedule`) assigns a tick to the phase
holding the middle of its interval, so ``[("healthy", 60), ...]`` at 2 s gives exactly 30 healthy ticks.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from gpu_triage.errors import UserError
from gpu_triage.model import DiskSample, GpuInfo, GpuSample, HostInfo, NetSample, ProcSample, Tick
from gpu_triage.scenarios import REGISTRY, SCENARIOS
from gpu_triage.sources.base import SourceStatus

EXPECTED: dict[str, tuple[str, str]] = {n: REGISTRY[n].expected for n in SCENARIOS}

# Cases beyond those of the demo and the CLI: playable by name, with their own ground truth.
EXTRA_EXPECTED: dict[str, tuple[str, str]] = {n: s.expected for n, s in REGISTRY.items() if not s.listed}
_ALL_EXPECTED = {**EXPECTED, **EXTRA_EXPECTED}
_EPOCH_S, _EPOCH_ON_S = 7.5, 3.0

MAX_GPUS = 16
MAX_CORES = 4096

# Static facts of the card, as a real H200 reports them.
H200_MEM_TOTAL_BYTES = 150_754_820_096  # 141 GiB as NVML counts it
_DRIVER_RESERVED_BYTES = 644_874_240  # memory "used" on an idle H200 with no process (real trace)
_GIB = 1 << 30
# The host's swap and its one Ethernet interface (the simulated box is a single node: no InfiniBand traffic).
# Derived from the tick's other figures, never from the random stream, so adding them changed no verdict.
_SWAP_TOTAL_BYTES = 8 * _GIB
_SWAP_USED_BYTES = 212 * (1 << 20)  # a little paged out long ago and never touched again
_ETH_BASE_RX, _ETH_BASE_TX = 1.4e6, 0.35e6  # metrics agents, ssh, logging
_H200_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # an HGX H200 board's layout

# Power, clock and temperature model fitted to the real H200 windows:
#   no context: 76.5 W at 345 MHz; context, no kernels: 120.7 W at 1980 MHz;
#   bf16 matmul at SM 96 %: ~692 W at ~1500 MHz, 60-63 C.
_P_NO_CONTEXT_W = 76.45
_P_CONTEXT_W = 120.7
_W_PER_SM_PCT = 5.9
_P_MAX_W = 700.0
# The software power cap's clock-event bit (0x4): set at the end of every tick of the lab's 2-H200
# recordings (tests/data/h200x2-*) drawing 650 W or more (53 of 53 card-ticks), never at 550-600 W (16);
# the H200 then trades clock for power, as the clock model below does at high SM activity.
_P_CAP_REASON_W = 650.0
_CLOCK_IDLE_MHZ = 345.0
_CLOCK_MAX_MHZ = 1980.0
_MHZ_PER_SM_PCT = 5.0
_CLOCK_STEP_MHZ = 3.75
_TEMP_TAU_S = 15.0

_DRIVER_SAMPLE_S = 0.2  # the driver keeps about one GPU-Util sample per 200 ms
_DISK_NAMES = ("nvme0n1", "nvme1n1")  # system disk, dataset disk


class SimulationError(UserError, ValueError):
    """Bad arguments for the simulation: one line for the CLI, a ValueError for callers."""


@dataclass(slots=True)
class _Phase:
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


class SimulatedSource:
    """A deterministic simulated server playing one scenario, or a schedule of them (see module doc).

    ``sample()`` does not sleep: the sampler paces it, and tests can draw a whole trace at once.
    """

    def __init__(
        self,
        scenario: str = "healthy",
        gpus: int = 8,
        cores: int = 32,
        seed: int = 0,
        interval_s: float = 2.0,
        start: datetime | None = None,
        *,
        schedule: Sequence[tuple[str, float]] | None = None,
    ) -> None:
        phases = [(scenario, math.inf)] if schedule is None else [(str(s), float(d)) for s, d in schedule]
        gpus, cores = _whole(gpus, "simulated cards"), _whole(cores, "simulated CPU cores")
        _validate(phases, gpus, cores, interval_s, schedule is not None)
        self.gpus = int(gpus)
        self.cores = int(cores)
        self.seed = int(seed)
        self.interval_s = float(interval_s)
        self.start = _utc(start) if start is not None else datetime.now(UTC)
        self.phases: list[tuple[str, float]] = phases
        self._phase_ends = np.cumsum([d for _, d in phases])
        self.name = f"sim:{phases[0][0]}" if schedule is None else "sim:schedule"
        self.tick_index = 0  # ticks produced so far; the next one is tick_index + 1
        self._subs = max(1, min(50, round(self.interval_s / _DRIVER_SAMPLE_S)))
        self._rng = np.random.default_rng(self.seed)
        layout = np.random.default_rng([self.seed, 0x5EED])  # static facts never shift the tick stream
        self._core_perm = layout.permutation(self.cores)
        self._temp_offset = layout.normal(0.0, 1.2, self.gpus)
        self._uuid_words = layout.integers(0, 1 << 32, size=(self.gpus, 4), dtype=np.uint64)
        self._pid_base = int(layout.integers(2000, 60000))
        self._temps: np.ndarray | None = None
        # each card's energy counter (mJ), as NVML keeps one since the driver loaded: a card's power x dt
        self._energy_mj = np.full(self.gpus, 3.6e9) + layout.uniform(0.0, 1e9, self.gpus)
        self._phase_no = -1
        self._phase: _Phase | None = None
        self._closed = False

    @classmethod
    def from_schedule(
        cls,
        phases: Sequence[tuple[str, float]],
        gpus: int = 8,
        cores: int = 32,
        seed: int = 0,
        interval_s: float = 2.0,
        start: datetime | None = None,
    ) -> SimulatedSource:
        """A source that plays ``phases`` (scenario, seconds) one after another and stays in the last one:
        a trace whose cause changes mid-way, for hysteresis and segmentation tests."""
        return cls(phases[0][0] if phases else "", gpus, cores, seed, interval_s, start, schedule=phases)

    # ----------------------------------------------------------------------------------------- queries

    @property
    def scenario(self) -> str:
        """The scenario of the most recent tick (the first phase before any tick)."""
        return self.scenario_at(max(1, self.tick_index))

    def scenario_at(self, k: int) -> str:
        """The scenario that tick ``k`` (1-based) plays."""
        return self.phases[self._phase_of(k)][0]

    def expected_at(self, k: int) -> tuple[str, str]:
        """Ground truth (pattern, bottleneck) for tick ``k``."""
        return _ALL_EXPECTED[self.scenario_at(k)]

    def _phase_of(self, k: int) -> int:
        mid = (k - 0.5) * self.interval_s
        return min(int(np.searchsorted(self._phase_ends, mid, side="right")), len(self.phases) - 1)

    # ------------------------------------------------------------------------------------- Source API

    def host_info(self) -> HostInfo:
        gpus = []
        for i in range(self.gpus):
            w = [int(x) for x in self._uuid_words[i]]
            uuid = f"GPU-{w[0]:08x}-{w[1] >> 16:04x}-{w[1] & 0xFFFF:04x}-{w[2] >> 16:04x}-{w[2] & 0xFFFF:04x}{w[3]:08x}"
            bus = _H200_BUS_IDS[i % 8] + (0x100 if i >= 8 else 0)  # a second board on another domain
            gpus.append(
                GpuInfo(
                    index=i,
                    name="NVIDIA H200 (simulated)",
                    uuid=uuid,
                    pci_bus_id=f"0000{bus >> 8:04X}:{bus & 0xFF:02X}:00.0",
                    mem_total_bytes=H200_MEM_TOTAL_BYTES,
                    pcie_gen_max=5,
                    pcie_width_max=16,
                )
            )
        topology = [["X" if i == j else "NV18" for j in range(self.gpus)] for i in range(self.gpus)]
        schedule = [[s, d] for s, d in self.phases] if len(self.phases) > 1 else None
        extra: dict[str, object] = {
            "source": "simulated",
            "scenario": self.phases[0][0] if schedule is None else "schedule",
            "seed": self.seed,
        }
        if schedule is not None:
            extra["schedule"] = schedule
        return HostInfo(
            hostname=f"sim-h200x{self.gpus}",
            driver_version="580.159.04",
            cuda_driver_version="13.0",
            cpu_count=self.cores,
            gpus=gpus,
            topology=topology,
            extra=extra,
        )

    def status(self) -> SourceStatus:
        return SourceStatus(
            gpu_available=True,
            messages=[f"simulated server ({self.name[4:]}, {self.gpus} cards, seed {self.seed}): not this machine"],
        )

    def close(self) -> None:
        self._closed = True

    def sample(self) -> Tick:
        """The next tick. Cheap (numpy over cards, cores and driver samples); never sleeps."""
        self.tick_index += 1
        k = self.tick_index
        phase_no = self._phase_of(k)
        if phase_no != self._phase_no:
            start_s = 0.0 if phase_no == 0 else float(self._phase_ends[phase_no - 1])
            self._phase = self._begin_phase(self.phases[phase_no][0], start_s)
            self._phase_no = phase_no
        assert self._phase is not None
        return self._tick(k, self._phase)

    # ---------------------------------------------------------------------------------------- phases

    def _begin_phase(self, scenario: str, start_s: float) -> _Phase:
        rng, G, C = self._rng, self.gpus, self.cores
        R = G  # one rank per card, as torchrun starts them
        rank_gpu = np.arange(R)
        has_context = np.ones(G, dtype=bool)
        spec = REGISTRY[scenario]
        workers = spec.workers(C, R)
        if spec.memory == "idle_hog":
            mem_frac = rng.uniform(0.65, 0.75, G)
        elif spec.memory == "one_card":
            per_rank = min(14 * _GIB, 0.85 * H200_MEM_TOTAL_BYTES / R) * rng.uniform(0.9, 1.0)
            mem_frac = np.zeros(G)
            mem_frac[0] = per_rank * R / H200_MEM_TOTAL_BYTES
            rank_gpu = np.zeros(R, dtype=int)
            has_context = np.arange(G) == 0
        elif spec.memory == "small":
            mem_frac = np.full(G, rng.uniform(0.03, 0.08))  # small models, as in the real windows
        else:
            mem_frac = np.clip(rng.uniform(0.62, 0.78) + rng.normal(0.0, 0.01, G), 0.05, 0.95)
        held = np.round(mem_frac * H200_MEM_TOTAL_BYTES / (1 << 20)) * (1 << 20)  # allocator granules
        if spec.memory == "one_card":
            rank_mem = np.full(R, held[0] / R)
        else:
            rank_mem = held[rank_gpu]
        base = self._pid_base + 5000 * (self._phase_no + 1)  # a new job's pids for each phase
        main_pids = [base + r for r in range(R)]
        worker_pids = [[base + 100 + r * workers + w for w in range(workers)] for r in range(R)]
        n_threads = R + R * workers
        thread_core = self._core_perm[np.arange(n_threads) % C]
        phase = _Phase(
            scenario=scenario,
            start_s=start_s,
            mem_frac=held / H200_MEM_TOTAL_BYTES,
            has_context=has_context,
            rank_gpu=rank_gpu,
            rank_mem=rank_mem,
            workers=workers,
            main_pids=main_pids,
            worker_pids=worker_pids,
            thread_core=thread_core,
            job_id=str(100 + self._phase_no + 1),  # _phase_no is still the previous phase here, as for the pids
        )
        setup = _PHYSICS[scenario].setup
        if setup is not None:
            setup(phase, rng, G)
        return phase

    # ------------------------------------------------------------------------------------------ ticks

    def _tick(self, k: int, ph: _Phase) -> Tick:
        rng, G, S, dt = self._rng, self.gpus, self._subs, self.interval_s
        t_end = k * dt
        t_sub = t_end - dt + (np.arange(S) + 0.5) * (dt / S) - ph.start_s  # phase-relative sample times
        sc = ph.scenario

        # --- GPU-Util driver samples (G, S) and what the SMs did with that time: the scenario's physics
        shape = _PHYSICS[sc].gpu(_Ctx(self, ph, rng, G, S, t_sub, t_end))
        subs, on_frac = shape.subs, shape.on_frac
        sm_ratio = np.full(G, 0.965) if shape.sm_ratio is None else shape.sm_ratio
        tensor_ratio, occ_ratio, dram_ratio = shape.tensor_ratio, shape.occ_ratio, shape.dram_ratio
        spin_w = shape.spin_w
        rx_per_pct, tx_share = shape.rx_per_pct, shape.tx_share  # PCIe bytes/s per util point (host->device), tx/rx
        nvlink = np.zeros(G) if shape.nvlink is None else shape.nvlink  # bytes/s each way at 100 % util
        subs = np.rint(np.clip(subs, 0.0, 100.0))  # the driver reports whole percents
        util = np.round(subs.mean(axis=1), 1)
        util_min = subs.min(axis=1)
        util_max = subs.max(axis=1)

        sm = np.minimum(util * sm_ratio * rng.normal(1.0, 0.003, G), util)
        dram = sm * dram_ratio + 0.00039  # the idle floor GPM reports on an H200
        ctx = ph.has_context
        power = np.where(ctx, _P_CONTEXT_W, _P_NO_CONTEXT_W) + _W_PER_SM_PCT * sm + spin_w * (util - sm)
        power = np.minimum(power * rng.normal(1.0, 0.004, G), _P_MAX_W)
        clock = np.where(ctx, _CLOCK_MAX_MHZ - _MHZ_PER_SM_PCT * sm + rng.normal(0.0, 8.0, G), _CLOCK_IDLE_MHZ)
        clock = np.clip(np.round(clock / _CLOCK_STEP_MHZ) * _CLOCK_STEP_MHZ, _CLOCK_IDLE_MHZ, _CLOCK_MAX_MHZ)
        target = 33.0 + 0.043 * power + self._temp_offset
        if self._temps is None:
            self._temps = target.copy()
        else:
            self._temps += (target - self._temps) * (1.0 - math.exp(-dt / _TEMP_TAU_S))
        temp = np.round(self._temps)
        mem_used = _DRIVER_RESERVED_BYTES + np.rint(ph.mem_frac * H200_MEM_TOTAL_BYTES)
        rx = 0.5e6 + rx_per_pct * util * rng.normal(1.0, 0.05, G) + rng.uniform(0.0, 2e4, G)
        tx = 0.88e6 + tx_share * (rx - 0.5e6) * rng.normal(1.0, 0.03, G)
        link_tx = nvlink * (util / 100.0) * rng.normal(1.0, 0.04, G) + rng.uniform(0.0, 1e3, G)
        link_rx = link_tx * rng.normal(1.0, 0.02, G)

        # --- host: threads placed on cores, time-shared where two land on one core
        cpu, mains, workers, iowait = self._cpu(ph, on_frac)
        disks = self._disks(sc)
        host_total = max(128, 256 * G) * _GIB
        host_used = int(
            (18 + 5 * len(ph.main_pids) + 1.2 * ph.workers * len(ph.main_pids)) * _GIB
            + rng.normal(0.0, 40e6)
        )

        self._energy_mj = self._energy_mj + power * dt * 1000.0
        energy = self._energy_mj.astype(np.int64).tolist()

        # --- Python objects, one pass over plain lists
        has_links = G > 1
        cols = zip(
            util.tolist(), util_min.tolist(), util_max.tolist(), sm.tolist(), (sm * occ_ratio).tolist(),
            (sm * tensor_ratio).tolist(), dram.tolist(), mem_used.astype(np.int64).tolist(),
            tx.tolist(), rx.tolist(), link_tx.tolist(), link_rx.tolist(),
            power.tolist(), temp.tolist(), clock.tolist(), strict=True,
        )  # fmt: skip
        gpu_samples = [
            GpuSample(
                index=i, util_pct=u, util_min_pct=lo, util_max_pct=hi, sm_active_pct=s,
                sm_occupancy_pct=o, tensor_active_pct=te, dram_active_pct=d, mem_used_bytes=m,
                mem_total_bytes=H200_MEM_TOTAL_BYTES, pcie_tx_bytes_per_s=ptx, pcie_rx_bytes_per_s=prx,
                nvlink_tx_bytes_per_s=ltx if has_links else None,
                nvlink_rx_bytes_per_s=lrx if has_links else None,
                power_w=p, temp_c=tc, sm_clock_mhz=ck,
                # idle when it does nothing; at its power cap (see _P_CAP_REASON_W) when it draws that much, as
                # a busy H200 does; no ECC error, no XID
                clock_event_reasons=0x1 if u < 1.0 else (0x4 if p >= _P_CAP_REASON_W else 0),
                ecc_corrected=0, ecc_uncorrected=0, xid_count=0, energy_mj=energy[i],
            )
            for i, (u, lo, hi, s, o, te, d, m, ptx, prx, ltx, lrx, p, tc, ck) in enumerate(cols)
        ]  # fmt: skip
        gpu_of_rank = ph.rank_gpu.tolist()
        mem_of_rank = ph.rank_mem.astype(np.int64).tolist()
        main_cpu = mains.tolist()
        worker_cpu = workers.tolist()
        # each process's SM share (NVML's per-process smUtil), read as the live source reads it, on every
        # card with a process: ranks sharing a card split its busy time; an idle card's processes have no sample
        util_of = util.tolist()
        ranks_on = [gpu_of_rank.count(g) for g in range(G)]
        sm_of_rank = [util_of[g] / ranks_on[g] if util_of[g] >= 1.0 else None for g in gpu_of_rank]
        procs = [] if not REGISTRY[sc].procs else [
            ProcSample(
                pid=ph.main_pids[r],
                gpu_index=gpu_of_rank[r],
                name="python3",
                gpu_mem_bytes=mem_of_rank[r],
                cpu_pct=main_cpu[r],
                workers=ph.workers,
                workers_cpu_pct=worker_cpu[r],
                worker_pids=list(ph.worker_pids[r]),
                sm_pct=sm_of_rank[r],
                user="sim",
                slurm_job=ph.job_id,
            )
            for r in range(len(ph.main_pids))
        ]
        return Tick(
            ts=self.start + timedelta(seconds=t_end),
            interval_s=dt,
            gpus=gpu_samples,
            cpu_pct=cpu.tolist(),
            iowait_pct=iowait,
            host_mem_used_bytes=host_used,
            host_mem_total_bytes=host_total,
            disks=disks,
            procs=procs,
            host_swap_used_bytes=_SWAP_USED_BYTES,
            host_swap_total_bytes=_SWAP_TOTAL_BYTES,
            # logging and checkpoints pushed out scale a little with the work done
            nets=[NetSample(name="eth0", rx_bytes_per_s=_ETH_BASE_RX + 0.002 * float(rx.sum()),
                            tx_bytes_per_s=_ETH_BASE_TX + 0.004 * float(tx.sum()))],
        )

    def _respawn(self, ph: _Phase, epoch: int) -> None:
        """epoch_restart: persistent_workers=False starts a fresh set of worker processes every epoch."""
        if epoch == ph.epoch:
            return
        ph.epoch = epoch
        R, W = len(ph.main_pids), ph.workers
        base = ph.main_pids[0] + 100 + (epoch % 500) * (R * W + 3)  # pids climb as the kernel hands them out
        ph.worker_pids = [[base + r * W + w for w in range(W)] for r in range(R)]

    def _bursts_on(self, ph: _Phase, t_sub: np.ndarray) -> np.ndarray:
        """data_pipeline: the GPU computes for 2-3.5 s whenever the workers have a batch ready, then
        waits 3.5-5.5 s for the next; all ranks in lock step (gradient sync)."""
        rng = self._rng
        while ph.next_burst_s <= t_sub[-1]:
            length = float(rng.uniform(2.0, 3.5))
            ph.bursts.append((ph.next_burst_s, ph.next_burst_s + length))
            ph.next_burst_s += length + float(rng.uniform(3.5, 5.5))
        ph.bursts = [b for b in ph.bursts if b[1] > t_sub[0]]
        on = np.zeros(t_sub.shape[0], dtype=bool)
        for s, e in ph.bursts:
            on |= (t_sub >= s) & (t_sub < e)
        return on

    def _cpu(self, ph: _Phase, on_frac: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """Per-core busy %, each rank's main process %, each worker's %, and iowait."""
        rng, R, W, sc = self._rng, len(ph.main_pids), ph.workers, ph.scenario
        iowait = float(abs(rng.normal(0.0, 0.02)))
        ctx = _Ctx(self, ph, rng, self.gpus, self._subs, None, 0.0)
        main, work, iowait = _PHYSICS[sc].cpu(ctx, R, W, on_frac, iowait)
        main = np.maximum(main, 0.0)
        loads = np.concatenate([main, work.ravel()])
        per_core = np.minimum(loads, 100.0)  # one thread of a process fills at most one core
        total = float(per_core.sum())
        if total > 0.8 * 100.0 * self.cores:
            # More runnable threads than cores: the scheduler spreads them, every core is nearly full
            # (85-99 %, as in the real dataloader_cpu_saturated window) and each thread gets its share.
            cpu: np.ndarray = min(100.0, total / self.cores) * rng.uniform(0.88, 0.99, self.cores)
            loads = loads * min(1.0, float(cpu.sum()) / total)
        else:
            # Few busy threads stay on their cores: a pegged core among idle ones, as in dataloader_starved.
            demand = np.bincount(ph.thread_core, weights=per_core, minlength=self.cores)
            if _PHYSICS[sc].migrates:  # the scheduler moves the loading process between cores in a tick
                for r in range(R):
                    home, other = int(ph.thread_core[r]), int(self._core_perm[(r + R) % self.cores])
                    if other != home:
                        moved = per_core[r] * float(rng.uniform(0.25, 0.45))
                        demand[home] -= moved
                        demand[other] += moved
            share = np.minimum(1.0, 100.0 / np.maximum(demand, 1e-9))  # time-sharing one core
            loads = loads * share[ph.thread_core]
            cpu = np.abs(rng.normal(0.3, 0.5, self.cores)) + np.minimum(demand, 100.0)
        cpu = np.round(np.minimum(cpu, 100.0), 1)
        loads = np.round(loads, 1)
        return cpu, loads[:R], loads[R:].reshape(R, W), round(iowait, 3)

    def _disks(self, sc: str) -> list[DiskSample]:
        """The system disk writes logs; the dataset disk reads what the DataLoader asks for."""
        rng = self._rng
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
        if _PHYSICS[sc].random_reads:  # random O_DIRECT reads, as in the real io_bound window
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
        if _PHYSICS[sc].checkpoint_writes:  # rank 0's torch.save + fsync onto the system disk
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


def _validate(phases: list[tuple[str, float]], gpus: int, cores: int, interval_s: float, scheduled: bool) -> None:
    if not phases:
        raise SimulationError("simulation schedule is empty: give at least one (scenario, seconds) phase")
    for scenario, seconds in phases:
        if scenario not in _ALL_EXPECTED:
            raise SimulationError(f"unknown simulation scenario {scenario!r}: choose one of {', '.join(SCENARIOS)}")
        if scheduled and not (seconds > 0 and math.isfinite(seconds)):
            raise SimulationError(f"schedule phase {scenario!r} lasts {seconds} s: give a positive number of seconds")
    if not 1 <= gpus <= MAX_GPUS:
        raise SimulationError(f"{gpus} simulated cards: the simulated server has 1 to {MAX_GPUS}")
    if not 1 <= cores <= MAX_CORES:
        raise SimulationError(f"{cores} simulated CPU cores: give 1 to {MAX_CORES}")
    if not (interval_s > 0 and math.isfinite(interval_s)):
        raise SimulationError(f"simulation interval {interval_s} s: give a positive number of seconds")


def _whole(value: object, what: str) -> int:
    """Accept any integer type (numpy's too), refuse bools, floats and text with one clear line."""
    if isinstance(value, bool):
        raise SimulationError(f"{what}: {value!r} is not a whole number")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise SimulationError(f"{what}: {value!r} is not a whole number") from None


def _utc(when: datetime) -> datetime:
    """A naive start is taken as UTC; an aware one is converted, so every ts is timezone-aware UTC."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


# ---- the scenarios' physics: what the cards, the cores and the disks do in each, one entry per scenario ----
# Each function draws from the source's random stream in a fixed order (the simulated traces are
# reproducible from their seed), so a scenario's numbers only ever change with its own entry.


@dataclass(slots=True)
class _Ctx:
    """What a scenario's physics may read for one tick."""

    sim: SimulatedSource
    ph: _Phase
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
    gpu: Callable[[_Ctx], _GpuShape]
    cpu: Callable[[_Ctx, int, int, float, float], _Cpu]  # (ctx, ranks, workers, on_frac, default iowait)
    setup: Callable[[_Phase, np.random.Generator, int], None] | None = None  # once, when the phase begins
    migrates: bool = False  # the scheduler moves the ranks' main processes between cores within a tick
    random_reads: bool = False  # the dataset disk serves random O_DIRECT reads flat out
    checkpoint_writes: bool = False  # rank 0 writes a checkpoint onto the system disk


def _nvlink_busy(c: _Ctx) -> np.ndarray:
    return c.rng.uniform(9e9, 14e9, c.G)


def _gpu_healthy(c: _Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    dip = rng.random(S) < 0.015  # eval / logging hiccups, all ranks in lock step
    subs = 98.3 + rng.normal(0.0, 0.6, (G, S))
    subs[:, dip] = rng.uniform(40.0, 80.0, int(dip.sum()))
    return _GpuShape(subs, nvlink=rng.uniform(8e9, 16e9, G))


def _gpu_data_pipeline(c: _Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    assert c.t_sub is not None
    on = c.sim._bursts_on(c.ph, c.t_sub)  # noqa: SLF001 - the source's own burst timeline
    subs = on * rng.uniform(84.0, 90.0, (G, 1)) + rng.normal(0.0, 0.8, (G, S)) * on
    sm_ratio = rng.uniform(0.85, 0.88, G)
    return _GpuShape(subs, on_frac=float(on.mean()), sm_ratio=sm_ratio, rx_per_pct=4.8e6, tx_share=0.105,
                     nvlink=_nvlink_busy(c))


def _gpu_starved(c: _Ctx) -> _GpuShape:  # too_few_workers, starved_no_procs: a wandering low level
    rng, G, S, ph = c.rng, c.G, c.S, c.ph
    ph.level = float(np.clip(ph.level + rng.normal(0.0, 1.5) + 0.1 * (37.0 - ph.level), 28.0, 45.0))
    subs = ph.level + rng.normal(0.0, 1.5, (G, 1)) + rng.normal(0.0, 6.0, (G, S))
    subs = np.clip(subs, ph.level - 16.0, ph.level + 18.0)
    sm_ratio = rng.uniform(0.88, 0.91, G)
    return _GpuShape(subs, sm_ratio=sm_ratio, rx_per_pct=0.57e6, tx_share=0.22, nvlink=_nvlink_busy(c))


def _gpu_storage_io(c: _Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    arrive = rng.random(S) < 0.35  # a batch landed: a short burst, ranks nearly together
    subs = arrive * rng.uniform(25.0, 44.0, (G, S)) + rng.uniform(0.0, 1.0, (G, S))
    sm_ratio = rng.uniform(0.8, 0.88, G)
    return _GpuShape(subs, on_frac=float(arrive.mean()), sm_ratio=sm_ratio, rx_per_pct=1.6e6, tx_share=0.13,
                     nvlink=_nvlink_busy(c))


def _gpu_communication(c: _Ctx) -> _GpuShape:
    rng, G, S, ph = c.rng, c.G, c.S, c.ph
    subs = 96.0 + rng.normal(0.0, 1.2, (G, S))
    sm_ratio = rng.uniform(0.20, 0.27, G)  # NCCL holds a few SMs; compute ~20 % of the time
    nvlink = rng.uniform(45e9, 75e9, G)
    if ph.straggler is not None:
        subs[ph.straggler] = 80.0 + rng.normal(0.0, 3.0, S)
        sm_ratio[ph.straggler] = rng.uniform(0.95, 0.98)
    return _GpuShape(subs, sm_ratio=sm_ratio, tensor_ratio=0.75, occ_ratio=0.16, dram_ratio=0.55, spin_w=2.1,
                     nvlink=nvlink)


def _gpu_single_card_busy(c: _Ctx) -> _GpuShape:
    G, S = c.G, c.S
    subs = np.zeros((G, S))
    subs[0] = 95.0 + c.rng.normal(0.0, 2.0, S)
    return _GpuShape(subs, sm_ratio=np.where(np.arange(G) == 0, 0.95, 0.0))


def _gpu_imbalanced(c: _Ctx) -> _GpuShape:
    assert c.ph.levels is not None
    subs = c.ph.levels[:, None] + c.rng.normal(0.0, 2.5, (c.G, c.S))
    return _GpuShape(subs, nvlink=c.rng.uniform(5e9, 12e9, c.G))


def _gpu_launch_overhead(c: _Ctx) -> _GpuShape:
    rng, G, S = c.rng, c.G, c.S
    level = 28.0 + rng.normal(0.0, 1.0, (G, 1))
    subs = np.minimum(level + rng.normal(0.0, 2.5, (G, S)), 31.0)
    sm_ratio = rng.uniform(0.0011, 0.0014, G)
    return _GpuShape(subs, sm_ratio=sm_ratio, tensor_ratio=0.0058, occ_ratio=0.053, dram_ratio=0.0,
                     rx_per_pct=8.6e6, tx_share=0.163, nvlink=rng.uniform(0.0, 2e7, G))


def _gpu_memory_idle(c: _Ctx) -> _GpuShape:
    blip = c.rng.random((c.G, c.S)) < 0.004
    subs = blip * c.rng.uniform(2.0, 6.0, (c.G, c.S))
    return _GpuShape(subs, on_frac=0.0, sm_ratio=np.zeros(c.G))


def _gpu_periodic_stall(c: _Ctx) -> _GpuShape:
    assert c.t_sub is not None
    on = ((c.t_sub + c.ph.offset_s) % 24.0) < 10.0
    subs = on * (98.2 + c.rng.normal(0.0, 0.5, (c.G, c.S)))
    return _GpuShape(subs, on_frac=float(on.mean()), nvlink=c.rng.uniform(8e9, 12e9, c.G))


def _gpu_epoch_restart(c: _Ctx) -> _GpuShape:
    rng, G, S, ph = c.rng, c.G, c.S, c.ph
    assert c.t_sub is not None
    on = ((c.t_sub + ph.offset_s) % _EPOCH_S) < _EPOCH_ON_S
    subs = on * (94.5 + rng.normal(0.0, 0.8, (G, S)))
    sm_ratio = rng.uniform(0.94, 0.96, G)
    nvlink = rng.uniform(8e9, 12e9, G)
    c.sim._respawn(ph, int((c.t_end + ph.offset_s) // _EPOCH_S))  # noqa: SLF001 - fresh workers each epoch
    return _GpuShape(subs, on_frac=float(on.mean()), sm_ratio=sm_ratio, rx_per_pct=0.55e6, tx_share=0.22,
                     nvlink=nvlink)


def _gpu_h2d_copy(c: _Ctx) -> _GpuShape:  # pageable copies: the card waits on PCIe, kernels are tiny
    rng, G, S = c.rng, c.G, c.S
    subs = 15.0 + rng.normal(0.0, 1.5, (G, 1)) + rng.normal(0.0, 4.0, (G, S))
    return _GpuShape(subs, sm_ratio=rng.uniform(0.015, 0.025, G), rx_per_pct=4.7e8, tx_share=0.01)


def _gpu_in_process_loader(c: _Ctx) -> _GpuShape:  # num_workers=0: each step waits for its own batch
    rng, G, S = c.rng, c.G, c.S
    subs = 35.0 + rng.normal(0.0, 2.0, (G, 1)) + rng.normal(0.0, 6.0, (G, S))
    return _GpuShape(subs, sm_ratio=rng.uniform(0.88, 0.92, G), rx_per_pct=0.6e6, tx_share=0.2)


def _gpu_checkpoint_stall(c: _Ctx) -> _GpuShape:  # rank 0 in fsync; the others' NCCL kernels spin at the barrier
    rng, G, S = c.rng, c.G, c.S
    subs = 99.0 + rng.normal(0.0, 0.6, (G, S))
    subs[0] = rng.uniform(0.0, 3.0, S)
    sm_ratio = rng.uniform(0.13, 0.17, G)
    sm_ratio[0] = 0.9
    return _GpuShape(subs, sm_ratio=sm_ratio, tensor_ratio=0.1, occ_ratio=0.16, dram_ratio=0.2, spin_w=2.1,
                     rx_per_pct=0.0, tx_share=0.0)


def _gpu_hung_collective(c: _Ctx) -> _GpuShape:  # a peer is gone: every rank spins in the collective
    rng, G, S = c.rng, c.G, c.S
    subs = 100.0 - np.abs(rng.normal(0.0, 0.3, (G, S)))
    return _GpuShape(subs, sm_ratio=rng.uniform(0.15, 0.19, G), tensor_ratio=0.0, occ_ratio=0.16, dram_ratio=0.01,
                     spin_w=2.1, rx_per_pct=0.0, tx_share=0.0)


def _cpu_uniform(main: tuple[float, float], work: tuple[float, float] | None) -> Callable[..., _Cpu]:
    """Main processes and workers each busy within a range (no workers: ``work`` None)."""

    def cpu(c: _Ctx, R: int, W: int, _on_frac: float, iowait: float) -> _Cpu:
        mains = c.rng.uniform(main[0], main[1], R)
        return mains, (c.rng.uniform(work[0], work[1], (R, W)) if work else np.zeros((R, 0))), iowait

    return cpu


def _cpu_data_pipeline(c: _Ctx, R: int, W: int, on_frac: float, iowait: float) -> _Cpu:
    main = 12.0 + 80.0 * on_frac + c.rng.normal(0.0, 3.0, R)
    return main, c.rng.uniform(85.0, 98.0, (R, W)), iowait


def _cpu_storage_io(c: _Ctx, R: int, W: int, _on_frac: float, _iowait: float) -> _Cpu:
    main = c.rng.uniform(2.0, 6.0, R)
    work = c.rng.uniform(10.0, 16.0, (R, W))  # blocked in read(): iowait, not busy
    return main, work, float(c.rng.uniform(36.0, 46.0))


def _cpu_checkpoint_stall(c: _Ctx, R: int, W: int, _on_frac: float, _iowait: float) -> _Cpu:
    # rank 0 blocked in fsync (D state), the others spin in NCCL; one core's worth of iowait
    main = c.rng.uniform(99.0, 101.0, R)
    main[0] = c.rng.uniform(3.0, 8.0)
    work = c.rng.uniform(0.0, 3.0, (R, W))
    return main, work, float(c.rng.uniform(2.5, 3.5)) * 32.0 / c.sim.cores


def _cpu_epoch_restart(c: _Ctx, R: int, W: int, on_frac: float, iowait: float) -> _Cpu:
    # fresh workers start up, fill a few batches, then the epoch ends
    main = 0.5 + 97.0 * on_frac + c.rng.normal(0.0, 0.5, R)
    return main, c.rng.uniform(28.0, 55.0, (R, W)) * min(1.0, 1.5 * on_frac), iowait


def _cpu_periodic_stall(c: _Ctx, R: int, _W: int, on_frac: float, iowait: float) -> _Cpu:
    # the job sleeps between bursts
    return 0.5 + 99.5 * on_frac + c.rng.normal(0.0, 0.5, R), np.zeros((R, 0)), iowait


def _setup_communication(ph: _Phase, rng: np.random.Generator, G: int) -> None:
    if G > 1:
        ph.straggler = int(rng.integers(G))


def _setup_imbalanced(ph: _Phase, rng: np.random.Generator, G: int) -> None:
    spread = 95.0 - 60.0 * (np.arange(G) / max(1, G - 1)) ** 0.8
    ph.levels = rng.permutation(spread)


def _setup_periodic_stall(ph: _Phase, rng: np.random.Generator, _G: int) -> None:
    ph.offset_s = float(rng.uniform(0.0, 24.0))


def _setup_epoch_restart(ph: _Phase, rng: np.random.Generator, _G: int) -> None:
    ph.offset_s = float(rng.uniform(0.0, _EPOCH_S))


def _setup_starved(ph: _Phase, rng: np.random.Generator, _G: int) -> None:
    ph.level = float(rng.uniform(34.0, 40.0))


def _setup_data_pipeline(ph: _Phase, rng: np.random.Generator, _G: int) -> None:
    ph.next_burst_s = float(rng.uniform(0.0, 4.0))


_STARVED = _Physics(_gpu_starved, _cpu_uniform((38.0, 46.0), (97.0, 100.0)), _setup_starved)
_PHYSICS: dict[str, _Physics] = {
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
}
