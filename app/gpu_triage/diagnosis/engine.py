"""diagnose(): a window of ticks in, one verdict out. Pure: no I/O, no clock, no globals.

Measure (measure.py: the judged stretch of span.py, shapes, host and process facts), find the cause (the
first rule of rules.py that holds), let the job's own clock overrule the loader rules and lend its samples/s
to the num_workers recommendation (job.py), let the job's stacks overrule a mechanism they contradict
(precedence.py), compose the verdict (verdict.py), then apply the job's evidence.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpu_triage.diagnosis.headroom import headroom
from gpu_triage.diagnosis.job import JobState, apply_job, job_state, loader_ruled_out, with_job_rate
from gpu_triage.diagnosis.measure import Measurements
from gpu_triage.diagnosis.mechanisms.base import Cause
from gpu_triage.diagnosis.mechanisms.inside import not_read
from gpu_triage.diagnosis.precedence import overrule
from gpu_triage.diagnosis.rules import LOADER_RULES, advise, find_cause
from gpu_triage.diagnosis.span import nanmedian0, tick_seconds
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.verdict import (
    COLLECTING,
    START_UP,
    Finding,
    Verdict,
    cards,
    collecting,
    confidence,
    confidence_word,
    format_confidence,
    no_data_verdict,
    pattern_fact,
    verdict_facts,
)
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern
from gpu_triage.window import WindowView

__all__ = ["COLLECTING", "START_UP", "Finding", "Verdict", "confidence_word", "diagnose", "format_confidence",
           "nanmedian0",
           "no_data_verdict"]


# causes whose first evidence line names the state itself (a hang): it stays first, above the shape
LEADS_ITSELF = frozenset({Bottleneck.HUNG_COLLECTIVE, Bottleneck.UNEXPLAINED})


def diagnose(view: WindowView, thresholds: Thresholds, cpu_count: int | None = None) -> Verdict:
    """The verdict for the current state of the window (see span.py for which ticks are judged)."""
    th = thresholds
    if view.n == 0:
        return no_data_verdict("no ticks yet")
    if view.n_gpus == 0:
        return no_data_verdict("no GPU data: host only (no NVIDIA driver, or no card visible)")
    if np.isnan(view.gpu["util_pct"]).all():
        return no_data_verdict("no GPU data: GPU-Util missing on every card")
    dt = tick_seconds(view)
    if view.n * dt < th.warmup_s or view.n < 3:
        return collecting(view, dt, th)

    m = Measurements.from_view(view, th, cpu_count, dt)
    clock = job_state(view, m.start, th)  # the job's own clock, when a source gives it
    m = with_job_rate(m, clock)  # its samples/s beside the num_workers recommendation
    cause = overrule(m, _job_clock(m, find_cause(m), clock))  # the job's stacks, where read, overrule a guess
    pattern = m.pattern
    if pattern == Pattern.SINGLE_CARD_BUSY and cause.mechanism == Mechanism.RANK_BLOCKED_ON_STORAGE:
        # the busy card waits for the blocked one (SM low): a job on every card held by one rank, not a job
        # that uses one card (real h200x2-ddp-ckpt: 5 s of fsync, card 0 at 2 %, card 1 spinning at 100 %)
        pattern = Pattern.IMBALANCED
    lead = pattern_fact(m, pattern)
    evidence = list(cause.evidence)
    if (unread := not_read(m, cause)) is not None:
        evidence.append(unread)
    if lead is not None:  # the shape leads, except where the cause's own first line is what to act on
        evidence.insert(1 if cause.bottleneck in LEADS_ITSELF else 0, lead)
    adv, destructive = advise(cause, m)
    verdict = Verdict(
        pattern=pattern, bottleneck=cause.bottleneck, gpus=cards(m, cause), confidence=confidence(m, cause),
        evidence=[e.text for e in evidence], advice=adv, period_s=m.shape.period_s, duty=m.shape.duty,
        facts=verdict_facts(m), per_gpu={i: s.pattern for i, s in m.shape.shapes.items()},
        evidence_facts=[e.as_dict() for e in evidence], destructive_advice=destructive, mechanism=cause.mechanism,
    )
    judged = apply_job(verdict, view, m.start, m, clock)
    return replace(judged, headroom=headroom(judged, m))


def _job_clock(m: Measurements, cause: Cause, clock: JobState | None) -> Cause:
    """The cause once the job's clock has had its say: steps that do not wait for data rule the loader out."""
    if clock is None or not clock.rules_out_loader:
        return cause
    ruled = find_cause(m, loader_ruled_out=True)
    if cause.mechanism in LOADER_RULES or ruled.mechanism != cause.mechanism:
        ruled.evidence = [*ruled.evidence, loader_ruled_out(clock)]  # the clock changed the reading: say so
        return ruled
    return cause

