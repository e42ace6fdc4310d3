"""The rolling window keeps the last N ticks in order, as columns, with NaN for missing values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow.parquet as pq

from gpu_triage.data import H200_TRACE_2S
from gpu_triage.model import DiskSample, GpuSample, Tick
from gpu_triage.trace.row_codec import tick_from_row, tick_to_row
from gpu_triage.window import RollingWindow

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def tick(k: int, utils: dict[int, float | None], cores: int = 4, disks: tuple[str, ...] = ("sda",)) -> Tick:
    return Tick(
        ts=T0 + timedelta(seconds=2 * k),
        interval_s=2.0,
        gpus=[GpuSample(index=i, util_pct=u) for i, u in utils.items()],
        cpu_pct=[float(k)] * cores,
        disks=[DiskSample(name=d, busy_pct=float(k)) for d in disks],
    )


def test_keeps_last_capacity_ticks_in_order() -> None:
    w = RollingWindow(5)
    for k in range(12):
        w.append(tick(k, {0: float(k), 1: 100.0 - k}))
    v = w.view()
    assert len(w) == 5 and v.n == 5
    assert v.gpu["util_pct"][:, 0].tolist() == [7, 8, 9, 10, 11]
    assert v.gpu["util_pct"][:, 1].tolist() == [93, 92, 91, 90, 89]
    assert np.all(np.diff(v.t) == 2.0)
    assert w.last is not None and w.last.ts == T0 + timedelta(seconds=22)


def test_none_is_nan_and_cards_appearing_later_are_nan_before() -> None:
    w = RollingWindow(10)
    w.append(tick(0, {0: None}))
    w.append(tick(1, {0: 50.0, 3: 20.0}))
    v = w.view()
    assert v.gpu_indexes == [0, 3]
    util = v.gpu["util_pct"]
    assert np.isnan(util[0, 0]) and util[1, 0] == 50.0
    assert np.isnan(util[0, 1]) and util[1, 1] == 20.0


def test_gpu_columns_in_index_order_even_if_seen_out_of_order() -> None:
    w = RollingWindow(4)
    w.append(tick(0, {2: 20.0, 0: 0.0, 1: 10.0}))
    v = w.view()
    assert v.gpu_indexes == [0, 1, 2]
    assert v.gpu["util_pct"][0].tolist() == [0.0, 10.0, 20.0]


def test_core_and_disk_count_changes() -> None:
    w = RollingWindow(4)
    w.append(tick(0, {}, cores=2, disks=("sda",)))
    w.append(tick(1, {}, cores=4, disks=("sdb",)))
    v = w.view()
    assert v.cpu.shape == (2, 4)
    assert np.isnan(v.cpu[0, 3]) and v.cpu[1, 3] == 1.0
    assert v.disk_names == ["sda", "sdb"]
    assert np.isnan(v.disk["busy_pct"][1, 0]) and v.disk["busy_pct"][1, 1] == 1.0


def test_view_is_a_copy() -> None:
    w = RollingWindow(3)
    w.append(tick(0, {0: 1.0}))
    v = w.view()
    w.append(tick(1, {0: 2.0}))
    assert v.gpu["util_pct"][:, 0].tolist() == [1.0]


def test_real_trace_round_trips_through_ticks_and_fills_window() -> None:
    rows = pq.read_table(H200_TRACE_2S).to_pylist()
    ticks = [tick_from_row(r) for r in rows]
    # a v1 file: no job, swap or nets column, no health fields per card, no SM share per process: null (None),
    # never 0; no stack samples and no stored verdict (trace v3)
    health = dict.fromkeys(
        ("clock_event_reasons", "ecc_corrected", "ecc_uncorrected", "xid_count", "xid_last", "energy_mj")
    )
    v2 = dict(job=None, host_swap_used_bytes=None, host_swap_total_bytes=None, nets=[], stacks=[], verdict=None)
    proc_v2 = dict.fromkeys(("sm_pct", "user", "slurm_job", "pod_uid", "pod_name", "pod_namespace", "container"))
    assert [tick_to_row(t) for t in ticks] == [
        dict(r, **v2, gpus=[dict(g, **health) for g in r["gpus"]], procs=[dict(p, **proc_v2) for p in r["procs"]])
        for r in rows
    ]
    w = RollingWindow(150)
    w.extend(ticks)
    v = w.view()
    assert v.n == 150 and v.gpu_indexes == [0] and v.cpu.shape[1] == 16
    expected = [r["gpus"][0]["util_pct"] for r in rows[-150:]]
    assert np.allclose(v.gpu["util_pct"][:, 0], expected)
    # NVLink is not present on this one-card machine: null in the file, NaN here, never 0
    assert np.isnan(v.gpu["nvlink_tx_bytes_per_s"]).all()


def test_clear_forgets_everything() -> None:
    w = RollingWindow(3)
    w.append(tick(0, {0: 1.0}))
    w.clear()
    assert len(w) == 0 and w.last is None and w.view().n_gpus == 0


def test_buffers_grow_as_ticks_arrive_and_keep_their_order() -> None:
    from gpu_triage.window import FIRST_ROWS

    w = RollingWindow(1000)
    assert w.allocated_rows == FIRST_ROWS  # nothing reserved for ticks that have not come
    ticks = [tick(i, {0: float(i % 100), 1: 1.0}) for i in range(300)]
    for t in ticks:
        w.append(t)
    assert FIRST_ROWS < w.allocated_rows < 1000
    v = w.view()
    assert v.n == 300 and list(v.t) == [t.ts.timestamp() for t in ticks]
    for i in range(300, 1200):
        w.append(tick(i, {0: float(i % 100), 1: 1.0}))
    v = w.view()
    assert w.allocated_rows == 1000 and v.n == 1000
    assert list(v.t) == [tick(i, {}).ts.timestamp() for i in range(200, 1200)]
    assert v.gpu["util_pct"][:, 0].tolist() == [float(i % 100) for i in range(200, 1200)]
    assert v.cpu[:, 0].tolist() == [float(i) for i in range(200, 1200)]


def test_a_huge_window_is_capped_and_says_so() -> None:
    from gpu_triage.window import MAX_WINDOW_TICKS, window_capacity

    ticks, notice = window_capacity(604800, 0.05)
    assert ticks == MAX_WINDOW_TICKS
    assert notice == f"window capped at {MAX_WINDOW_TICKS} ticks (3 min at 0.05 s; 604800 s asked)"
    assert window_capacity(300, 2.0) == (150, None)
    assert window_capacity(300, 0.0)[0] == MAX_WINDOW_TICKS
