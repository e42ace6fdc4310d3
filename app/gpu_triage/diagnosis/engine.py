"""diagnose(): a window of ticks in, one verdict out. Pure: no I/O, no clock, no globals.

What is judged: the *current regime*, not the whole window. A 5-minute window averaged would take minutes to
notice a change, so the levels and causes are read over the last ``recent_s`` seconds; and if the end of
that stretch is a steady block (a step: a new level held for ``max(regime_min_s, 3 ticks)``) longer by half
than any run in its band over the ``2 * recent_s`` before it (so it is not just the low phase of a cycle),
only that block is judged (see :func:`judged_span`). Periods are looked
for in the judged stretch and, when that stretch is short, in the whole window too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_triage.diagnosis.advice import advise
from gpu_triage.diagnosis.causes import LOADER_RULES, Context, find_cause
from gpu_triage.diagnosis.facts import (
    LINK_FIELDS,
    Fact,
    ProcFacts,
    _median,
    host_facts,
    link_traffic,
    proc_facts,
    stall_ticks,
)
from gpu_triage.diagnosis.job import apply_job, job_state, loader_ruled_out
from gpu_triage.diagnosis.patterns import (
    CardShape,
    across_cards,
    autoperiods,
    card_shapes,
    column_nanmeans,
    nanmean,
)
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.window import WindowView


@dataclass(slots=True)
class Finding:
    """What a verdict says, whoever says it: the engine for one tick (:class:`Verdict`), the offline reading
    for a stretch of a recording (``offline.Segment``). The dashboard shows a Verdict (``ui.panes.Shown``)."""

    pattern: str
    bottleneck: str
    gpus: list[int]
    confidence: float
    evidence: list[str]
    advice: list[str]
    period_s: float | None = None
    duty: float | None = None
    facts: dict[str, float] = field(default_factory=dict)
    evidence_facts: list[dict[str, Any]] = field(default_factory=list)  # beside each evidence sentence

    @property
    def key(self) -> tuple[str, str]:
        return (self.pattern, self.bottleneck)


@dataclass(slots=True)
class Verdict(Finding):
    """The engine's reading of one window, with what only the live path uses."""

    per_gpu: dict[int, str] = field(default_factory=dict)
    destructive_advice: list[str] = field(default_factory=list)  # kill/free/restart: shown only when held
    mechanism: str = ""  # the rule that named the bottleneck


COLLECTING = "collecting"  # the pattern of a verdict given before the window can support one
START_UP = "start_up"  # the mechanism of a verdict on a job that has run no kernel yet (causes.StartUp)


def format_confidence(confidence: float) -> str:
    """The one way the dashboard and ``gpu-triage diagnose`` write a confidence."""
    return f"confidence {confidence * 100:.0f}%"  # as ui/render.py writes it


def no_data_verdict(reason: str, facts: dict[str, float] | None = None) -> Verdict:
    return Verdict("idle", "none", [], 0.1, [reason], [], facts=facts or {},
                   evidence_facts=[Fact(reason).as_dict()])


def _collecting(view: WindowView, dt: float, th: Thresholds) -> Verdict:
    """No verdict yet: the window is shorter than warmup_s. The raw facts of the newest tick, no advice."""
    have = view.n * dt
    util = view.gpu["util_pct"][-1]
    sm = view.gpu["sm_active_pct"][-1]
    cpu = view.cpu[-1] if view.cpu.shape[1] else np.zeros(0)
    facts = [Fact(f"collecting ({have:.0f} s of {th.warmup_s:.0f} s): no verdict before the window can support one",
                  "collected_s", have)]
    u = float(nanmean(util))
    if not math.isnan(u):
        facts.append(Fact(f"GPU-Util now {u:.0f} % (cards {', '.join(f'{x:.0f}' for x in util if not math.isnan(x))})",
                          "gpu_util_pct", u, tuple(view.gpu_indexes)))
    s = float(nanmean(sm)) if sm.size else math.nan
    if not math.isnan(s):
        facts.append(Fact(f"SM activity now {s:.0f} %", "sm_active_pct", s))
    c = float(nanmean(cpu)) if cpu.size else math.nan
    if not math.isnan(c):
        facts.append(Fact(f"CPU now {c:.0f} % over {cpu.size} core{'' if cpu.size == 1 else 's'}", "cpu_busy_pct", c))
    return Verdict(COLLECTING, "none", [], 0.0, [x.text for x in facts], [], facts={"judged_s": have},
                   evidence_facts=[x.as_dict() for x in facts])


def tick_seconds(view: WindowView) -> float:
    """The tick length: median of the recorded intervals, else of the timestamps' steps, else 2 s."""
    iv = view.interval_s[~np.isnan(view.interval_s)] if view.interval_s.size else view.interval_s
    med = _median(iv.tolist()) if iv.size else 0.0  # np.median's value without its overhead
    if med > 0:
        return med
    if view.t.size >= 2:
        d = np.diff(view.t)
        d = d[d > 0]
        if d.size:
            return float(np.median(d))
    return 2.0


def _tick_features(view: WindowView) -> np.ndarray:
    """Per tick (T, 7): GPU-Util, min, max inside tick (card means), memory share, CPU mean, busiest disk, iowait."""
    g = view.gpu
    util = nanmean(g["util_pct"], axis=1)
    umin = nanmean(g["util_min_pct"], axis=1)
    umax = nanmean(g["util_max_pct"], axis=1)
    umin = np.where(np.isnan(umin), util, umin)
    umax = np.where(np.isnan(umax), util, umax)
    with np.errstate(invalid="ignore", divide="ignore"):
        mem = nanmean(g["mem_used_bytes"] / g["mem_total_bytes"], axis=1) * 100.0
    cpu = nanmean(view.cpu, axis=1) if view.cpu.shape[1] else np.full(view.n, np.nan)
    busy = view.disk["busy_pct"]
    disk = np.nanmax(np.where(np.isnan(busy), -1.0, busy), axis=1) if busy.shape[1] else np.full(view.n, np.nan)
    disk = np.where(disk < 0, np.nan, disk)
    return np.column_stack([util, umin, umax, mem, cpu, disk, view.iowait])


# how far a tick may sit from the regime's median and still belong to it, per feature (percentage points)
def _bands(th: Thresholds) -> np.ndarray:
    return np.array([th.regime_band_util_pct, th.regime_band_minmax_pct, th.regime_band_minmax_pct,
                     th.regime_band_mem_pct, th.regime_band_cpu_pct, th.regime_band_disk_pct, th.regime_band_iowait_pct])
_GPU_COLS = 4  # the first four features are the cards' own (GPU-Util, min, max, memory share); the rest the host's


def _in_band_split(feat: np.ndarray, ref: np.ndarray, bands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tick in band on every feature, tick in band on the cards' own features)."""
    diff = np.abs(feat - ref)
    ok = (diff <= bands) | np.isnan(diff)
    return ok.all(axis=1), ok[:, :_GPU_COLS].all(axis=1)


def _members(ok: np.ndarray, gpu_ok: np.ndarray, max_blip: int) -> np.ndarray:
    """``ok`` with short host-only blips filled in.

    A run of ticks whose cards stay in band but whose host figures leave it for fewer than ``max_blip``
    ticks, after an in-band tick (and before one, or at the very end), still belongs to the regime: one tick of a disk at 100 % (a log flush, the
    recorder's own write) or a CPU spike is noise, not a phase. Blips of the cards' own figures are never
    filled in: a GPU-Util excursion may be the burst of a sawtooth.
    """
    out = ok.copy()
    n = ok.size
    i = 0
    while i < n:
        if ok[i]:
            i += 1
            continue
        j = i
        while j < n and not ok[j]:
            j += 1
        if 0 < i and j - i < max_blip and gpu_ok[i:j].all():
            out[i:j] = True
        i = j
    return out


def nanmedian0(a: np.ndarray) -> np.ndarray:
    """``np.nanmedian(a, axis=0)`` of a (T, K) float array, the same values: per column the middle of its
    sorted non-NaN values (the two middle ones added and halved for an even count, as numpy does), NaN
    where a column has none, and no warning. numpy takes a masked-array path for short inputs that cost
    0.3 ms a call (7 % of ``diagnose DIR --summary``); this is a sort and a gather."""
    if a.shape[0] == 0:
        return np.full(a.shape[1], np.nan)
    s = np.sort(a, axis=0)  # NaN sorts last
    cnt = a.shape[0] - np.count_nonzero(np.isnan(a), axis=0)
    cols = np.arange(a.shape[1])
    with np.errstate(invalid="ignore", over="ignore"):
        med: np.ndarray = (s[np.maximum((cnt - 1) // 2, 0), cols] + s[cnt // 2, cols]) / 2.0 + 0.0  # -0 as numpy: 0
    med[cnt == 0] = np.nan
    return med


def _longest_run(mask: np.ndarray) -> int:
    longest = run = 0
    for v in mask:
        run = run + 1 if v else 0
        longest = max(longest, run)
    return longest


@dataclass(frozen=True, slots=True)
class JobSpan:
    """Where the current job begins in the window, from the GPU processes NVML lists.

    ``start``: the first tick after the newest tick held by *other* processes (a different job, whose pids
    share none with the current one); 0 when no such tick is in reach (one job all along, or no process
    information). ``appeared``: the first tick at or after ``start`` with a process on a card (None: none).
    ``first_kernel``: the first tick from ``appeared`` on where a kernel ran (SM activity ≥ ``sm_fed_pct`` or
    GPU-Util ≥ ``idle_util_pct``); None: not one yet, the job is starting.
    ``running_from``: the first tick by which every card holding one of its processes had run a kernel (ranks
    start up at their own pace); ``first_kernel`` where some card has run none yet.
    """

    start: int = 0
    appeared: int | None = None
    first_kernel: int | None = None
    running_from: int | None = None  # the first tick by which every card the job uses had run a kernel

    def starting(self, n: int) -> bool:
        """Its processes appeared inside the window (of ``n`` ticks) and it does not run yet: no kernel since
        (imports, CUDA context, model build), or on the tick where the last of the cards it uses ran its first
        kernel (that tick is part start-up)."""
        if self.appeared is None or self.appeared == 0 or self.first_kernel == self.appeared:
            return False  # a job that ran kernels from its first tick on was already running (listed late)
        return self.running_from is None or (n - 1) - self.running_from < 1


def job_span(view: WindowView, th: Thresholds, reach: int) -> JobSpan:
    """The current job's span over the last ``reach`` ticks (bounded: process lists are converted lazily
    offline, and nothing older than the judged stretch plus its look-back is read)."""
    n = view.n
    lo = max(0, n - reach)
    procs = view.procs[-(n - lo):] if len(view.procs) >= n - lo else list(view.procs)
    off = n - len(procs)  # procs are aligned to the newest tick
    current: set[int] = set()
    cards: set[int] = set()
    start = 0
    appeared: int | None = None
    for k in range(len(procs) - 1, -1, -1):
        tick = procs[k]
        if not tick:
            continue
        pids = {p.pid for p in tick}
        if current and pids.isdisjoint(current):
            start = off + k + 1  # the newest tick of another job: the current one begins after it
            break
        current = pids
        cards.update([p.gpu_index for p in tick])
        appeared = off + k
    if appeared is None:
        return JobSpan(start)
    sm = view.gpu["sm_active_pct"][appeared:]
    util = view.gpu["util_pct"][appeared:]
    # (T, G): a kernel ran. Tiny kernels read SM 0.0 at GPU-Util 20-31 % (field notes), and copies alone
    # (the model moved to the card) read GPU-Util 1-4 %: either figure above its floor counts
    with np.errstate(invalid="ignore"):
        kernel = (sm >= th.sm_fed_pct) | (util >= th.idle_util_pct)
    any_hits = np.flatnonzero(kernel.any(axis=1))
    if not any_hits.size:
        return JobSpan(start, appeared, None, None)
    first = appeared + int(any_hits[0])
    firsts: list[int] = []  # each of the job's cards: its first kernel
    ran: list[bool] = np.asarray(kernel.any(axis=0)).tolist()  # per card, and its first kernel's tick: one call for all cards
    first_hit: list[int] = np.asarray(kernel.argmax(axis=0)).tolist()
    for j, idx in enumerate(view.gpu_indexes):
        if idx in cards:
            if not ran[j]:  # a card of the job has run none yet: the job runs from its first kernel anywhere
                return JobSpan(start, appeared, first, first)
            firsts.append(appeared + first_hit[j])
    return JobSpan(start, appeared, first, max(firsts, default=first))


def judged_span(view: WindowView, th: Thresholds, dt: float, floor: int = 0,
                running_from: int | None = None) -> tuple[int, bool, int]:
    """Index of the first judged tick, whether the judged stretch is a fresh steady regime, and (for a fresh
    one) the longest earlier run in its band, in ticks: the part of the block that a cycle's phase could also
    have made, so offline readers back-date the regime only over what came after it.

    A *step* (a change of level that then holds) is an event of its own: after ``max(regime_min_s, 3 ticks)``
    in a band around the new level, the block at the end is judged alone, so 20 s of 99 % followed by 20 s of
    20 % is not averaged into one 60 % "sawtooth". What must not be read as a step is the low (or high)
    phase of a cycle: the block counts only when it is longer by half than every earlier run in the same band
    over the ``2 * recent_s`` before it. A cycle whose period fits in that look-back has had a run just as long
    in it (its previous phase); a new regime has not. The look-back is bounded so that an unrelated job at a
    similar level a minute ago does not veto today's step. A run cut by the start of the window has an
unknown length: a block in its band is not called a new regime until that run has left the look-back. Host-only blips shorter than the block's minimum
    length do not break the block (see :func:`_members`).

    ``floor`` (:func:`job_span`): the first tick of the current job. The look-back does not reach before it:
    an earlier job at the same level (real `h200x2-stuck`: card 0 spinning while card 1 idles, then a new job
    with the roles swapped, 24 s later) is not a phase of this one, and a run that began with the job has a
    known length. ``running_from``: a block that holds the job's start-up (a card that has run no kernel yet)
    begins only when every card runs, so a rank still starting up is not read as an idle card.
    """
    n = view.n
    recent = max(3, int(math.ceil(th.recent_s / dt)))
    start = max(0, n - recent)
    m_min = max(3, int(math.ceil(th.regime_min_s / dt)))
    if n - start <= m_min:
        return start, False, 0
    feat = _tick_features(view)
    tail = feat[n - m_min :]
    if np.isnan(tail).all():
        return start, False, 0
    ref = nanmedian0(tail)  # a feature missing everywhere stays NaN
    ok, gpu_ok = _in_band_split(feat, ref, _bands(th))
    member = _members(ok, gpu_ok, m_min)
    if not member[n - m_min :].all():
        return start, False, 0
    # the steady block at the end
    k = n - m_min
    while k > 0 and member[k - 1]:
        k -= 1
    block = n - k
    if k <= start:  # steady over the whole recent stretch: judge the recent stretch
        return start, False, 0
    # is it a new regime, or one more phase of a cycle seen before? compare with earlier runs in band
    lo = max(0, floor, k - 2 * recent)  # and not before the job began: another job's runs say nothing of this one
    longest = _longest_run(member[lo:k])
    if lo == 0 and member[0]:
        # a run that began before the first tick: its length is unknown, so it cannot be outlasted
        longest = max(longest, block)
    # half as long again as the longest such run before: the cycle's low phase jitters, a new regime does not end
    if block > 1.5 * longest:
        if running_from is not None and k < running_from:
            # a new job's block starts once every card runs: its start-up (no kernel yet) is a phase of its own
            k = running_from
            if n - k < m_min:
                return start, False, 0
        return k, True, longest
    return start, False, 0


def diagnose(view: WindowView, thresholds: Thresholds, cpu_count: int | None = None) -> Verdict:
    """The verdict for the current state of the window (see the module docstring for what is judged)."""
    th = thresholds
    n = view.n
    if n == 0:
        return no_data_verdict("no ticks yet")
    if view.n_gpus == 0:
        return no_data_verdict("no GPU data: host only (no NVIDIA driver, or no card visible)")
    util_all = view.gpu["util_pct"]
    if np.isnan(util_all).all():
        return no_data_verdict("no GPU data: GPU-Util missing on every card")

    dt = tick_seconds(view)
    if n * dt < th.warmup_s or n < 3:
        return _collecting(view, dt, th)
    recent = max(3, int(math.ceil(th.recent_s / dt)))
    span = job_span(view, th, 3 * recent)  # the judged stretch and its look-back reach at most 3 x recent back
    start, fresh, prior_run = judged_span(view, th, dt, floor=span.start, running_from=span.running_from)
    sl = slice(start, n)
    gpu = {k: v[sl] for k, v in view.gpu.items()}
    util, umin, umax = gpu["util_pct"], gpu["util_min_pct"], gpu["util_max_pct"]

    shapes: dict[int, CardShape] = dict(zip(view.gpu_indexes, card_shapes(util, umin, umax, th), strict=True))
    # a short stretch may hold too few cycles: look for the period over the whole window as well
    if not fresh and start > 0:
        todo = [j for j, idx in enumerate(view.gpu_indexes)
                if shapes[view.gpu_indexes[j]].pattern == "sawtooth" and shapes[view.gpu_indexes[j]].period is None
                and not shapes[view.gpu_indexes[j]].fast and not np.isnan(util_all[:, j]).any()]
        if todo:
            for j, p in zip(todo, autoperiods(util_all[:, todo], th.sawtooth_min_acf), strict=True):
                if p is not None:
                    shapes[view.gpu_indexes[j]].period = p
    pattern, cards = across_cards(shapes, th)

    # one card busy and the rest idle: the busy card's own waits are what to explain
    if pattern == "single_card_busy":
        cols = [view.gpu_indexes.index(i) for i in cards]
        focus = {k: v[:, cols] for k, v in gpu.items()}
        focus_idx = list(cards)
    else:
        focus, focus_idx = gpu, view.gpu_indexes
    hf = host_facts(focus, focus_idx, view.cpu[sl], view.iowait[sl], {k: v[sl] for k, v in view.disk.items()},
                    view.disk_names, th, cpu_count)
    others_busy = len([s for s in shapes.values() if s.pattern != "idle"]) > 1
    procs = view.procs[start:] if len(view.procs) == n else view.procs[-(n - start):]
    stall = stall_ticks(focus["util_pct"], th)
    # ticks since the job's first kernel: before it the job starts up, it does not wait for input
    if span.appeared is None:
        running = np.ones(n - start, dtype=bool)
    else:
        # strictly after: the tick that holds the first kernel is still part start-up
        running = np.arange(start, n) > (span.running_from if span.running_from is not None else n)
    pf = proc_facts(procs, stall, th, others_busy, running)
    waits = stall & running
    pf.running_waits = int(waits.sum())
    pf.running_ticks = int(running.sum())
    sm_w = focus["sm_active_pct"][waits]
    if sm_w.size and not np.isnan(sm_w).all():
        pf.sm_running_waits = float(nanmean(sm_w))
    if span.starting(n):
        _startup_facts(pf, view, span, dt)
    sm = gpu["sm_active_pct"]
    all_sm = dict(zip(view.gpu_indexes, column_nanmeans(sm).tolist(), strict=True))
    all_util = {idx: s.mean for idx, s in shapes.items() if not math.isnan(s.mean)}
    # every card's levels over the ticks where the cards part ways (spread >= imbalance_pct): a rank that
    # stalls now and then (a checkpoint) shows there, while between those ticks every rank computes
    # np.nanmax/np.nanmin are fmax/fmin.reduce for an ndarray, behind Python layers and a warning on all-NaN
    with np.errstate(invalid="ignore"):
        spread = np.fmax.reduce(util, axis=1) - np.fmin.reduce(util, axis=1) if util.size else np.zeros(0)
    stall_all = spread >= th.imbalance_pct
    if not stall_all.any():
        stall_all = np.ones(util.shape[0], dtype=bool)
    st_u, st_sm = nanmean(util[stall_all], axis=0), nanmean(sm[stall_all], axis=0)  # numpy's values, no warning
    stall_util = {idx: float(st_u[j]) for j, idx in enumerate(view.gpu_indexes) if not math.isnan(st_u[j])}
    stall_sm = {idx: float(st_sm[j]) for j, idx in enumerate(view.gpu_indexes)}
    # each card's highest device-to-host rate on a parting tick where its SMs idle: a rank copying tensors
    # off its card outside the step (torch.save of CUDA tensors), the others waiting at the next collective
    tx = gpu["pcie_tx_bytes_per_s"]
    with np.errstate(invalid="ignore"):
        quiet_sm = np.where(np.isnan(sm), True, sm < th.sm_idle_pct)
        d2h = np.fmax.reduce(np.where(stall_all[:, None] & quiet_sm, tx, np.nan), axis=0) if tx.size else np.zeros(0)
    stall_d2h = {idx: float(d2h[j]) for j, idx in enumerate(view.gpu_indexes) if j < d2h.size}
    link = link_traffic(gpu)
    link_per_card = dict(zip(view.gpu_indexes, column_nanmeans(link).tolist(), strict=True))
    ctx = Context(
        pattern, hf, pf, th, view.n_gpus,
        util={i: u for i, u in all_util.items() if i in focus_idx},
        sm={i: v for i, v in all_sm.items() if i in focus_idx},
        all_util=all_util, all_sm=all_sm, link=link_per_card, stall_util=stall_util, stall_sm=stall_sm,
        stall_d2h=stall_d2h,
        quiet_wait_s=_quiet_wait_s(view, focus_idx, th, dt),
        procs_known=any(bool(t) for t in view.procs),
    ).derive()
    cause = find_cause(ctx)
    clock = job_state(view, start, th)  # the job's own clock, when a source gives it
    if clock is not None and clock.rules_out_loader:
        ruled = find_cause(ctx, loader_ruled_out=True)  # the steps do not wait for data: not a loader
        if cause.mechanism in LOADER_RULES or ruled.mechanism != cause.mechanism:
            cause = ruled  # the clock changed the reading: say so
            cause.evidence = [*cause.evidence, loader_ruled_out(clock)]
    if pattern == "single_card_busy" and cause.mechanism == "rank_blocked_on_storage":
        # the busy card waits for the blocked one (SM low): a job on every card held by one rank, not a job
        # that uses one card (real h200x2-ddp-ckpt: 5 s of fsync, card 0 at 2 %, card 1 spinning at 100 %)
        pattern = "imbalanced"

    # period and duty: from the cards the pattern concerns
    period_s: float | None = None
    duty: float | None = None
    fast = False
    saw = [shapes[i] for i in (cards or list(shapes)) if shapes[i].pattern == "sawtooth"]
    if saw:
        with_p = [s for s in saw if s.period is not None]
        if with_p:
            period_s = _median([s.period.ticks for s in with_p]) * dt  # type: ignore[union-attr]
        fast = any(s.fast for s in saw)
        duties = [s.duty for s in saw if s.duty is not None]
        duty = _median(duties) if duties else None

    evidence = list(cause.evidence)
    if pattern == "sawtooth":
        if period_s is not None:
            evidence.insert(0, Fact(f"sawtooth: period {period_s:.1f} s, busy {duty * 100:.0f} % of it"
                                    if duty is not None else f"sawtooth: period {period_s:.1f} s", "period_s", period_s))
        elif fast:
            evidence.insert(0, Fact(f"sawtooth faster than the tick ({dt:g} s): min near 0 and max near 100 inside "
                                    "each tick while the mean sits between", "tick_s", dt))
        else:
            evidence.insert(0, Fact("GPU-Util swings between stalls and bursts without a steady period"))
    elif pattern == "single_card_busy":
        idle_cards = [i for i, s in shapes.items() if s.pattern == "idle"]
        evidence.insert(0, Fact(f"card {cards[0]} busy ({shapes[cards[0]].mean:.0f} %) while {len(idle_cards)} "
                                "other cards idle", "gpu_util_mean_pct", shapes[cards[0]].mean, (cards[0],)))
    elif pattern == "imbalanced":
        means = {i: s.mean for i, s in shapes.items()}
        hi_i = max(means, key=means.__getitem__)
        lo_i = min(means, key=means.__getitem__)
        evidence.insert(0, Fact(f"cards spread: card {hi_i} at {means[hi_i]:.0f} %, card {lo_i} at "
                                f"{means[lo_i]:.0f} %", "gpu_util_spread_pct", means[hi_i] - means[lo_i], (hi_i, lo_i)))

    span_s = (n - start) * dt
    confidence = cause.confidence
    if n - start < 3:
        confidence *= th.conf_tiny_factor
    elif span_s < th.short_judged_s:
        confidence *= th.conf_short_factor
    if cause.bottleneck == "memory_idle":
        gpus = [hf.mem_card] if hf.mem_card is not None else cards
        # every card holding memory counts
        used, total = gpu["mem_used_bytes"], gpu["mem_total_bytes"]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.asarray(nanmean(used / total, axis=0))
        gpus = [idx for j, idx in enumerate(view.gpu_indexes) if frac[j] >= th.mem_held_frac] or gpus
    elif cause.cards is not None:
        gpus = cause.cards
    else:
        gpus = cards

    facts = hf.as_dict()
    facts["period_s"] = float("nan") if period_s is None else period_s
    facts["duty"] = float("nan") if duty is None else duty
    facts["judged_s"] = span_s
    facts["regime_prior_run_s"] = prior_run * dt
    facts["regime_fresh"] = 1.0 if fresh else 0.0
    adv, destructive = advise(cause, ctx)
    verdict = Verdict(
        pattern=pattern,
        bottleneck=cause.bottleneck,
        gpus=list(gpus),
        confidence=float(np.clip(confidence, 0.0, 1.0)),
        evidence=[e.text for e in evidence],
        advice=adv,
        period_s=period_s,
        duty=duty,
        facts=facts,
        per_gpu={i: s.pattern for i, s in shapes.items()},
        evidence_facts=[e.as_dict() for e in evidence],
        destructive_advice=destructive,
        mechanism=cause.mechanism,
    )
    return apply_job(verdict, view, start, ctx, clock)


def _startup_facts(pf: ProcFacts, view: WindowView, span: JobSpan, dt: float) -> None:
    """What a job that does not run yet does: how long since it appeared (and since its first kernel), its
    process's CPU, its cards' memory then and now."""
    n = view.n
    appeared = span.appeared if span.appeared is not None else n - 1
    pf.startup_s = (n - appeared) * dt
    if span.first_kernel is not None:
        pf.startup_kernel_s = (n - span.first_kernel) * dt
    # a process's first CPU reading is 0 (psutil measures from the previous call): the ticks after it count
    procs = view.procs[-(n - appeared - 1):] if n - appeared > 1 else []
    cpu = [max(float(p.cpu_pct) for p in tick if p.cpu_pct is not None) for tick in procs
           if any(p.cpu_pct is not None for p in tick)]
    if cpu:
        pf.startup_cpu = float(np.median(cpu))
    used = view.gpu["mem_used_bytes"]
    first, last = used[appeared], used[-1]
    if not np.isnan(first).all() and not np.isnan(last).all():
        pf.startup_mem_from, pf.startup_mem_now = float(np.nansum(first)), float(np.nansum(last))


def _quiet_wait_s(view: WindowView, cards: list[int], th: Thresholds, dt: float) -> float:
    """How long, back from the newest tick, every one of ``cards`` that waits (GPU-Util high, SM low) has done
    so with its links quiet: the age of a collective that moves no bytes."""
    cols = [view.gpu_indexes.index(i) for i in cards]
    if not cols:
        return 0.0
    util, sm = view.gpu["util_pct"][:, cols], view.gpu["sm_active_pct"][:, cols]
    waiting_now = (util[-1] >= th.high_util_pct) & (sm[-1] < th.sm_low_pct)
    if not waiting_now.any():
        return 0.0  # before the links are copied and added up: most verdicts stop here
    g = {"util_pct": util, **{k: view.gpu[k][:, cols] for k in LINK_FIELDS}}  # what is read below
    link = link_traffic(g)
    w = waiting_now
    ok = ((util[:, w] >= th.high_util_pct) & (sm[:, w] < th.sm_low_pct)
          & (np.nan_to_num(link[:, w], nan=np.inf) < th.link_quiet_bytes_per_s)).all(axis=1)
    run = 0
    for v in ok[::-1]:
        if not v:
            break
        run += 1
    return run * dt
