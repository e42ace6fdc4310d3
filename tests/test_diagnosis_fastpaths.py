"""The engine's shortcuts around numpy's slow paths give numpy's own values, bit for bit: a verdict must not
depend on which of the two computed it (the offline and live readings are compared verdict by verdict)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gpu_triage.diagnosis.engine import nanmedian0
from gpu_triage.diagnosis.facts import LINK_FIELDS, link_traffic
from gpu_triage.diagnosis.patterns import column_nanmeans, nanmax, nanmean, percentiles


def _arrays(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        a = rng.normal(size=(int(rng.integers(1, 12)), int(rng.integers(1, 8)))) * 10.0 ** int(rng.integers(-3, 12))
        if rng.random() < 0.4:
            a = np.round(a)  # ties and repeated values
        if rng.random() < 0.2:
            a = -0.0 * np.abs(a)  # signed zeros
        a[rng.random(a.shape) < rng.random() * 0.8] = np.nan
        if rng.random() < 0.2:
            a[rng.random(a.shape) < 0.1] = np.inf
            a[rng.random(a.shape) < 0.1] = -np.inf
        out.append(a)
    return out


@pytest.mark.slow
def test_nanmedian0_is_numpys_nanmedian() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)  # numpy warns on an all-NaN column
        for a in _arrays(0, 5000):
            want, got = np.nanmedian(a, axis=0), nanmedian0(a)
            assert np.array_equal(want, got, equal_nan=True), a
            assert np.array_equal(np.signbit(want), np.signbit(got)), a
    assert nanmedian0(np.zeros((0, 3))).shape == (3,)


def test_link_traffic_is_the_sum_of_nan_to_num() -> None:
    for n, a in enumerate(_arrays(1, 2000)):
        rng = np.random.default_rng(n)
        gpu = {"util_pct": np.zeros(a.shape)}
        for name in LINK_FIELDS:
            with np.errstate(invalid="ignore"):
                gpu[name] = a * rng.choice([0.0, 1.0, 3.0])  # inf * 0: NaN, one more missing value
            gpu[name][rng.random(a.shape) < 0.3] = np.nan
        want = np.zeros(a.shape)
        have = np.zeros(a.shape, dtype=bool)
        for name in LINK_FIELDS:
            have |= ~np.isnan(gpu[name])
            with np.errstate(over="ignore", invalid="ignore"):
                want += np.nan_to_num(gpu[name])
        want = np.where(have, want, np.nan)
        with np.errstate(over="ignore", invalid="ignore"):
            got = link_traffic(gpu)
        assert np.array_equal(want, got, equal_nan=True), gpu


def test_column_nanmeans_are_each_columns_nanmean() -> None:
    for a in _arrays(2, 3000):
        with np.errstate(invalid="ignore"):  # inf + -inf
            want = [nanmean(a[:, j]) for j in range(a.shape[1])]
            got = column_nanmeans(a)
        assert np.array_equal(np.array(want), got, equal_nan=True), a
    # long columns too: numpy adds 8 values at a time past 8 of them, in blocks of 128
    rng = np.random.default_rng(3)
    for rows in (9, 130, 300, 1000):
        a = rng.normal(size=(rows, 16)) * 1e9
        assert np.array_equal(column_nanmeans(a), [nanmean(a[:, j]) for j in range(16)])


@pytest.mark.slow
def test_percentiles_are_numpys_linear_percentiles() -> None:
    rng = np.random.default_rng(5)
    for a in _arrays(4, 4000):
        qs = [5, 95] if rng.random() < 0.7 else [float(x) for x in rng.uniform(0, 100, size=3)]
        axis = int(rng.integers(0, 2))
        with np.errstate(invalid="ignore"):  # inf - inf between neighbours: NaN in both
            want, got = np.percentile(a, qs, axis=axis), percentiles(a, qs, axis=axis)
        assert np.array_equal(want, got, equal_nan=True), (a, qs, axis)
        assert np.array_equal(np.signbit(want), np.signbit(got)), (a, qs, axis)
        flat = a[~np.isnan(a)]
        if flat.size:
            with np.errstate(invalid="ignore"):
                assert np.array_equal(np.percentile(flat, [5, 95]), percentiles(flat, [5, 95]), equal_nan=True)


def test_nanmax_is_numpys_nanmax() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)  # numpy warns on an all-NaN slice
        for a in _arrays(6, 3000):
            for axis in (None, 0, 1):
                assert np.array_equal(np.nanmax(a, axis=axis), nanmax(a, axis=axis), equal_nan=True), (a, axis)


def test_nanmean_is_numpys_nanmean() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)  # all-NaN slices, inf - inf
        for a in _arrays(7, 3000):
            for axis in (None, 0, 1):
                want, got = np.nanmean(a, axis=axis), nanmean(a, axis=axis)
                assert np.array_equal(want, got, equal_nan=True), (a, axis)
            t = np.asfortranarray(a)  # another memory layout, as a view's column slice may have
            assert np.array_equal(np.nanmean(t, axis=0), nanmean(t, axis=0), equal_nan=True), a
            assert np.array_equal(np.nanmean(a[:, ::2], axis=0), nanmean(a[:, ::2], axis=0), equal_nan=True), a


def test_pylist_of_list_columns_is_to_pylist() -> None:
    import pyarrow as pa

    from gpu_triage.offline.columns import _pylist

    rows = [[1, 2], None, [], [3, None, 5], [7]] * 3
    for typ in (pa.list_(pa.uint32()), pa.list_(pa.float32()), pa.large_list(pa.int64())):
        arr = pa.array(rows, type=typ)
        for part in (arr, arr.slice(1), arr.slice(3, 7), arr.slice(5, 0)):
            assert _pylist(part) == part.to_pylist()
    struct = pa.array([{"w": [1, 2]}, None, {"w": None}, {"w": [4]}], type=pa.struct([("w", pa.list_(pa.uint32()))]))
    child = struct.slice(1).field("w")  # a struct's field, as the process lists are read
    assert _pylist(child) == child.to_pylist()
    assert _pylist(pa.array([1, None, 3])) == [1, None, 3]
    # a null list backed by values (allowed by Arrow): its values are not anyone's
    backed = pa.ListArray.from_arrays(pa.array([0, 2, 4, 5], pa.int32()), pa.array([1, 2, 3, 4, 5], pa.uint32()),
                                      mask=pa.array([False, True, False]))
    assert _pylist(backed) == backed.to_pylist() == [[1, 2], None, [5]]


def test_nanargmax_is_numpys_nanargmax() -> None:
    from gpu_triage.diagnosis.facts import _nanargmax

    for a in _arrays(8, 3000):
        for row in a:
            if np.isnan(row).all():
                continue  # numpy raises there; host_facts checks first
            assert _nanargmax(row) == int(np.nanargmax(row)), row


def test_unit_is_numpys_clip() -> None:
    from gpu_triage.diagnosis.patterns import _unit

    values = [0.0, -0.0, 1.0, 0.5, 1e-300, -1e-300, 1.0 - 2**-53, 1.0 + 2**-52, 2.0, -3.0, np.inf, -np.inf, np.nan]
    values += np.random.default_rng(9).normal(0.5, 0.7, 2000).tolist()
    for x in values:
        want, got = float(np.clip(x, 0.0, 1.0)), _unit(x)
        assert (want == got and np.signbit(want) == np.signbit(got)) or (np.isnan(want) and np.isnan(got)), x


def _proc_facts_plainly(procs: list, stall: np.ndarray, peg: float, other_cards_busy: bool,
                        running: np.ndarray | None) -> tuple:
    """proc_facts' counts as first written (one generator per process), the reference for its one-pass loop."""
    import math
    from statistics import median

    workers = respawns = 0
    pegged_t, total_t, procs_t, main_cpu = [], [], [], []
    last: dict[int, frozenset[int]] = {}
    seen: set[int] = set()
    by_card: dict[int, set[int]] = {}
    for k, tick in enumerate(procs):
        if not tick:
            continue
        pegged = total = 0
        busiest = float("nan")
        for p in tick:
            seen.add(p.gpu_index)
            by_card.setdefault(p.gpu_index, set()).add(p.pid)
            cpus = [c for c in p.workers_cpu_pct if c is not None]
            n = max(int(p.workers or 0), len(cpus))
            workers = max(workers, n)
            total += n
            pegged += sum(1 for c in cpus if c >= peg)
            if p.cpu_pct is not None and not p.cpu_pct <= busiest:
                busiest = float(p.cpu_pct)
            if p.worker_pids:
                pids = frozenset(p.worker_pids)
                if last.get(p.pid) and not (last[p.pid] & pids):
                    respawns += 1
                last[p.pid] = pids
        pegged_t.append(pegged)
        total_t.append(total)
        procs_t.append(len({p.pid for p in tick}))
        if (k >= stall.size or stall[k]) and (running is None or k >= running.size or running[k]) \
                and not math.isnan(busiest):
            main_cpu.append(busiest)
    ranks = len(by_card[next(iter(seen))]) if len(seen) == 1 and not other_cards_busy else 0
    return (bool(procs_t), workers, respawns, int(median(procs_t)) if procs_t else 0,
            int(median(pegged_t)) if procs_t else 0, int(median(total_t)) if procs_t else 0,
            median(main_cpu) if main_cpu else float("nan"), ranks)


def test_proc_facts_counts_as_written_plainly() -> None:
    from gpu_triage.diagnosis.facts import proc_facts
    from gpu_triage.diagnosis.thresholds import Thresholds
    from gpu_triage.model import ProcSample

    th = Thresholds()
    rng = np.random.default_rng(10)
    for _ in range(400):
        memo: dict = {}
        ticks = int(rng.integers(0, 12))
        procs = []
        for _t in range(ticks):
            tick = []
            for _p in range(int(rng.integers(0, 4))):
                nw = int(rng.integers(0, 5))
                cpus = [None if rng.random() < 0.2 else float(rng.choice([0.0, 50.0, th.core_pegged_pct, 100.0]))
                        for _w in range(nw)]
                tick.append(ProcSample(int(rng.integers(1, 4)), int(rng.integers(0, 3)), "python", None,
                                       None if rng.random() < 0.3 else float(rng.integers(0, 200)),
                                       None if rng.random() < 0.3 else int(rng.integers(0, 6)), cpus,
                                       [101, 102] if rng.random() < 0.4 else  # the same workers again
                                       [int(x) for x in rng.integers(100, 110, size=int(rng.integers(0, 3)))]))
            procs.append(tick)
        stall = rng.random(int(rng.integers(0, ticks + 2))) < 0.7
        running = None if rng.random() < 0.5 else rng.random(int(rng.integers(0, ticks + 2))) < 0.7
        busy = bool(rng.random() < 0.3)
        want = _proc_facts_plainly(procs, stall, th.core_pegged_pct, busy, running)
        # without a memo, then twice with one (the second reads every tick's tally from the first)
        for f in (proc_facts(procs, stall, th, busy, running), proc_facts(procs, stall, th, busy, running, memo=memo),
                  proc_facts(procs, stall, th, busy, running, memo=memo)):
            got = (f.seen, f.workers, f.respawns, f.processes, f.workers_pegged, f.workers_total, f.main_cpu,
                   f.ranks_on_first_card)
            assert np.array_equal(np.array(got, dtype=float), np.array(want, dtype=float), equal_nan=True), (got, want)


def test_proc_facts_over_a_sliding_window_with_the_windows_memo_are_those_without() -> None:
    """Consecutive verdicts share each tick's tally through the window's memo: every stretch, any children
    ruled out as loaders (a tally of their own), the same facts as computed afresh."""
    from dataclasses import astuple

    from gpu_triage.diagnosis.facts import proc_facts
    from gpu_triage.diagnosis.thresholds import Thresholds
    from gpu_triage.model import ProcSample

    th = Thresholds()
    rng = np.random.default_rng(13)
    memo: dict = {}
    procs: list[list[ProcSample]] = []
    for k in range(300):
        procs.append([ProcSample(int(rng.integers(1, 5)), int(rng.integers(0, 3)), "python", None,
                                 float(rng.integers(0, 200)), 2,
                                 [float(rng.choice([0.0, 100.0])), 50.0],
                                 [100 + k // 40, 200 + int(rng.integers(0, 3))])
                      for _p in range(int(rng.integers(0, 4)))])
        lo = max(0, len(procs) - int(rng.integers(1, 40)))
        part = procs[lo:]
        stall = rng.random(len(part)) < 0.6
        running = rng.random(len(part)) < 0.8
        ruled = frozenset() if rng.random() < 0.7 else frozenset({200, 201})
        fresh = proc_facts(part, stall, th, False, running, ruled)
        kept = proc_facts(part, stall, th, False, running, ruled, memo)
        assert np.array_equal(np.array(astuple(kept), dtype=float), np.array(astuple(fresh), dtype=float),
                              equal_nan=True), k


def test_period_refinement_in_python_is_numpys() -> None:
    """autoperiods refines a column's peaks in Python floats when nothing is NaN: the same period as numpy's
    stable argsort and first-maximum argmax, ties included (rounded autocorrelations repeat values)."""
    from gpu_triage.diagnosis.patterns import _refine, _refine_numpy

    rng = np.random.default_rng(11)
    for _ in range(4000):
        n = int(rng.integers(6, 200))
        sp = rng.random(n // 2 + 1) * 10.0 ** int(rng.integers(-2, 6))
        ac = rng.uniform(-1, 1, n)
        if rng.random() < 0.5:
            sp, ac = np.round(sp, 1), np.round(ac, 1)  # ties
        ks = np.arange(2, sp.size)
        peaks = ks[rng.random(ks.size) < 0.4]
        min_acf = float(rng.uniform(-0.5, 0.8))
        assert _refine(peaks.tolist(), sp.tolist(), ac.tolist(), n, min_acf) == _refine_numpy(peaks, sp, ac, n, min_acf)


def _wide(seed: int, count: int) -> list[np.ndarray]:
    """(T, K) arrays as wide as the host's cores or a big box's cards (past numpy's 8-way unrolled sums)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        a = rng.uniform(0, 100, size=(int(rng.integers(1, 12)), int(rng.choice([0, 1, 2, 7, 8, 9, 16, 33, 128]))))
        if rng.random() < 0.3:
            a = np.round(a)
        if rng.random() < 0.5:  # a few holes (a core or card missing on some ticks), some whole rows
            a[rng.random(a.shape) < rng.random() * 0.3] = np.nan
            if a.shape[0] > 1:
                a[int(rng.integers(0, a.shape[0]))] = np.nan
        out.append(a)
    return out


def test_present_readings_per_tick_are_the_row_by_row_ones() -> None:
    """The screen's per-tick readings (present.py) computed for all rows at once equal the row-by-row
    formulas, NaN rows and holes included: whether a shown verdict's figure is contradicted must not move."""
    from gpu_triage.diagnosis.present import _cores_busy, _cores_pegged, _cpu_mean, _disk, waiting_ticks
    from gpu_triage.diagnosis.thresholds import Thresholds
    from gpu_triage.window import DISK_FIELDS, GPU_FIELDS, WindowView

    def rowwise(a: np.ndarray, how) -> np.ndarray:  # the readers' old loop
        return np.array([how(r[~np.isnan(r)]) if (~np.isnan(r)).any() else np.nan for r in a])

    th = Thresholds()
    for a in _wide(12, 3000):
        t = a.shape[0]
        view = WindowView(t=np.arange(t, dtype=float), interval_s=np.full(t, 2.0),
                          gpu={f: a for f in GPU_FIELDS}, gpu_indexes=list(range(a.shape[1])), cpu=a,
                          iowait=np.zeros(t), host_mem_used=np.zeros(t), host_mem_total=np.zeros(t),
                          disk={f: a for f in DISK_FIELDS}, disk_names=[str(i) for i in range(a.shape[1])],
                          procs=[[] for _ in range(t)])
        s = slice(0, t)
        for got, want in (
            (_cpu_mean(view, s, [], th), rowwise(a, lambda r: float(r.mean()))),
            (_cores_busy(view, s, [], th), rowwise(a, lambda r: float(r.sum() / 100.0))),
            (_cores_pegged(view, s, [], th), rowwise(a, lambda r: float(np.count_nonzero(r >= th.core_pegged_pct)))),
            (_disk("busy_pct")(view, s, [], th), rowwise(a, lambda r: float(r.max()))),
        ):
            assert np.array_equal(got, want, equal_nan=True), a
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)
            per_tick = np.array([np.nan if np.isnan(r).all() else float(np.nanmean(r)) for r in a])
        want_mask = np.ones(t, dtype=bool)
        for limit in (th.stall_util_pct, th.high_util_pct):
            with np.errstate(invalid="ignore"):
                if (per_tick < limit).any():
                    want_mask = per_tick < limit
                    break
        assert np.array_equal(waiting_ticks(view, s, th), want_mask), a
        means = np.asarray(nanmean(a, axis=1)) if a.shape[1] else np.full(t, np.nan)
        assert np.array_equal(means, per_tick, equal_nan=True), a  # the values themselves, not only the mask


def test_tick_features_kept_between_verdicts_are_those_computed_afresh() -> None:
    """judged_span's per-tick features come from the previous verdict's rows where the window moved on by a
    few ticks: every row equals the row computed over the whole window at once, holes, strides, a window that
    steps back and a card added (which changes every row's mean) included."""
    from gpu_triage.diagnosis.span import _features, _tick_features
    from gpu_triage.window import DISK_FIELDS, GPU_FIELDS, WindowView

    rng = np.random.default_rng(14)
    total, cards, cores = 400, 9, 33
    base = {f: rng.uniform(0, 100, size=(total, cards)) for f in GPU_FIELDS}
    base["mem_total_bytes"] = np.full((total, cards), 100.0)
    for a in base.values():
        a[rng.random(a.shape) < 0.05] = np.nan
    cpu = rng.uniform(0, 100, size=(total, cores))
    cpu[rng.random(cpu.shape) < 0.02] = np.nan
    disk = rng.uniform(0, 100, size=(total, 2))
    iowait = rng.uniform(0, 10, size=total)
    memo: dict = {}
    hi = 5
    for _ in range(300):
        hi = int(np.clip(hi + rng.choice([1, 1, 1, 3, 40, -7]), 5, total))
        lo = max(0, hi - int(rng.choice([150, 150, 60])))
        g = cards - 1 if hi < 200 else cards  # a card that appears at tick 200
        view = WindowView(t=np.arange(lo, hi, dtype=float), interval_s=np.full(hi - lo, 2.0),
                          gpu={f: np.ascontiguousarray(a[lo:hi, :g]) for f, a in base.items()},
                          gpu_indexes=list(range(g)), cpu=cpu[lo:hi], iowait=iowait[lo:hi],
                          host_mem_used=np.zeros(hi - lo), host_mem_total=np.zeros(hi - lo),
                          disk={f: disk[lo:hi] for f in DISK_FIELDS}, disk_names=["a", "b"],
                          procs=[[] for _ in range(hi - lo)], ticks_ever=hi, memo=memo)
        assert np.array_equal(_features(view), _tick_features(view), equal_nan=True), (lo, hi)


def test_the_windows_memo_lets_go_of_ticks_that_left_it_and_of_old_settings() -> None:
    """A dashboard or exporter runs for days: what the memo keeps is bounded by the window (the lists of the
    ticks in it, twice over at most plus a slack), never by the ticks seen since the start; and each new set of
    children ruled out as loaders (a table of its own) lets the least recently used table go."""
    from gpu_triage.diagnosis import tickmemo
    from gpu_triage.diagnosis.facts import proc_facts
    from gpu_triage.diagnosis.thresholds import Thresholds
    from gpu_triage.sources.spec import make_source
    from gpu_triage.verdicts.judge import Judge

    th = Thresholds()
    judge = Judge(th, window_s=60.0, interval_s=2.0, cpu_count=32)  # 30 ticks
    capacity = judge.window.capacity
    source = make_source("sim:data_pipeline", gpus=2, interval_s=2.0)
    for _ in range(8 * capacity):
        judge.add(source.sample())
        judge.judge()
    memo = judge.window.view().memo
    sizes = {name: len(tab) for name, tab in memo.items()}
    assert sizes.get("pids, cards", 0) > 0, sizes  # the job's processes were read through it
    assert all(n <= 2 * capacity + tickmemo.SLACK + 1 for n in sizes.values()), (capacity, sizes)

    procs = list(judge.window.view().procs)
    stall = np.ones(len(procs), dtype=bool)
    for k in range(3 * tickmemo.MAX_TABLES):
        proc_facts(procs, stall, th, False, None, frozenset({10_000 + k}), memo)
        assert len(memo) <= tickmemo.MAX_TABLES
    proc_facts(procs, stall, th, False, None, frozenset(), memo)
    assert ("tally", th.core_pegged_pct, frozenset()) in memo and len(memo) <= tickmemo.MAX_TABLES
