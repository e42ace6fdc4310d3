"""What fixing a verdict's bottleneck is worth: the most it can give back, as a bound with what it assumes.

Pure: the verdict and what the engine measured in, a :class:`Headroom` out. Each bound follows from the
mechanism, not from a table of guesses (docs/diagnosis.md, "Headroom", has the table):

- the job's clock says each step waits for data a share w of its time: removing the wait gives at most
  1/(1-w) (the GPU work of a step stays; only the wait goes);
- the busiest of the verdict's cards works a share b of the judged ticks (SM activity where known, else
  GPU-Util): removing what the cards wait for gives at most 1/b, and this caps the clock's bound too;
- idle cards beside busy ones (placement, single card): N cards / N busy, if the job scales to them;
- the host phases' share of the step from the stacks (host step, compile, a thread holding the GIL): the
  main thread in that phase in a share s of the judged samples, removing it gives at most 1/(1-s), capped by
  1/b as the clock's bound is; a verdict only the stacks can name has no bound without them;
- the slowest rank holds the others (imbalance, straggler): every rank waits for the busiest, so even work
  gives at most busiest / mean, over the verdict's cards (SM activity where every one reports it);
- a hang: nothing progresses, everything is lost until it is fixed.

Where the evidence cannot carry a bound (no rule named the cause, a judged stretch too short) it says what is
lost, never what could be won.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpu_triage.diagnosis import inside as phases
from gpu_triage.diagnosis.measure import span_words
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism
from gpu_triage.diagnosis.worth import BOUND, LOST, NONE, Headroom

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements
    from gpu_triage.diagnosis.verdict import Verdict


# waits whose removal gives the cards their idle share back, GPU work unchanged. Not a compile: the card's busy
# share holds work that goes with the recompiles (real h200-pairs-recompile: the card busy 1.6x as long per
# sample as after the fix, 1/b 7.7x against 10.6x measured), so 1/b bounds nothing and what is lost is said
_WAITS = frozenset({Bottleneck.DATA_PIPELINE, Bottleneck.STORAGE_IO, Bottleneck.HOST_OR_INPUT,
                    Bottleneck.HOST_STEP, Bottleneck.EXTERNAL_WAIT,
                    Bottleneck.COMMUNICATION, Bottleneck.LAUNCH_OVERHEAD})
# named from the training processes' stacks alone: without a share of their samples there is no bound
_FROM_STACKS = frozenset({Bottleneck.HOST_STEP, Bottleneck.EXTERNAL_WAIT})
# the phases each stack rule names its mechanism from (mechanisms/inside.py); other_thread counts the samples
# where another thread ran Python while the main thread was off a CPU (diagnosis/threads.py)
_STACK_PHASES: dict[str, tuple[str, ...]] = {
    Mechanism.HOST_COMPUTE: phases.HOST_COMPUTE,
    Mechanism.PYTHON_STEP: phases.OWN_PYTHON, Mechanism.EXTERNAL_WAIT: phases.EXTERNAL,
    Mechanism.IN_PROCESS_LOADER: phases.LOADING, Mechanism.INPUT_LATENCY: phases.LOADER_WAIT,
}
_SPREAD = frozenset({Bottleneck.PLACEMENT})
_RANKS = frozenset({Bottleneck.IMBALANCE})


def headroom(verdict: Verdict, m: Measurements) -> Headroom:
    """The headroom of ``verdict`` over the stretch ``m`` judged."""
    judged_ticks = m.view.n - m.start
    judged_s = judged_ticks * m.dt
    busy = _busy(verdict.gpus or list(m.all_util), m)
    b = verdict.bottleneck
    if b == Bottleneck.NONE:
        return Headroom(NONE, None, None, busy, "no bottleneck named", "")
    if b == Bottleneck.HUNG_COLLECTIVE:
        return Headroom(LOST, None, 1.0, busy, "no step progresses: everything until the hang is fixed", "")
    if busy is None:
        return Headroom(LOST, None, None, None, "no GPU-Util over the judged ticks: nothing to bound", "")
    wait_share = 1.0 - busy
    lost = Headroom(LOST, None, wait_share, busy,
                    f"the cards waited {wait_share * 100:.0f} % of the judged {span_words(judged_s)}", "")
    if judged_ticks < m.th.headroom_min_ticks or b not in _WAITS | _SPREAD | _RANKS:
        return lost
    if b in _SPREAD:
        return _spread(m, busy, lost)
    if b in _RANKS:
        return _ranks(verdict, m, busy, lost)
    wait = verdict.facts.get("job_data_wait_pct", math.nan)
    # the clock times only the wait in the loader's next(): below the share at which it names the data pipeline
    # itself, the input work may sit inside the step (a pageable copy, a transform in the loop: real
    # h200-pairs-h2d_pageable, w 0 %, 2.7x measured), where w says nothing about it, and 1/b stands
    clocked = b in (Bottleneck.DATA_PIPELINE, Bottleneck.STORAGE_IO, Bottleneck.HOST_OR_INPUT) \
        and not math.isnan(wait) and wait > m.th.job_wait_share_pct
    if not clocked and (stacks := _from_stacks(verdict, m, busy, lost, judged_s)) is not None:
        return stacks
    if b in _FROM_STACKS:
        return Headroom(LOST, None, wait_share, busy, f"{lost.basis} (no share of the step from the stacks)", "")
    if busy * m.th.headroom_max_factor < 1.0:
        return lost
    if clocked:
        # the host times its wait while the GPU still runs the kernels it queued (CUDA is asynchronous), so
        # the wait over-reads; the busiest card's share caps it: the GPU work of a step cannot shrink
        w = min(max(wait / 100.0, 0.0), m.th.headroom_max_wait_share)
        if 1.0 / (1.0 - w) <= 1.0 / busy:
            return Headroom(BOUND, 1.0 / (1.0 - w), w, busy, f"the job waits for data {w * 100:.0f} % of each step",
                            "the GPU work stays the same", "samples/s")
        return Headroom(BOUND, 1.0 / busy, w, busy,
                        f"the job waits for data {w * 100:.0f} % of each step, the busiest card works "
                        f"{busy * 100:.0f} % of the judged {span_words(judged_s)}", "the GPU work stays the same",
                        "samples/s")
    return Headroom(BOUND, 1.0 / busy, wait_share, busy,
                    f"the busiest card works {busy * 100:.0f} % of the judged {span_words(judged_s)}",
                    "the GPU work stays the same and the wait goes entirely")


def _busy(names: list[int], m: Measurements) -> float | None:
    """The busiest of ``names``' share of the judged ticks at work, 0..1. The busiest, because ranks in step
    all wait for the one with the most work: with every wait gone, a step still takes that card's work.
    SM activity where the card reports it: GPU-Util counts a collective spinning on its peer as busy (real
    h200x2 starved DDP: card 0 at 75 % GPU-Util, 1 % SM activity)."""
    src = m.all_sm if m.sm_known and any(i in m.all_sm and not math.isnan(m.all_sm[i]) for i in names) \
        else m.all_util
    got = [src[i] for i in names if i in src and not math.isnan(src[i])]
    return min(max(max(got) / 100.0, 0.0), 1.0) if got else None


def _stack_share(verdict: Verdict, m: Measurements) -> tuple[int, int] | None:
    """(samples in the verdict's host phase, samples read) of the training process where that phase holds the
    largest share of its judged stack samples (the ranks wait for the slowest); None where the verdict's
    mechanism names no phase or no process was read ``inside_min_samples`` times."""
    mech = verdict.mechanism
    if mech != Mechanism.OTHER_THREAD and mech not in _STACK_PHASES:
        return None
    best: tuple[int, int] | None = None
    for p in m.inside.processes:
        if mech == Mechanism.OTHER_THREAD:
            k, n = p.thread_read.held, p.thread_read.samples
        else:
            k, n = p.count(_STACK_PHASES[mech]), p.samples
        if n >= m.th.inside_min_samples and n > 0 and (best is None or k * best[1] > best[0] * n):
            best = (k, n)
    return best


def _from_stacks(verdict: Verdict, m: Measurements, busy: float, lost: Headroom, judged_s: float) -> Headroom | None:
    """The stacks say where the step's time goes: the main thread in the verdict's phase in a share s of the
    judged samples, removing that phase gives at most 1/(1-s); the busiest card's 1/b caps it (the GPU work of
    a step cannot shrink). The samples are taken while the cards wait, so s over-reads the share of the whole
    step: the cap keeps it a bound. Every sample in the phase (s = 1) bounds nothing by itself. None where the
    stacks give no share; what is lost where neither bound is finite."""
    got = _stack_share(verdict, m)
    if got is None:
        return None
    k, n = got
    th = m.th
    what = ("another thread held the GIL while the main thread waited" if verdict.mechanism == Mechanism.OTHER_THREAD
            else f"the main thread in {'/'.join(_STACK_PHASES[verdict.mechanism])}")
    basis = f"{what} in {k} of {n} stack samples"
    factor = 1.0 / (1.0 - k / n) if k < n else math.inf
    if busy * th.headroom_max_factor >= 1.0 and 1.0 / busy < factor:
        factor = 1.0 / busy
        basis += f", the busiest card works {busy * 100:.0f} % of the judged {span_words(judged_s)}"
    if factor > th.headroom_max_factor:
        return Headroom(LOST, None, lost.share, busy, f"{lost.basis} ({basis}: no bound)", "")
    return Headroom(BOUND, factor, k / n, busy, basis, "that phase goes entirely and the GPU work stays the same",
                    "samples/s")


def _spread(m: Measurements, busy: float, lost: Headroom) -> Headroom:
    """Placement, one card busy: N cards / N busy, if the job scales to them."""
    util = m.all_util
    n_busy = sum(1 for u in util.values() if u >= m.th.idle_util_pct)
    if not util or n_busy == 0 or n_busy == len(util):
        return lost
    return Headroom(BOUND, len(util) / n_busy, 1.0 - n_busy / len(util), busy,
                    f"{n_busy} of {len(util)} cards busy, {len(util) - n_busy} idle beside them",
                    "the job scales to the idle cards")


def _ranks(verdict: Verdict, m: Measurements, busy: float, lost: Headroom) -> Headroom:
    """The slowest rank holds the others: with the work even, each card does the mean, so at most max / mean,
    over the cards the verdict names (every card where it names fewer than two). SM activity where every one
    of them reports it: a rank waiting at a collective spins its card at 100 % GPU-Util while its SMs idle
    (real h200x2-ddp-ckpt: card 1 at 100 % GPU-Util, 2 % SM), so GPU-Util calls the waiting card busy. Else
    GPU-Util on them all: SM activity on one card against GPU-Util on another compares unlike things."""
    names = verdict.gpus if len(verdict.gpus) >= 2 else list(m.all_util)
    sm = [m.all_sm.get(i, math.nan) for i in names]
    use_sm = m.sm_known and not any(math.isnan(x) for x in sm)
    got = sm if use_sm else [m.all_util[i] for i in names if i in m.all_util and not math.isnan(m.all_util[i])]
    if len(got) < 2 or max(got) <= 0:
        return lost
    hi, mean = max(got), sum(got) / len(got)
    if mean <= 0 or hi / mean > m.th.headroom_max_factor:
        return lost
    what = "SM activity" if use_sm else "GPU-Util"
    return Headroom(BOUND, hi / mean, 1.0 - mean / hi, busy,
                    f"the busiest of cards {','.join(map(str, names))} at {hi:.0f} % {what}, their mean {mean:.0f} %",
                    "the work can be spread evenly over the ranks")
