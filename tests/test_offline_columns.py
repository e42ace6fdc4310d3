"""offline/columns.py builds, from Arrow batches, the very views a RollingWindow gives for the same ticks:
every field, swap and network interfaces too, so evidence read from any of them cannot differ between the
dashboard and ``diagnose FILE``. (``ticks_ever`` is the live window's own count since it started and is
not compared: the offline window starts afresh at every stretch.)"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpu_triage.model import DiskSample, GpuSample, NetSample, Tick
from gpu_triage.offline.columns import RecordingColumns
from gpu_triage.offline.judge import load_trace
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.batches import as_float
from gpu_triage.trace.schema import rows_to_ticks, ticks_to_batch
from gpu_triage.window import RollingWindow, WindowView

DATA = Path(__file__).parent / "data"


def _same(a: WindowView, b: WindowView, where: str) -> None:
    for f in dataclasses.fields(WindowView):
        if f.name == "ticks_ever":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, dict):
            assert x.keys() == y.keys(), (where, f.name)
            for k in x:
                np.testing.assert_array_equal(x[k], y[k], err_msg=f"{where} {f.name}[{k}]")
        elif isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f"{where} {f.name}")
        else:
            assert list(x) == list(y[:]), (where, f.name)
            assert [x[i] for i in range(len(x))] == [y[i] for i in range(len(y))], (where, f.name)


def _compare(ticks: list[Tick], capacity: int, batch_rows: int) -> int:
    """Both fed the ticks as a recording holds them (its float32 fields rounded), in batches of ``batch_rows``."""
    window = RollingWindow(capacity)
    cols = RecordingColumns()
    checked = 0
    for start in range(0, len(ticks), batch_rows):
        part = ticks[start:start + batch_rows]
        batch = ticks_to_batch(part)
        cols.push(batch, as_float(batch.column("interval_s")), keep=capacity - 1)
        for k, tick in enumerate(rows_to_ticks(batch)):
            window.append(tick)
            p = start + k
            _same(window.view(), cols.view(max(0, p - capacity + 1), p + 1), f"tick {p}")
            checked += 1
    return checked


def _varied_ticks(n: int) -> list[Tick]:
    """Simulated ticks whose cards, cores, disks, interfaces and swap come and go."""
    src = SimulatedSource("data_pipeline", gpus=3, cores=6, seed=4, interval_s=2.0,
                          start=datetime(2026, 1, 1, tzinfo=UTC))
    out = []
    for i in range(n):
        t = src.sample()
        if i % 7 == 3:
            t.gpus = [g for g in t.gpus if g.index != 1]  # a card missing from one tick
        if i >= 20:
            t.gpus = [*t.gpus, GpuSample(index=9, util_pct=50.0)]  # a card appearing late, out of index order
            t.disks = [*t.disks, DiskSample(name="nvme9n1", busy_pct=10.0)]
            t.cpu_pct = [*t.cpu_pct, 42.0, 43.0]
        if i % 5 == 0:
            t.nets = [*t.nets, NetSample(name="ib0", rx_bytes_per_s=1e9, tx_bytes_per_s=None)]
        if i % 4 == 1:
            t.host_swap_used_bytes = None
        if i % 9 == 2:
            t.nets = []
        out.append(t)
    return out


@pytest.mark.parametrize(("capacity", "batch_rows"), [(10, 4), (10, 25), (64, 7)])
def test_views_equal_the_rolling_window(capacity: int, batch_rows: int) -> None:
    ticks = _varied_ticks(60)
    assert any(t.nets for t in ticks) and any(t.host_swap_used_bytes for t in ticks)
    assert _compare(ticks, capacity, batch_rows) == 60


def test_views_equal_on_a_real_recording_with_nets() -> None:
    tr = load_trace(DATA / "h200x2-val-ddp-ckpt-1s.parquet")
    assert any(t.nets for t in tr.ticks)
    assert _compare(tr.ticks, 30, 16) == len(tr.ticks)


def test_a_v1_batch_without_swap_or_nets_reads_as_none() -> None:
    ticks = _varied_ticks(5)
    batch = ticks_to_batch(ticks)
    v1 = pa.RecordBatch.from_arrays(
        [batch.column(n) for n in batch.schema.names if n not in ("host_swap_used_bytes", "host_swap_total_bytes",
                                                                   "nets", "job")],
        names=[n for n in batch.schema.names if n not in ("host_swap_used_bytes", "host_swap_total_bytes", "nets",
                                                          "job")])
    cols = RecordingColumns()
    cols.push(v1, as_float(v1.column("interval_s")), keep=9)
    view = cols.view(0, 5)
    assert list(view.swap[:]) == [(None, None)] * 5
    assert list(view.nets[:]) == [[]] * 5
    assert list(view.jobs[:]) == [None] * 5
