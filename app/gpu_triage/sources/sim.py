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
from collections.abc import Sequence
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
        )
        if scenario == "communication" and G > 1:
            phase.straggler = int(rng.integers(G))
        if scenario == "imbalanced":
            spread = 95.0 - 60.0 * (np.arange(G) / max(1, G - 1)) ** 0.8
            phase.levels = rng.permutation(spread)
        if scenario == "periodic_stall":
            phase.offset_s = float(rng.uniform(0.0, 24.0))
        if scenario == "epoch_restart":
            phase.offset_s = float(rng.uniform(0.0, _EPOCH_S))
        if scenario in ("too_few_workers", "starved_no_procs"):
            phase.level = float(rng.uniform(34.0, 40.0))
        if scenario == "data_pipeline":
            phase.next_burst_s = float(rng.uniform(0.0, 4.0))
        return phase

    # ------------------------------------------------------------------------------------------ ticks

    def _tick(self, k: int, ph: _Phase) -> Tick:
        rng, G, S, dt = self._rng, self.gpus, self._subs, self.interval_s
        t_end = k * dt
        t_sub = t_end - dt + (np.arange(S) + 0.5) * (dt / S) - ph.start_s  # phase-relative sample times
        sc = ph.scenario

        # --- GPU-Util driver samples (G, S) and what the SMs did with that time
        sm_ratio = np.full(G, 0.965)
        tensor_ratio, occ_ratio, dram_ratio, spin_w = 0.97, 0.148, 0.184, 0.0
        rx_per_pct, tx_share = 0.5e6, 0.46  # PCIe bytes/s per util point (host->device), tx/rx
        nvlink = np.zeros(G)  # bytes/s each way at 100 % util
        on_frac = 1.0  # share of the tick the job computed (drives the main process's CPU)
        if sc == "healthy":
            dip = rng.random(S) < 0.015  # eval / logging hiccups, all ranks in lock step
            subs = 98.3 + rng.normal(0.0, 0.6, (G, S))
            subs[:, dip] = rng.uniform(40.0, 80.0, int(dip.sum()))
            nvlink = rng.uniform(8e9, 16e9, G)
        elif sc == "data_pipeline":
            on = self._bursts_on(ph, t_sub)
            on_frac = float(on.mean())
            subs = on * rng.uniform(84.0, 90.0, (G, 1)) + rng.normal(0.0, 0.8, (G, S)) * on
            sm_ratio = rng.uniform(0.85, 0.88, G)
            rx_per_pct, tx_share = 4.8e6, 0.105
            nvlink = rng.uniform(9e9, 14e9, G)
        elif sc in ("too_few_workers", "starved_no_procs"):
            ph.level = float(np.clip(ph.level + rng.normal(0.0, 1.5) + 0.1 * (37.0 - ph.level), 28.0, 45.0))
            subs = ph.level + rng.normal(0.0, 1.5, (G, 1)) + rng.normal(0.0, 6.0, (G, S))
            subs = np.clip(subs, ph.level - 16.0, ph.level + 18.0)
            sm_ratio = rng.uniform(0.88, 0.91, G)
            rx_per_pct, tx_share = 0.57e6, 0.22
            nvlink = rng.uniform(9e9, 14e9, G)
        elif sc == "storage_io":
            arrive = rng.random(S) < 0.35  # a batch landed: a short burst, ranks nearly together
            subs = arrive * rng.uniform(25.0, 44.0, (G, S)) + rng.uniform(0.0, 1.0, (G, S))
            on_frac = float(arrive.mean())
            sm_ratio = rng.uniform(0.8, 0.88, G)
            rx_per_pct, tx_share = 1.6e6, 0.13
            nvlink = rng.uniform(9e9, 14e9, G)
        elif sc == "communication":
            subs = 96.0 + rng.normal(0.0, 1.2, (G, S))
            sm_ratio = rng.uniform(0.20, 0.27, G)  # NCCL holds a few SMs; compute ~20 % of the time
            tensor_ratio, occ_ratio, dram_ratio, spin_w = 0.75, 0.16, 0.55, 2.1
            nvlink = rng.uniform(45e9, 75e9, G)
            if ph.straggler is not None:
                subs[ph.straggler] = 80.0 + rng.normal(0.0, 3.0, S)
                sm_ratio[ph.straggler] = rng.uniform(0.95, 0.98)
        elif sc == "single_card_busy":
            subs = np.zeros((G, S))
            subs[0] = 95.0 + rng.normal(0.0, 2.0, S)
            sm_ratio = np.where(np.arange(G) == 0, 0.95, 0.0)
        elif sc == "imbalanced":
            assert ph.levels is not None
            subs = ph.levels[:, None] + rng.normal(0.0, 2.5, (G, S))
            nvlink = rng.uniform(5e9, 12e9, G)
        elif sc == "launch_overhead":
            level = 28.0 + rng.normal(0.0, 1.0, (G, 1))
            subs = np.minimum(level + rng.normal(0.0, 2.5, (G, S)), 31.0)
            sm_ratio = rng.uniform(0.0011, 0.0014, G)
            tensor_ratio, occ_ratio, dram_ratio = 0.0058, 0.053, 0.0
            rx_per_pct, tx_share = 8.6e6, 0.163
            nvlink = rng.uniform(0.0, 2e7, G)
        elif sc == "memory_idle":
            blip = rng.random((G, S)) < 0.004
            subs = blip * rng.uniform(2.0, 6.0, (G, S))
            sm_ratio = np.zeros(G)
            on_frac = 0.0
        elif sc == "periodic_stall":
            on = ((t_sub + ph.offset_s) % 24.0) < 10.0
            on_frac = float(on.mean())
            subs = on * (98.2 + rng.normal(0.0, 0.5, (G, S)))
            nvlink = rng.uniform(8e9, 12e9, G)
        elif sc == "epoch_restart":
            on = ((t_sub + ph.offset_s) % _EPOCH_S) < _EPOCH_ON_S
            on_frac = float(on.mean())
            subs = on * (94.5 + rng.normal(0.0, 0.8, (G, S)))
            sm_ratio = rng.uniform(0.94, 0.96, G)
            rx_per_pct, tx_share = 0.55e6, 0.22
            nvlink = rng.uniform(8e9, 12e9, G)
            self._respawn(ph, int((t_end + ph.offset_s) // _EPOCH_S))
        elif sc == "h2d_copy":  # pageable copies: the card waits on PCIe, kernels are tiny
            subs = 15.0 + rng.normal(0.0, 1.5, (G, 1)) + rng.normal(0.0, 4.0, (G, S))
            sm_ratio = rng.uniform(0.015, 0.025, G)
            rx_per_pct, tx_share = 4.7e8, 0.01
        elif sc == "in_process_loader":  # num_workers=0: each step waits for the process to load its batch
            subs = 35.0 + rng.normal(0.0, 2.0, (G, 1)) + rng.normal(0.0, 6.0, (G, S))
            sm_ratio = rng.uniform(0.88, 0.92, G)
            rx_per_pct, tx_share = 0.6e6, 0.2
        elif sc == "checkpoint_stall":  # rank 0 in fsync; the others' NCCL kernels spin at the barrier
            subs = 99.0 + rng.normal(0.0, 0.6, (G, S))
            subs[0] = rng.uniform(0.0, 3.0, S)
            sm_ratio = rng.uniform(0.13, 0.17, G)
            sm_ratio[0] = 0.9
            tensor_ratio, occ_ratio, dram_ratio, spin_w = 0.1, 0.16, 0.2, 2.1
            rx_per_pct, tx_share = 0.0, 0.0
        elif sc == "hung_collective":  # a peer is gone: every rank spins in the collective, nothing moves
            subs = 100.0 - np.abs(rng.normal(0.0, 0.3, (G, S)))
            sm_ratio = rng.uniform(0.15, 0.19, G)
            tensor_ratio, occ_ratio, dram_ratio, spin_w = 0.0, 0.16, 0.01, 2.1
            rx_per_pct, tx_share = 0.0, 0.0
        else:  # pragma: no cover - guarded by _validate
            raise AssertionError(sc)
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
                # a healthy simulated card: not throttled (idle when it does nothing), no ECC error, no XID
                clock_event_reasons=0x1 if u < 1.0 else 0, ecc_corrected=0, ecc_uncorrected=0, xid_count=0,
            )
            for i, (u, lo, hi, s, o, te, d, m, ptx, prx, ltx, lrx, p, tc, ck) in enumerate(cols)
        ]  # fmt: skip
        gpu_of_rank = ph.rank_gpu.tolist()
        mem_of_rank = ph.rank_mem.astype(np.int64).tolist()
        main_cpu = mains.tolist()
        worker_cpu = workers.tolist()
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
        if sc == "healthy":
            main = rng.uniform(99.0, 106.0, R)
            work = rng.uniform(22.0, 40.0, (R, W))
        elif sc == "data_pipeline":
            main = 12.0 + 80.0 * on_frac + rng.normal(0.0, 3.0, R)
            work = rng.uniform(85.0, 98.0, (R, W))
        elif sc in ("too_few_workers", "starved_no_procs"):
            main = rng.uniform(38.0, 46.0, R)
            work = rng.uniform(97.0, 100.0, (R, W))
        elif sc == "storage_io":
            main = rng.uniform(2.0, 6.0, R)
            work = rng.uniform(10.0, 16.0, (R, W))  # blocked in read(): iowait, not busy
            iowait = float(rng.uniform(36.0, 46.0))
        elif sc == "communication":
            main = rng.uniform(99.0, 102.0, R)
            work = rng.uniform(15.0, 30.0, (R, W))
        elif sc == "single_card_busy":
            main = rng.uniform(99.0, 101.0, R)
            work = rng.uniform(10.0, 20.0, (R, W))
        elif sc == "imbalanced":
            main = rng.uniform(99.0, 101.0, R)
            work = rng.uniform(20.0, 35.0, (R, W))
        elif sc == "launch_overhead":
            main = rng.uniform(99.5, 100.5, R)
            work = np.zeros((R, 0))
        elif sc == "memory_idle":
            main = rng.uniform(0.0, 0.5, R)
            work = np.zeros((R, 0))
        elif sc == "h2d_copy":  # the main thread copies pageable batches (memcpy into the staging buffer)
            main = rng.uniform(97.0, 100.0, R)
            work = rng.uniform(15.0, 30.0, (R, W))
        elif sc == "in_process_loader":
            main = rng.uniform(97.0, 100.0, R)
            work = np.zeros((R, 0))
        elif sc == "checkpoint_stall":  # rank 0 blocked in fsync (D state), the others spin in NCCL
            main = rng.uniform(99.0, 101.0, R)
            main[0] = rng.uniform(3.0, 8.0)
            work = rng.uniform(0.0, 3.0, (R, W))
            iowait = float(rng.uniform(2.5, 3.5)) * 32.0 / self.cores  # one core's worth waiting
        elif sc == "hung_collective":
            main = rng.uniform(99.0, 101.0, R)
            work = rng.uniform(0.0, 2.0, (R, W))
        elif sc == "epoch_restart":  # fresh workers start up, fill a few batches, then the epoch ends
            main = 0.5 + 97.0 * on_frac + rng.normal(0.0, 0.5, R)
            work = rng.uniform(28.0, 55.0, (R, W)) * min(1.0, 1.5 * on_frac)
        else:  # periodic_stall: the job sleeps between bursts
            main = 0.5 + 99.5 * on_frac + rng.normal(0.0, 0.5, R)
            work = np.zeros((R, 0))
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
            if sc == "in_process_loader":  # the scheduler moves the loading process between cores in a tick
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
        if sc == "storage_io":  # random O_DIRECT reads, as in the real io_bound window
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
        if sc == "checkpoint_stall":  # rank 0's torch.save + fsync onto the system disk
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
