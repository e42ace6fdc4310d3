"""A simulated multi-GPU server: ground truth for the tests and the ``demo`` subcommand.

:class:`SimulatedSource` plays one known case (a *scenario*) on N simulated H200 cards and a host of
M cores, deterministically from a seed, and fills every trace-v1 field the way a real H200 fills it.
Its ticks are plain :class:`~gpu_triage.model.Tick` objects, so the dashboard, the recorder and the
diagnosis cannot tell them from live ones, and :data:`EXPECTED` says what a correct diagnosis must find.
What each scenario's cards, cores and disks do is in :mod:`gpu_triage.sources.sim_physics`.

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
from datetime import UTC, datetime, timedelta

import numpy as np

from gpu_triage.errors import UserError
from gpu_triage.model import GpuInfo, GpuSample, HostInfo, NetSample, ProcSample, Tick
from gpu_triage.scenarios import REGISTRY, SCENARIOS
from gpu_triage.sources.base import SourceStatus
from gpu_triage.sources.sim_physics import PHYSICS, Ctx, Phase, cores_busy, disks_busy

EXPECTED: dict[str, tuple[str, str]] = {n: REGISTRY[n].expected for n in SCENARIOS}

# Cases beyond those of the demo and the CLI: playable by name, with their own ground truth.
EXTRA_EXPECTED: dict[str, tuple[str, str]] = {n: s.expected for n, s in REGISTRY.items() if not s.listed}
_ALL_EXPECTED = {**EXPECTED, **EXTRA_EXPECTED}

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


class SimulationError(UserError, ValueError):
    """Bad arguments for the simulation: one line for the CLI, a ValueError for callers."""


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
        self._energy_mj = np.full(self.gpus, 3.6e9) + layout.uniform(0.0, 1e9, self.gpus)  # NVML's counter, mJ
        self._phase_no = -1
        self._phase: Phase | None = None
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
            gpu_available=True, gpus_expected=self.gpus, gpus_seen=self.gpus,  # its kernel lists what it has
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

    def _begin_phase(self, scenario: str, start_s: float) -> Phase:
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
        phase = Phase(
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
        setup = PHYSICS[scenario].setup
        if setup is not None:
            setup(phase, rng, G)
        return phase

    # ------------------------------------------------------------------------------------------ ticks

    def _tick(self, k: int, ph: Phase) -> Tick:
        rng, G, S, dt = self._rng, self.gpus, self._subs, self.interval_s
        t_end = k * dt
        t_sub = t_end - dt + (np.arange(S) + 0.5) * (dt / S) - ph.start_s  # phase-relative sample times
        sc = ph.scenario

        # --- GPU-Util driver samples (G, S) and what the SMs did with that time: the scenario's physics
        shape = PHYSICS[sc].gpu(Ctx(self, ph, rng, G, S, t_sub, t_end))
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
        cpu, mains, workers, iowait = cores_busy(Ctx(self, ph, rng, G, S, None, 0.0), on_frac, self._core_perm)
        disks = disks_busy(sc, rng)
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
