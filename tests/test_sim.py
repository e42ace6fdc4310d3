"""The simulated server: deterministic, valid trace-v1 ticks, and each scenario's mechanism measurable
from the ticks alone (what the diagnosis will have to see)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from gpu_triage.diagnosis.vocab import Bottleneck, Pattern
from gpu_triage.errors import UserError
from gpu_triage.model import Tick
from gpu_triage.scenarios import REGISTRY
from gpu_triage.sources import sim_physics
from gpu_triage.sources.base import Source
from gpu_triage.sources.sim import EXPECTED, EXTRA_EXPECTED, H200_MEM_TOTAL_BYTES, SCENARIOS, SimulatedSource
from gpu_triage.trace.row_codec import host_to_json, tick_from_row, tick_to_row

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PATTERNS = set(Pattern) - {Pattern.COLLECTING}
BOTTLENECKS = set(Bottleneck)


def run(scenario: str, n: int = 60, **kw: object) -> list[Tick]:
    kw.setdefault("start", START)
    src = SimulatedSource(scenario, **kw)  # type: ignore[arg-type]
    return [src.sample() for _ in range(n)]


def gpu(ticks: list[Tick], name: str) -> np.ndarray:
    """(T, G) array of one GPU field."""
    return np.array([[getattr(g, name) for g in t.gpus] for t in ticks], dtype=float)


def cpu(ticks: list[Tick]) -> np.ndarray:
    return np.array([t.cpu_pct for t in ticks], dtype=float)


def iowait(ticks: list[Tick]) -> np.ndarray:
    return np.array([t.iowait_pct for t in ticks], dtype=float)


# ------------------------------------------------------------------------------------------ contract


def test_scenarios_and_ground_truth_use_the_fixed_vocabulary() -> None:
    assert SCENARIOS[:10] == ("healthy", "data_pipeline", "too_few_workers", "storage_io", "communication",
                              "single_card_busy", "imbalanced", "launch_overhead", "memory_idle", "periodic_stall")
    # the mechanisms real H200 jobs were misread on (issue 11), one registry record each
    assert set(SCENARIOS[10:]) == {"h2d_copy", "in_process_loader", "checkpoint_stall", "hung_collective",
                                   "starved_no_procs"}
    assert set(EXPECTED) == set(SCENARIOS) and not set(EXTRA_EXPECTED) & set(SCENARIOS)
    for pattern, bottleneck in [*EXPECTED.values(), *EXTRA_EXPECTED.values()]:
        assert pattern in PATTERNS and bottleneck in BOTTLENECKS


def test_is_a_source_named_after_its_scenario() -> None:
    src = SimulatedSource("storage_io", gpus=2, start=START)
    assert isinstance(src, Source)
    assert src.name == "sim:storage_io"
    assert src.status().gpu_available and src.status().messages
    src.close()


def test_same_seed_gives_identical_ticks() -> None:
    for scenario in SCENARIOS + tuple(EXTRA_EXPECTED):
        a = [tick_to_row(t) for t in run(scenario, 15, seed=7)]
        b = [tick_to_row(t) for t in run(scenario, 15, seed=7)]
        assert a == b, scenario


def test_different_seeds_differ() -> None:
    a = gpu(run("healthy", 10, seed=1), "util_pct")
    b = gpu(run("healthy", 10, seed=2), "util_pct")
    assert not np.array_equal(a, b)
    assert run("data_pipeline", 1, seed=1)[0].cpu_pct != run("data_pipeline", 1, seed=2)[0].cpu_pct


def test_timestamps_step_by_the_interval_from_start_in_utc() -> None:
    ticks = run("healthy", 5, interval_s=0.5)
    assert [t.ts for t in ticks] == [START + timedelta(seconds=0.5 * k) for k in range(1, 6)]
    assert all(t.interval_s == 0.5 for t in ticks)
    naive = SimulatedSource("healthy", start=datetime(2026, 3, 1, 12, 0)).sample()
    assert naive.ts.tzinfo is not None and naive.ts.utcoffset() == timedelta(0)
    assert SimulatedSource("healthy").sample().ts.tzinfo is not None  # start=None: now, UTC


@pytest.mark.parametrize("gpus,cores", [(1, 4), (8, 32), (16, 128)])
@pytest.mark.parametrize("scenario", SCENARIOS + tuple(EXTRA_EXPECTED))
def test_every_scenario_gives_valid_ticks(scenario: str, gpus: int, cores: int) -> None:
    for t in run(scenario, 20, gpus=gpus, cores=cores):
        assert [g.index for g in t.gpus] == list(range(gpus))
        assert len(t.cpu_pct) == cores and all(0.0 <= c <= 100.0 for c in t.cpu_pct)
        for g in t.gpus:
            for name in ("nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"):
                value = getattr(g, name)
                assert (value is None) == (gpus == 1), name  # one card: no links, as on the real H200
            fields = {k: getattr(g, k) for k in g.__slots__ if not k.startswith("nvlink") and k != "xid_last"}
            assert all(v is not None for v in fields.values()), fields
            assert g.xid_last is None and g.xid_count == 0  # no XID on a simulated card: no last code
            for pct in ("util_pct", "util_min_pct", "util_max_pct", "sm_active_pct", "sm_occupancy_pct",
                        "tensor_active_pct", "dram_active_pct"):  # fmt: skip
                assert 0.0 <= getattr(g, pct) <= 100.0, pct
            assert g.util_min_pct <= g.util_pct <= g.util_max_pct
            assert g.sm_active_pct <= g.util_pct + 1e-9  # SMs are busy only while a kernel runs
            assert g.mem_total_bytes == H200_MEM_TOTAL_BYTES and 0 < g.mem_used_bytes <= g.mem_total_bytes
            assert 70.0 < g.power_w <= 700.0 and 25.0 < g.temp_c < 90.0 and 345.0 <= g.sm_clock_mhz <= 1980.0
        assert t.iowait_pct is not None and 0.0 <= t.iowait_pct <= 100.0
        assert 0 < t.host_mem_used_bytes < t.host_mem_total_bytes
        assert [d.name for d in t.disks] == ["nvme0n1", "nvme1n1"]
        assert all(d.busy_pct is not None and 0.0 <= d.busy_pct <= 100.0 for d in t.disks)
        # a container (starved_no_procs): NVML maps no process ids, so the tick has none
        assert bool(t.procs) == REGISTRY[scenario].procs and all(0 <= p.gpu_index < gpus for p in t.procs)
        for p in t.procs:
            assert p.workers == len(p.worker_pids) == len(p.workers_cpu_pct)
            assert p.gpu_mem_bytes and p.gpu_mem_bytes <= H200_MEM_TOTAL_BYTES


def test_host_info_describes_an_nvlinked_h200_server() -> None:
    src = SimulatedSource("communication", gpus=8, cores=64, seed=3)
    host = src.host_info()
    assert host.cpu_count == 64 and len(host.gpus) == 8
    assert {g.name for g in host.gpus} == {"NVIDIA H200 (simulated)"}
    assert len({g.uuid for g in host.gpus}) == 8 and len({g.pci_bus_id for g in host.gpus}) == 8
    assert all(g.mem_total_bytes == 150754820096 and (g.pcie_gen_max, g.pcie_width_max) == (5, 16) for g in host.gpus)
    assert [row[i] for i, row in enumerate(host.topology)] == ["X"] * 8
    assert {v for i, row in enumerate(host.topology) for j, v in enumerate(row) if i != j} == {"NV18"}
    assert host.extra["source"] == "simulated" and host.extra["scenario"] == "communication"
    assert SimulatedSource("healthy", gpus=1).host_info().topology == [["X"]]
    assert len(SimulatedSource("healthy", gpus=np.int64(3)).host_info().gpus) == 3
    assert host_to_json(host)["source"] == "simulated"  # extra lands in the trace metadata


@pytest.mark.parametrize(
    "kwargs",
    [{"scenario": "nope"}, {"gpus": 0}, {"gpus": 17}, {"cores": 0}, {"cores": 2.5}, {"gpus": True},
     {"interval_s": 0.0}],
)
def test_bad_arguments_are_one_line_user_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(UserError) as err:
        SimulatedSource(**kwargs)  # type: ignore[arg-type]
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    with pytest.raises(ValueError):
        SimulatedSource.from_schedule([])
    with pytest.raises(ValueError):
        SimulatedSource.from_schedule([("healthy", -5)])


# --------------------------------------------------------------------------- mechanisms, from ticks


def test_healthy_is_busy_and_memory_is_partly_used() -> None:
    ticks = run("healthy")
    util, sm = gpu(ticks, "util_pct"), gpu(ticks, "sm_active_pct")
    mem = gpu(ticks, "mem_used_bytes") / gpu(ticks, "mem_total_bytes")
    assert util.mean() > 90 and np.percentile(util, 5) > 80 and sm.mean() > 85
    assert 0.6 <= mem.mean() <= 0.8
    assert gpu(ticks, "power_w").mean() > 550


def test_data_pipeline_fills_the_cpu_and_the_gpu_saws() -> None:
    ticks = run("data_pipeline", 90)
    util, cores = gpu(ticks, "util_pct"), cpu(ticks)
    assert cores.mean() > 80 and np.percentile(cores, 5) > 80  # every core, not an average of a few
    assert np.percentile(util, 95) - np.percentile(util, 5) > 50
    assert (gpu(ticks, "util_max_pct") - gpu(ticks, "util_min_pct")).max() > 70  # bursts inside a tick
    assert all(p.workers >= 1 and np.mean(p.workers_cpu_pct) > 70 for t in ticks for p in t.procs)


def test_too_few_workers_pegs_a_few_cores_and_holds_the_gpu_low_and_flat() -> None:
    for gpus in (1, 8):
        ticks = run("too_few_workers", 60, gpus=gpus, cores=32)
        util, per_core = gpu(ticks, "util_pct"), cpu(ticks).mean(axis=0)
        pegged = int((per_core > 90).sum())
        assert 1 <= pegged <= 2 * gpus and (per_core < 5).sum() >= 32 - 3 * gpus
        assert 25 <= util.mean() <= 45 and util.std() < 8
        assert all(1 <= p.workers <= 2 for p in ticks[0].procs)


def test_storage_io_saturates_the_disk_and_raises_iowait() -> None:
    ticks = run("storage_io")
    busy = np.array([max(d.busy_pct for d in t.disks) for t in ticks])
    await_ms = np.array([max(d.await_ms for d in t.disks) for t in ticks])
    util = gpu(ticks, "util_pct")
    assert busy.mean() > 90 and await_ms.mean() > 3 and 30 <= iowait(ticks).mean() <= 50
    assert util.mean() < 30 and cpu(ticks).mean() < 30  # the cores wait, they do not work
    swing = gpu(ticks, "util_max_pct") - gpu(ticks, "util_min_pct")
    assert swing.mean() > 20  # the GPU jumps when a batch lands...
    assert swing.max() < 50 and np.percentile(util, 95) - np.percentile(util, 5) < 30  # ...but stays low: steady_low


def test_communication_is_busy_on_paper_with_idle_sms_busy_links_and_one_straggler() -> None:
    ticks = run("communication", gpus=8)
    util, sm = gpu(ticks, "util_pct").mean(axis=0), gpu(ticks, "sm_active_pct").mean(axis=0)
    links = gpu(ticks, "nvlink_tx_bytes_per_s")
    straggler = int(np.argmax(sm))
    others = np.arange(8) != straggler
    assert (util[others] > 85).all() and (sm[others] < 50).all() and links.mean() > 1e9
    assert sm[straggler] > 70 and util[straggler] < util[others].min()


def test_single_card_busy_puts_every_rank_on_card_zero() -> None:
    ticks = run("single_card_busy", gpus=8)
    util = gpu(ticks, "util_pct").mean(axis=0)
    assert util[0] > 80 and (util[1:] < 5).all()
    assert all(p.gpu_index == 0 for t in ticks for p in t.procs) and len(ticks[0].procs) == 8
    mem = gpu(ticks, "mem_used_bytes")[-1]
    assert mem[0] > 10 * mem[1:].max()


def test_imbalanced_cards_sit_at_visibly_different_means() -> None:
    means = gpu(run("imbalanced", gpus=8), "util_pct").mean(axis=0)
    assert means.max() > 85 and means.min() < 50 and means.max() - means.min() > 40


def test_launch_overhead_shows_util_without_sm_activity() -> None:
    ticks = run("launch_overhead")
    util, sm = gpu(ticks, "util_pct"), gpu(ticks, "sm_active_pct")
    assert 15 <= util.mean() <= 40 and sm.max() < 5
    busy_cores = (cpu(ticks).mean(axis=0) > 90).sum()
    assert busy_cores == 8  # one launching thread per rank, the rest idle
    assert gpu(ticks, "nvlink_tx_bytes_per_s").mean() < 1e8


def test_memory_idle_holds_memory_without_work() -> None:
    ticks = run("memory_idle")
    mem = gpu(ticks, "mem_used_bytes") / gpu(ticks, "mem_total_bytes")
    assert mem.mean() > 0.6 and gpu(ticks, "util_pct").mean() < 2 and gpu(ticks, "sm_active_pct").max() < 1
    assert all(p.gpu_mem_bytes > 0.5 * H200_MEM_TOTAL_BYTES for p in ticks[0].procs)


def test_periodic_stall_repeats_with_a_clear_period_while_the_host_is_quiet() -> None:
    ticks = run("periodic_stall", 90)  # 180 s, 24 s period = 12 ticks
    util = gpu(ticks, "util_pct")[:, 0]
    assert util.max() > 90 and util.min() < 5
    centred = util - util.mean()
    ac = np.array([np.dot(centred[:-lag], centred[lag:]) / np.dot(centred, centred) for lag in range(1, 30)])
    assert int(np.argmax(ac[5:])) + 6 == 12 and ac[11] > 0.7
    stalled = util < 5
    assert cpu(ticks)[stalled].mean() < 5  # while the GPU waits, nothing on the host is busy
    assert max(d.busy_pct for t in ticks for d in t.disks) < 5 and iowait(ticks).max() < 1
    assert gpu(ticks, "nvlink_tx_bytes_per_s")[stalled].max() < 1e6


def test_periodic_stall_keeps_its_period_in_seconds_at_a_faster_tick() -> None:
    util = gpu(run("periodic_stall", 200, interval_s=0.5), "util_pct")[:, 0]
    on = util > 50
    rises = np.flatnonzero(on[1:] & ~on[:-1])
    assert np.allclose(np.diff(rises) * 0.5, 24.0, atol=0.5)


# -------------------------------------------------------------------------------------- schedules


def test_schedule_switches_scenario_at_the_phase_boundary_and_stays_in_the_last() -> None:
    src = SimulatedSource.from_schedule([("healthy", 60), ("memory_idle", 40)], gpus=4, start=START)
    ticks = [src.sample() for _ in range(80)]
    util = gpu(ticks, "util_pct").mean(axis=1)
    assert src.name == "sim:schedule"
    assert [src.scenario_at(k) for k in (1, 30, 31, 50, 80)] == [
        "healthy", "healthy", "memory_idle", "memory_idle", "memory_idle",
    ]  # fmt: skip
    assert src.expected_at(31) == EXPECTED["memory_idle"] and src.scenario == "memory_idle"
    assert (util[:29] > 85).all() and (util[31:] < 2).all()
    assert ticks[0].procs[0].pid != ticks[-1].procs[0].pid  # a different job
    assert src.host_info().extra["schedule"] == [["healthy", 60.0], ["memory_idle", 40.0]]


def test_schedule_is_deterministic_and_continuous_in_time() -> None:
    phases = [("data_pipeline", 30), ("healthy", 30)]
    a = SimulatedSource.from_schedule(phases, seed=5, start=START)
    b = SimulatedSource.from_schedule(phases, seed=5, start=START)
    ta, tb = [a.sample() for _ in range(40)], [b.sample() for _ in range(40)]
    assert [tick_to_row(t) for t in ta] == [tick_to_row(t) for t in tb]
    assert [t.ts for t in ta] == [START + timedelta(seconds=2 * k) for k in range(1, 41)]


def test_worker_pids_stay_within_a_phase() -> None:
    ticks = run("healthy", 10)
    assert len({tuple(t.procs[0].worker_pids) for t in ticks}) == 1


# ------------------------------------------------------------------------------------ trace round trip

GPU_STRUCT = pa.struct(
    [("index", pa.uint16())]
    + [(n, pa.float32()) for n in ("util_pct", "util_min_pct", "util_max_pct", "sm_active_pct",
                                    "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")]
    + [("mem_used_bytes", pa.uint64()), ("mem_total_bytes", pa.uint64())]
    + [(n, pa.float64()) for n in ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s",
                                    "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")]
    + [(n, pa.float32()) for n in ("power_w", "temp_c", "sm_clock_mhz")]
    # trace v2: the card's health (docs/trace-v2.md)
    + [(n, pa.uint64()) for n in ("clock_event_reasons", "ecc_corrected", "ecc_uncorrected")]
    + [(n, pa.uint32()) for n in ("xid_count", "xid_last")]
    + [("energy_mj", pa.uint64())]
)  # fmt: skip
DISK_STRUCT = pa.struct(
    [("name", pa.string()), ("busy_pct", pa.float32()), ("await_ms", pa.float32())]
    + [(n, pa.float64()) for n in ("read_bytes_per_s", "write_bytes_per_s", "reads_per_s", "writes_per_s")]
)
PROC_STRUCT = pa.struct(
    [("pid", pa.uint32()), ("gpu_index", pa.uint16()), ("name", pa.string()), ("gpu_mem_bytes", pa.uint64()),
     ("cpu_pct", pa.float32()), ("workers", pa.uint16()), ("workers_cpu_pct", pa.list_(pa.float32())),
     ("worker_pids", pa.list_(pa.uint32())),
     ("sm_pct", pa.float32())]  # trace v2: the process's SM share
    + [(n, pa.string()) for n in ("user", "slurm_job", "pod_uid", "pod_name", "pod_namespace", "container")]
)  # fmt: skip
TRACE_V1 = pa.schema(
    [("ts", pa.timestamp("us", tz="UTC")), ("interval_s", pa.float64()), ("gpus", pa.list_(GPU_STRUCT)),
     ("cpu_pct", pa.list_(pa.float32())), ("iowait_pct", pa.float32()), ("host_mem_used_bytes", pa.uint64()),
     ("host_mem_total_bytes", pa.uint64()), ("disks", pa.list_(DISK_STRUCT)), ("procs", pa.list_(PROC_STRUCT)),
     # trace v2: the host's swap and network interfaces (docs/trace-v2.md)
     ("host_swap_used_bytes", pa.uint64()), ("host_swap_total_bytes", pa.uint64()),
     ("nets", pa.list_(pa.struct([("name", pa.string()), ("rx_bytes_per_s", pa.float64()),
                                  ("tx_bytes_per_s", pa.float64())])))]
)  # fmt: skip


def _close(a: object, b: object) -> bool:
    """Equal up to float32 rounding (the trace stores percentages as float32)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-6, abs=1e-6)
    return a == b


@pytest.mark.parametrize("gpus", [1, 8])
def test_ticks_round_trip_through_arrow_with_the_trace_v1_types(gpus: int) -> None:
    src = SimulatedSource.from_schedule([(s, 4) for s in SCENARIOS], gpus=gpus, cores=16, start=START)
    ticks = [src.sample() for _ in range(2 * len(SCENARIOS))]
    table = pa.Table.from_pylist([tick_to_row(t) for t in ticks], schema=TRACE_V1)  # raises on a misfit type
    back = [tick_from_row(row) for row in table.to_pylist()]
    for original, restored in zip(ticks, back, strict=True):
        assert _close(tick_to_row(original), tick_to_row(restored))


def test_epoch_restart_respawns_workers_each_epoch() -> None:
    src = SimulatedSource("epoch_restart", gpus=2, cores=16, start=START)
    ticks = [src.sample() for _ in range(45)]  # 90 s: 12 epochs of 7.5 s
    util = gpu(ticks, "util_pct")[:, 0]
    assert util.max() > 85 and (util < 1).sum() >= 8  # whole ticks at 0 while the new workers start
    pid_sets = [tuple(t.procs[0].worker_pids) for t in ticks]
    changes = sum(a != b for a, b in zip(pid_sets, pid_sets[1:], strict=False))
    assert 10 <= changes <= 13 and len({t.procs[0].pid for t in ticks}) == 1  # same rank, new workers
    assert src.expected_at(1) == EXTRA_EXPECTED["epoch_restart"] and "epoch_restart" not in SCENARIOS


def test_every_scenario_has_its_physics_and_nothing_else_does() -> None:
    # the simulator keeps one entry per scenario (cards, cores, disks, phase set-up); a scenario added to the
    # registry without one would fail on its first tick
    assert set(sim_physics.PHYSICS) == set(REGISTRY)


def test_the_ranks_on_one_card_share_its_time_and_a_rank_alone_on_its_card_has_the_card_s() -> None:
    busy = SimulatedSource("single_card_busy", gpus=4, cores=16, start=START)
    tick = [busy.sample() for _ in range(5)][-1]
    on_card0 = [p for p in tick.procs if p.gpu_index == 0]
    assert len(on_card0) == 4 and len({p.sm_pct for p in on_card0}) == 1  # every rank on cuda:0
    assert sum(p.sm_pct or 0.0 for p in on_card0) == pytest.approx(tick.gpus[0].util_pct)
    alone = SimulatedSource("healthy", gpus=4, cores=16, start=START)  # one rank per card: the card's time
    tick = [alone.sample() for _ in range(3)][-1]
    assert all(p.sm_pct == pytest.approx(tick.gpus[p.gpu_index].util_pct) for p in tick.procs)


def test_a_card_at_its_power_cap_says_so_as_the_h200s_did() -> None:
    """The lab's H200s set the software power cap bit at 650 W and more, never at 550-600 W: a healthy dense
    job (~680 W) shows it, a communication-bound one (~400 W) and an idle card do not."""
    busy = SimulatedSource("healthy", gpus=4, cores=16, start=START)
    cards = [g for t in [busy.sample() for _ in range(20)] for g in t.gpus]
    assert all(bool(g.clock_event_reasons & 0x4) == (g.power_w >= 650.0) for g in cards)
    assert sum(bool(g.clock_event_reasons & 0x4) for g in cards) > len(cards) // 2
    talk = SimulatedSource("communication", gpus=4, cores=16, start=START)
    quiet = [g for t in [talk.sample() for _ in range(20)] for g in t.gpus if g.power_w < 550.0]
    assert quiet and not any(g.clock_event_reasons & 0x4 for g in quiet)
