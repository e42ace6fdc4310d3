"""Edge cases never raise and give a sane verdict; the period finder and the pre-Hopper fallback."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_triage.diagnosis.engine import COLLECTING, diagnose
from gpu_triage.diagnosis.patterns import PATTERNS, autoperiods
from gpu_triage.diagnosis.rules import BOTTLENECKS
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.model import GpuSample, ProcSample, Tick
from gpu_triage.window import RollingWindow

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TH = Thresholds()


def _window(ticks: list[Tick], cap: int = 150) -> RollingWindow:
    w = RollingWindow(cap)
    w.extend(ticks)
    return w


def _tick(k: int, gpus: list[GpuSample], cpu: list[float] | None = None, procs: list[ProcSample] | None = None) -> Tick:
    return Tick(ts=T0 + timedelta(seconds=2 * k), interval_s=2.0, gpus=gpus, cpu_pct=cpu or [], procs=procs or [])


def _sane(v) -> None:  # type: ignore[no-untyped-def]
    assert (v.pattern in PATTERNS or v.pattern == COLLECTING) and v.bottleneck in BOTTLENECKS
    assert 0.0 <= v.confidence <= 1.0 and v.evidence


def test_empty_window() -> None:
    v = diagnose(RollingWindow(10).view(), TH)
    _sane(v)
    assert (v.pattern, v.bottleneck) == ("idle", "none") and v.confidence <= 0.2


def test_host_only_no_gpus() -> None:
    v = diagnose(_window([_tick(k, [], cpu=[50.0] * 8) for k in range(20)]).view(), TH, 8)
    _sane(v)
    assert v.bottleneck == "none" and "no GPU data" in v.evidence[0]


def test_one_tick_and_all_nan_fields() -> None:
    v = diagnose(_window([_tick(1, [GpuSample(0, util_pct=50.0)])]).view(), TH)
    _sane(v)
    v = diagnose(_window([_tick(k, [GpuSample(0), GpuSample(1)]) for k in range(30)]).view(), TH)
    _sane(v)
    assert v.confidence <= 0.2


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 40),
    g=st.integers(0, 3),
    c=st.integers(0, 4),
    vals=st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=1, max_size=20),
)
def test_random_ticks_never_raise(n: int, g: int, c: int, vals: list[float | None]) -> None:
    ticks = []
    for k in range(n):
        pick = lambda i, k=k: vals[(k * 7 + i) % len(vals)]  # noqa: E731
        gpus = [GpuSample(i, util_pct=pick(i), util_min_pct=pick(i + 1), util_max_pct=pick(i + 2),
                          sm_active_pct=pick(i + 3), mem_used_bytes=None, mem_total_bytes=None) for i in range(g)]
        cpu = [v if v is not None else 0.0 for v in (pick(j) for j in range(c))]
        ticks.append(_tick(k, gpus, cpu=cpu, procs=[ProcSample(pid=9, gpu_index=0, cpu_pct=pick(5))] if g else []))
    _sane(diagnose(_window(ticks, 20).view(), TH, c or None))


def test_autoperiod_finds_a_square_wave_and_rejects_noise() -> None:
    wave = np.tile([95.0] * 3 + [0.0] * 5, 10)  # period 8 ticks
    p = autoperiods(wave[:, None], TH.sawtooth_min_acf)[0]
    assert p is not None and p.ticks == 8.0
    noise = np.random.default_rng(0).uniform(0, 100, 80)
    assert autoperiods(noise[:, None], TH.sawtooth_min_acf)[0] is None
    assert autoperiods(np.full((50, 1), 40.0), TH.sawtooth_min_acf)[0] is None


def test_fast_sawtooth_inside_the_tick_is_a_sawtooth_faster_than_the_tick() -> None:
    ticks = [_tick(k, [GpuSample(0, util_pct=45.0 + (k % 3), util_min_pct=0.0, util_max_pct=97.0, sm_active_pct=40.0)],
                   cpu=[95.0] * 8) for k in range(30)]
    v = diagnose(_window(ticks).view(), TH, 8)
    assert v.pattern == "sawtooth" and v.period_s is None
    assert any("faster than the tick" in e for e in v.evidence)
    assert v.bottleneck == "data_pipeline"


def test_without_sm_activity_launch_overhead_is_a_low_confidence_guess() -> None:
    """Pre-Hopper: no GPM, so tiny kernels cannot be told from idle SMs; the verdict says so."""
    def ticks(sm: float | None) -> list[Tick]:
        return [_tick(k, [GpuSample(0, util_pct=28.0, util_min_pct=22.0, util_max_pct=31.0, sm_active_pct=sm,
                                    mem_used_bytes=2 * 10**9, mem_total_bytes=80 * 10**9)],
                      cpu=[100.0] + [3.0] * 15, procs=[ProcSample(pid=7, gpu_index=0, cpu_pct=100.0, workers=0)])
                for k in range(30)]
    with_sm = diagnose(_window(ticks(0.1)).view(), TH, 16)
    without = diagnose(_window(ticks(None)).view(), TH, 16)
    assert with_sm.bottleneck == "launch_overhead"
    assert without.bottleneck == "launch_overhead" and without.confidence < with_sm.confidence
    assert any("SM activity not available" in e for e in without.evidence)
    assert math.isnan(without.facts["sm_active_mean_pct"])


def test_worker_respawn_each_epoch_advises_persistent_workers() -> None:
    ticks = []
    for k in range(30):
        on = k % 3 != 0
        epoch = k // 3
        procs = [ProcSample(pid=7, gpu_index=0, cpu_pct=90.0 if on else 0.0, workers=4,
                            workers_cpu_pct=[40.0] * 4, worker_pids=[100 + 10 * epoch + i for i in range(4)])]
        ticks.append(_tick(k, [GpuSample(0, util_pct=45.0 if on else 0.0, util_min_pct=0.0,
                                         util_max_pct=95.0 if on else 0.0, sm_active_pct=40.0 if on else 0.0)],
                           cpu=[20.0] * 16, procs=procs))
    v = diagnose(_window(ticks).view(), TH, 16)
    assert (v.pattern, v.bottleneck) == ("sawtooth", "data_pipeline")
    assert v.period_s == 6.0
    assert any("persistent_workers=True" in a for a in v.advice)


def test_every_rank_on_card_zero_advises_set_device() -> None:
    ticks = []
    for k in range(30):
        gpus = [GpuSample(0, util_pct=97.0, util_min_pct=95.0, util_max_pct=99.0, sm_active_pct=90.0)]
        gpus += [GpuSample(i, util_pct=0.0, util_min_pct=0.0, util_max_pct=0.0, sm_active_pct=0.0) for i in range(1, 4)]
        procs = [ProcSample(pid=50 + r, gpu_index=0, cpu_pct=100.0, workers=0) for r in range(4)]
        ticks.append(_tick(k, gpus, cpu=[100.0] * 4 + [5.0] * 12, procs=procs))
    v = diagnose(_window(ticks).view(), TH, 16)
    assert v.pattern == "single_card_busy" and v.gpus == [0]
    assert any("4 processes share one card" in a and "set_device(local_rank)" in a for a in v.advice)
