"""What fixing a verdict's bottleneck is worth: the most it can give back, as a bound with what it assumes.

Pure: the verdict and what the engine measured in, a :class:`Headroom` out. Each bound follows from the
mechanism, not from a table of guesses (docs/diagnosis.md, "Headroom", has the table):

- the job's clock says each step waits for data a share w of its time: removing the wait gives at most
  1/(1-w) (the GPU work of a step stays; only the wait goes);
- the busiest of the verdict's cards works a share b of the judged ticks (SM activity where known, else
  GPU-Util): removing what the cards wait for gives at most 1/b, and this caps the clock's bound too;
- idle cards beside busy ones (placement, single card): N cards / N busy, if the job scales to them;
- the slowest rank holds the others (imbalance): every rank waits for the busiest, so even work gives at
  most busiest / mean;
- a hang: nothing progresses, everything is lost until it is fixed.

Where the evidence cannot carry a bound (no rule named the cause, a judged stretch too short) it says what is
lost, never what could be won.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.measure import span_words
from gpu_triage.diagnosis.vocab import Bottleneck
from gpu_triage.diagnosis.worth import BOUND, LOST, NONE, Headroom

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements
    from gpu_triage.diagnosis.verdict import Verdict


# waits whose removal gives the cards their idle share back, GPU work unchanged. Not a compile: the card's busy
# share holds work that goes with the recompiles (real h200-pairs-recompile: the card busy 1.6x as long per
# sample as after the fix, 1/b 7.7x against 10.6x measured), so 1/b bounds nothing and what is lost is said
_WAITS = frozenset({Bottleneck.DATA_PIPELINE, Bottleneck.STORAGE_IO, Bottleneck.HOST_OR_INPUT,
                    Bottleneck.HOST_STEP, Bottleneck.EXTERNAL_WAIT, Bottleneck.COMMUNICATION,
                    Bottleneck.LAUNCH_OVERHEAD})
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
        return _ranks(m, busy, lost)
    wait = verdict.facts.get("job_data_wait_pct", math.nan)
    if busy * m.th.headroom_max_factor < 1.0:
        return lost
    # the clock times only the wait in the loader's next(): below the share at which it names the data pipeline
    # itself, the input work may sit inside the step (a pageable copy, a transform in the loop: real
    # h200-pairs-h2d_pageable, w 0 %, 2.7x measured), where w says nothing about it, and 1/b stands
    if b in (Bottleneck.DATA_PIPELINE, Bottleneck.STORAGE_IO, Bottleneck.HOST_OR_INPUT) and not math.isnan(wait) \
            and wait > m.th.job_wait_share_pct:
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


def _spread(m: Measurements, busy: float, lost: Headroom) -> Headroom:
    """Placement, one card busy: N cards / N busy, if the job scales to them."""
    util = m.all_util
    n_busy = sum(1 for u in util.values() if u >= m.th.idle_util_pct)
    if not util or n_busy == 0 or n_busy == len(util):
        return lost
    return Headroom(BOUND, len(util) / n_busy, 1.0 - n_busy / len(util), busy,
                    f"{n_busy} of {len(util)} cards busy, {len(util) - n_busy} idle beside them",
                    "the job scales to the idle cards")


def _ranks(m: Measurements, busy: float, lost: Headroom) -> Headroom:
    """The slowest rank holds the others: with the work even, each card does the mean, so at most max / mean."""
    util = [u for u in m.all_util.values() if not math.isnan(u)]
    if len(util) < 2 or max(util) <= 0:
        return lost
    hi, mean = max(util), sum(util) / len(util)
    if mean <= 0 or hi / mean > m.th.headroom_max_factor:
        return lost
    return Headroom(BOUND, hi / mean, 1.0 - mean / hi, busy,
                    f"the busiest card at {hi:.0f} %, the cards' mean {mean:.0f} %",
                    "the work can be spread evenly over the ranks")
