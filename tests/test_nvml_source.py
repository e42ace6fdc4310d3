"""The NVML reader and LiveSource against a fake NVML module (the outside world), our code running for real."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

import fake_nvml as fk
from fake_nvml import FakeCard, FakeNvml, FakeProcess, h200_box
from gpu_triage.nvmlwrap import load_nvml, return_freed_heap
from gpu_triage.sources.base import Source
from gpu_triage.sources.live import LiveSource
from gpu_triage.sources.nvml import LOST_PROBE_FIRST_S, NvmlGpuReader
from gpu_triage.trace.row_codec import tick_from_row, tick_to_row

GPM_FIELDS = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")


def reader_for(fake: FakeNvml) -> NvmlGpuReader:
    """A reader whose monotonic clock is the fake driver's clock, so both agree on elapsed time."""
    return NvmlGpuReader(load_nvml(fake), clock=lambda: fake.now_us / 1e6)


def live_for(fake: FakeNvml) -> LiveSource:
    return LiveSource(fake, clock=lambda: fake.now_us / 1e6)


def test_rates_from_cumulative_counters_are_bytes_per_second() -> None:
    fake = h200_box(2, pcie_tx_rate=3e9, pcie_rx_rate=5e8, nvlink_tx_rate_per_link=2e9, nvlink_rx_rate_per_link=1e9)
    reader = reader_for(fake)
    first = reader.sample()
    assert first[0].pcie_tx_bytes_per_s is None  # nothing to difference against yet
    assert first[0].nvlink_tx_bytes_per_s is None
    fake.advance(2.0)
    gpu = reader.sample()[1]
    assert gpu.pcie_tx_bytes_per_s == pytest.approx(3e9)
    assert gpu.pcie_rx_bytes_per_s == pytest.approx(5e8)
    # summed over all 18 links (aggregate scope), not link 0 alone; KiB counters turned into bytes
    assert gpu.nvlink_tx_bytes_per_s == pytest.approx(18 * 2e9, rel=1e-6)
    assert gpu.nvlink_rx_bytes_per_s == pytest.approx(18 * 1e9, rel=1e-6)


def test_rate_uses_actual_elapsed_time_not_nominal() -> None:
    fake = h200_box(1, pcie_tx_rate=1e9)
    reader = reader_for(fake)
    reader.sample()
    fake.advance(0.5)
    assert reader.sample()[0].pcie_tx_bytes_per_s == pytest.approx(1e9)
    fake.advance(3.0)
    assert reader.sample()[0].pcie_tx_bytes_per_s == pytest.approx(1e9)


def test_counter_reset_gives_none_for_that_tick_then_recovers() -> None:
    fake = h200_box(1, pcie_tx_rate=1e9, gpm_supported=False)  # without GPM the rates come from the counters
    reader = reader_for(fake)
    reader.sample()
    fake.advance(1.0)
    reader.sample()
    fake.advance(1.0)
    fake.cards[0].pcie_tx_bytes = 10  # driver reload / wrap: the counter went backwards
    assert reader.sample()[0].pcie_tx_bytes_per_s is None
    fake.advance(1.0)
    assert reader.sample()[0].pcie_tx_bytes_per_s == pytest.approx(1e9)


def test_without_gpm_one_batched_field_read_per_card_per_tick_and_never_pcie_throughput() -> None:
    fake = h200_box(4, gpm_supported=False)
    reader = reader_for(fake)
    before = fake.calls["nvmlDeviceGetFieldValues"]
    for _ in range(5):
        fake.advance(1.0)
        reader.sample()
    assert fake.calls["nvmlDeviceGetFieldValues"] - before == 4 * 5
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_with_gpm_the_link_rates_come_from_the_gpm_sample_and_the_counters_are_read_once() -> None:
    # 2.1 ms per card for the counters against 0.16 ms for GPM on an H200, and the PCIe counters wrap at 4 GiB
    fake = h200_box(2, pcie_tx_rate=3e9, pcie_rx_rate=24e9, nvlink_tx_rate_per_link=1e9, nvlink_rx_rate_per_link=2e9)
    reader = reader_for(fake)
    first = reader.sample()  # no GPM interval yet: the counters are read (and tell whether there is NVLink)
    assert all(g.pcie_rx_bytes_per_s is None for g in first)
    assert fake.calls["nvmlDeviceGetFieldValues"] == 2 + 2  # the link count at start, then this first tick
    for _ in range(3):
        fake.advance(2.0)
        gpus = reader.sample()
    assert fake.calls["nvmlDeviceGetFieldValues"] == 4  # not one more after the first tick
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0
    for gpu in gpus:
        assert gpu.pcie_tx_bytes_per_s == pytest.approx(3e9) and gpu.pcie_rx_bytes_per_s == pytest.approx(24e9)
        assert gpu.nvlink_tx_bytes_per_s == pytest.approx(18e9) and gpu.nvlink_rx_bytes_per_s == pytest.approx(36e9)


def test_gpm_rate_is_taken_over_the_counter_when_they_disagree() -> None:
    # a 24 GB/s copy wraps a 32-bit byte counter several times per tick; GPM's rate is the one to trust
    fake = h200_box(1, pcie_rx_rate=5e6, gpm={fk.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 23_000.0})
    reader = reader_for(fake)
    reader.sample()
    fake.advance(2.0)
    assert reader.sample()[0].pcie_rx_bytes_per_s == pytest.approx(23_000.0 * 2**20)


def test_a_link_metric_gpm_does_not_answer_falls_back_to_its_counter_alone() -> None:
    fake = h200_box(1, pcie_tx_rate=7e6, pcie_rx_rate=1e6)
    fake.cards[0].gpm_unsupported = {fk.NVML_GPM_METRIC_PCIE_TX_PER_SEC}
    reader = reader_for(fake)
    reader.sample()
    for _ in range(3):
        fake.advance(2.0)
        before = fake.calls["nvmlDeviceGetFieldValues"]
        gpu = reader.sample()[0]
        assert fake.calls["nvmlDeviceGetFieldValues"] - before == 1  # the one counter GPM does not give
    assert gpu.pcie_tx_bytes_per_s == pytest.approx(7e6) and gpu.pcie_rx_bytes_per_s == pytest.approx(1e6)
    assert reader.cards[0].gpm_link_keys == {"pcie_rx", "nvlink_tx", "nvlink_rx"}


def test_nvlink_is_none_on_a_card_without_links_even_where_gpm_answers_zero() -> None:
    fake = FakeNvml([FakeCard(nvlink_links=0, gpm={fk.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 0.0,
                                                    fk.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 0.0})])
    reader = reader_for(fake)
    reader.sample()
    fake.advance(2.0)
    gpu = reader.sample()[0]
    assert gpu.nvlink_tx_bytes_per_s is None and gpu.nvlink_rx_bytes_per_s is None
    assert gpu.pcie_tx_bytes_per_s == 0.0  # PCIe exists and is idle: 0, not n/a


def test_util_mean_min_max_from_driver_samples_since_last_timestamp() -> None:
    # the driver samples every 0.2 s; the value is 10 x seconds since start: 0, 2, 4, 6, ...
    fake = FakeNvml([FakeCard(util=lambda t: 10.0 * t)])
    reader = reader_for(fake)
    reader.sample()  # primes with the buffer up to t=0
    fake.advance(1.0)  # samples at 0.2..1.0 s: 2, 4, 6, 8, 10
    gpu = reader.sample()[0]
    assert (gpu.util_pct, gpu.util_min_pct, gpu.util_max_pct) == (pytest.approx(6.0), 2.0, 10.0)
    fake.advance(1.0)  # only the new ones: 12..20, none of the previous tick's
    gpu = reader.sample()[0]
    assert (gpu.util_pct, gpu.util_min_pct, gpu.util_max_pct) == (pytest.approx(16.0), 12.0, 20.0)


def test_fast_sawtooth_visible_in_min_max_of_one_tick() -> None:
    fake = FakeNvml([FakeCard(util=lambda t: 100.0 if int(round(t * 5)) % 2 else 0.0)])
    reader = reader_for(fake)
    reader.sample()
    fake.advance(2.0)
    gpu = reader.sample()[0]
    assert gpu.util_min_pct == 0.0 and gpu.util_max_pct == 100.0
    assert gpu.util_pct == pytest.approx(50.0)


def test_util_falls_back_to_utilization_rates_without_samples() -> None:
    fake = FakeNvml([FakeCard(util=37.0, samples_supported=False)])
    reader = reader_for(fake)
    reader.sample()
    fake.advance(2.0)
    gpu = reader.sample()[0]
    assert (gpu.util_pct, gpu.util_min_pct, gpu.util_max_pct) == (37.0, 37.0, 37.0)


def test_no_new_samples_is_not_found_and_falls_back() -> None:
    fake = FakeNvml([FakeCard(util=12.0)])
    reader = reader_for(fake)
    reader.sample()
    fake.advance(2.0)
    reader.sample()
    # no time passes: the driver raises NOT_FOUND ("no data"), which is neither an error nor a lost tick
    gpu = reader.sample()[0]
    assert gpu.util_pct == 12.0 and gpu.util_min_pct == 12.0
    assert reader.nvml.failures == {}


def test_gpm_fields_between_previous_and_new_sample_asking_only_the_eight_metrics_used() -> None:
    fake = h200_box(1)
    reader = reader_for(fake)
    first = reader.sample()[0]
    assert all(getattr(first, f) is None for f in GPM_FIELDS)  # one GPM sample: no interval yet
    fake.advance(2.0)
    gpu = reader.sample()[0]
    assert (gpu.sm_active_pct, gpu.sm_occupancy_pct, gpu.tensor_active_pct, gpu.dram_active_pct) == (
        90.0, 20.0, 40.0, 30.0,
    )
    fake.advance(2.0)
    reader.sample()
    assert fake.calls["nvmlGpmMetricsGet"] == 2
    assert fake.calls["gpm_metrics_requested"] == 2 * 8  # SM, occupancy, tensor, DRAM; PCIe and NVLink tx/rx


def test_gpm_unsupported_gives_none_for_the_four_fields_only() -> None:
    fake = FakeNvml([FakeCard(gpm_supported=False, util=50.0, pcie_tx_rate=1e6)])
    reader = reader_for(fake)
    reader.sample()
    fake.advance(2.0)
    gpu = reader.sample()[0]
    assert all(getattr(gpu, f) is None for f in GPM_FIELDS)
    assert gpu.util_pct == 50.0 and gpu.pcie_tx_bytes_per_s == pytest.approx(1e6) and gpu.power_w == 120.0
    assert fake.calls["nvmlGpmSampleGet"] == 0 and fake.calls["nvmlGpmMetricsGet"] == 0


def test_one_gpm_metric_unsupported_is_none_alone() -> None:
    fake = h200_box(1)
    del fake.cards[0].gpm[fk.NVML_GPM_METRIC_DRAM_BW_UTIL]
    reader = reader_for(fake)
    reader.sample()
    fake.advance(1.0)
    gpu = reader.sample()[0]
    assert gpu.dram_active_pct is None and gpu.sm_active_pct == 90.0


def test_unsupported_and_failing_fields_are_none_and_the_tick_survives() -> None:
    card = FakeCard(
        util=80.0,
        gpm_supported=False,  # the counters' own failures (with GPM the rates come from its sample)
        pcie_rx_rate=2e6,
        unsupported_fields={fk.NVML_FI_DEV_PCIE_COUNT_TX_BYTES},
        unsupported={"nvmlDeviceGetPowerUsage"},
        failing={"nvmlDeviceGetTemperature": fk.NVML_ERROR_UNKNOWN},
    )
    fake = FakeNvml([card])
    reader = reader_for(fake)
    reader.sample()
    fake.advance(2.0)
    gpu = reader.sample()[0]
    assert gpu.pcie_tx_bytes_per_s is None and gpu.power_w is None and gpu.temp_c is None
    assert gpu.pcie_rx_bytes_per_s == pytest.approx(2e6)
    assert gpu.util_pct == 80.0 and gpu.sm_clock_mhz == 1980.0 and gpu.mem_used_bytes == 1_000_000_000
    assert reader.nvml.failures == {"nvmlDeviceGetTemperature": 2}  # a real error is counted, not hidden


def test_no_nvlink_gives_none_and_stops_asking() -> None:
    fake = FakeNvml([FakeCard(nvlink_links=0, pcie_tx_rate=1e6)])
    reader = reader_for(fake)
    reader.sample()
    fake.advance(1.0)
    gpu = reader.sample()[0]
    assert gpu.nvlink_tx_bytes_per_s is None and gpu.nvlink_rx_bytes_per_s is None
    assert gpu.pcie_tx_bytes_per_s == pytest.approx(1e6)
    assert reader.cards[0].nvlink_mode == "none"


def test_nvlink_count_unknown_but_counters_work() -> None:
    fake = h200_box(1, nvlink_tx_rate_per_link=1e9)
    fake.cards[0].unsupported_fields = {fk.NVML_FI_DEV_NVLINK_LINK_COUNT}
    reader = reader_for(fake)
    reader.sample()
    fake.advance(1.0)
    assert reader.sample()[0].nvlink_tx_bytes_per_s == pytest.approx(18e9, rel=1e-6)


def test_gpu_lost_mid_run_others_keep_updating_and_lost_card_is_probed_rarely() -> None:
    fake = h200_box(3, pcie_tx_rate=1e9)
    source = live_for(fake)
    fake.advance(2.0)
    assert all(g.pcie_tx_bytes_per_s is not None for g in source.sample().gpus)
    fake.lose_card(1)
    before = sum(n for (i, _), n in fake.card_calls.items() if i == 1)
    ticks = 10
    for step in range(ticks):
        fake.advance(2.0)
        fake.cards[0].power_mw = 200_000 + step * 1000  # the healthy cards keep changing
        tick = source.sample()
        assert [g.index for g in tick.gpus] == [0, 1, 2]
        assert tick.gpus[1] == type(tick.gpus[1])(index=1)  # index only, every field None
        assert tick.gpus[0].power_w == 200.0 + step and tick.gpus[2].pcie_tx_bytes_per_s == pytest.approx(1e9)
    status = source.status()
    assert status.lost_gpus == {1}
    assert any("GPU 1" in m for m in status.messages)
    calls_on_lost = sum(n for (i, _), n in fake.card_calls.items() if i == 1) - before
    # 20 s with probes after 5 s, then 10 s...: a handful of cheap calls, not a full read every tick
    assert calls_on_lost <= 1 + 20 / LOST_PROBE_FIRST_S
    source.close()


def test_lost_card_that_answers_again_comes_back() -> None:
    fake = h200_box(2)
    reader = reader_for(fake)
    fake.lose_card(0)
    fake.advance(1.0)
    reader.sample()
    assert reader.lost == {0}
    fake.cards[0].lost = False
    fake.advance(LOST_PROBE_FIRST_S + 0.1)
    assert reader.sample()[0].util_pct is not None
    assert reader.lost == set()


def test_static_facts_read_once_into_host_info() -> None:
    fake = h200_box(2, name="NVIDIA H200", pcie_gen_max=5, pcie_width_max=16)
    source = live_for(fake)
    info = source.host_info()
    assert info.driver_version == "580.159.04" and info.cuda_driver_version == "13.0"
    assert [g.index for g in info.gpus] == [0, 1]
    assert info.gpus[1].uuid == fake.cards[1].uuid and info.gpus[1].pci_bus_id == fake.cards[1].pci_bus_id
    assert info.gpus[0].mem_total_bytes == fake.cards[0].mem_total and info.gpus[0].pcie_gen_max == 5
    assert info.extra["source"] == "live" and "kernel" in info.extra and "tool_version" in info.extra
    assert len(info.topology) in (0, 2)  # the topology module's matrix when it can read the fake
    names_before = fake.calls["nvmlDeviceGetName"]
    for _ in range(3):
        fake.advance(1.0)
        source.sample()
    assert fake.calls["nvmlDeviceGetName"] == names_before


def test_gpu_processes_reported_with_memory_none_when_hidden() -> None:
    fake = h200_box(2)
    fake.cards[0].processes = [FakeProcess(pid=999_999_001, usedGpuMemory=None)]
    fake.cards[1].processes = [FakeProcess(pid=999_999_002, usedGpuMemory=5 << 30)]
    source = live_for(fake)
    fake.advance(2.0)
    procs = {(p.gpu_index, p.pid): p for p in source.sample().procs}
    assert procs[(0, 999_999_001)].gpu_mem_bytes is None
    assert procs[(1, 999_999_002)].gpu_mem_bytes == 5 << 30
    assert procs[(1, 999_999_002)].cpu_pct is None  # no such process on this host: no CPU figure, no crash


def test_no_library_runs_host_only_with_a_message() -> None:
    source = LiveSource(FakeNvml(init_error=fk.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert isinstance(source, Source)
    status = source.status()
    assert status.gpu_available is False
    message = " ".join(status.messages)
    assert "No NVIDIA driver found" in message and "gpu-triage demo" in message
    assert "Shared Library Not Found" in message
    tick = source.sample()
    assert tick.gpus == [] and tick.procs == [] and len(tick.cpu_pct) > 0
    assert source.host_info().gpus == [] and source.host_info().driver_version is None
    source.close()


def test_tick_rows_round_trip_through_the_trace_model() -> None:
    fake = h200_box(2, pcie_tx_rate=1e9)
    source = live_for(fake)
    fake.advance(2.0)
    tick = source.sample()
    assert tick.interval_s == pytest.approx(2.0)
    assert tick.ts.tzinfo is not None
    assert tick_from_row(tick_to_row(tick)) == tick


# ---- card health: throttle reasons, ECC, XID events (issue 13) ----


def test_throttle_reasons_and_ecc_counts_per_card() -> None:
    fake = FakeNvml([FakeCard(clock_reasons=0x4 | 0x1, ecc_uncorrected=2, ecc_corrected=7), FakeCard()])
    first, second = reader_for(fake).sample()
    assert first.clock_event_reasons == 0x5
    assert (first.ecc_corrected, first.ecc_uncorrected) == (7, 2)
    assert second.clock_event_reasons == 0 and (second.ecc_corrected, second.ecc_uncorrected) == (0, 0)


def test_older_binding_reads_throttle_reasons_by_their_old_name() -> None:
    fake = FakeNvml([FakeCard(clock_reasons=0x40)], missing={"nvmlDeviceGetCurrentClocksEventReasons"})
    assert reader_for(fake).sample()[0].clock_event_reasons == 0x40


def test_unsupported_health_fields_are_none_never_zero() -> None:
    fake = FakeNvml([FakeCard(clock_reasons=None, ecc_uncorrected=None, event_types=None)])
    gpu = reader_for(fake).sample()[0]
    assert gpu.clock_event_reasons is None
    assert gpu.ecc_corrected is None and gpu.ecc_uncorrected is None
    assert gpu.xid_count is None and gpu.xid_last is None
    assert fake.calls["nvmlEventSetCreate"] == 0  # no set for a card that cannot report XIDs


def test_xid_events_are_counted_per_card_with_the_last_code_without_waiting() -> None:
    fake = FakeNvml([FakeCard(), FakeCard(), FakeCard(event_types=0x1)])  # card 2: no XID events
    reader = reader_for(fake)
    first = reader.sample()
    assert [(g.xid_count, g.xid_last) for g in first] == [(0, None), (0, None), (None, None)]
    fake.cards[1].xids += [13, 79]
    fake.advance(2.0)
    second = reader.sample()
    assert [(g.xid_count, g.xid_last) for g in second] == [(0, None), (2, 79), (None, None)]
    fake.cards[1].xids.append(48)
    fake.advance(2.0)
    assert (reader.sample()[1].xid_count, reader.sample()[1].xid_last) == (3, 48)  # counts since start
    assert not reader.nvml.failures  # an empty set answers TIMEOUT: normal, not a failure


def test_xid_polling_with_the_older_event_wait_and_close_frees_the_sets() -> None:
    fake = FakeNvml([FakeCard(xids=[31])], missing={"nvmlEventSetWait_v2"})
    reader = reader_for(fake)
    assert reader.sample()[0].xid_last == 31
    assert fake.calls["nvmlEventSetWait"] == 2  # the event, then TIMEOUT: nothing more pending
    reader.close()
    assert fake.calls["nvmlEventSetFree"] == 1


@pytest.mark.parametrize(
    ("mask", "only_throttle", "names"),
    [
        (None, True, None),
        (0, True, []),
        (0x1 | 0x2 | 0x10 | 0x100, True, []),  # idle, app clocks, sync boost, display: not a slowdown
        (0x4 | 0x20, True, ["power", "thermal"]),
        (0x8 | 0x40 | 0x80, True, ["hw-slowdown", "hw-thermal", "power-brake"]),
        (0x1 | 0x4, False, ["idle", "power"]),
        (0x400, False, ["0x400"]),  # a reason newer than this program
    ],
)
def test_throttle_names(mask, only_throttle, names) -> None:
    from gpu_triage.model import throttle_names

    assert throttle_names(mask, only_throttle=only_throttle) == names


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads RSS from /proc")
def test_the_heap_nvml_init_frees_goes_back_to_the_kernel() -> None:
    """What nvmlInit leaves (10 MB freed below a block still in use) is kept resident by glibc until
    malloc_trim: load_nvml's return_freed_heap gives it back. Made here with libc's own malloc and free."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "malloc_trim"):
        pytest.skip("not glibc")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(1000) for _ in range(40_000)]  # 40 MB in small blocks, as a library's start-up
    for address in blocks:
        ctypes.memset(address, 1, 1000)  # touched: resident
    pin = blocks[-1]  # still in use above the freed ones: the heap's top cannot shrink past it
    for address in blocks[:-1]:
        libc.free(address)
    before = _rss_kib()
    assert return_freed_heap()
    after = _rss_kib()
    libc.free(pin)
    assert before - after > 20_000, (before, after)


def test_energy_is_the_drivers_cumulative_counter_and_none_where_the_card_keeps_none() -> None:
    fake = FakeNvml([FakeCard(energy_mj=5_000_000), FakeCard(energy_mj=None)])
    reader = reader_for(fake)
    first, old = reader.sample()
    assert first.energy_mj == 5_000_000 and old.energy_mj is None
    fake.cards[0].energy_mj += 700_000  # 700 J more
    assert reader.sample()[0].energy_mj == 5_700_000
