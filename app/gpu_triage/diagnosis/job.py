"""The job's own clock as direct evidence (trace v2 ``job``): it outranks what the waveforms suggest.

:func:`job_state` reads the window's job data once per verdict (``engine.diagnose``); the waveform rules
then run, and :func:`apply_job` applies the job's evidence to their verdict. Every number is a field of
:class:`~gpu_triage.diagnosis.thresholds.Thresholds` (docs/diagnosis.md gives the reasons).

- **Stale figures.** A data-wait share describes steps that happen. When the job has finished no step for
  ``max(job_stale_min_s, job_stale_steps`` × its median step time, 2 ticks``)``, the share it still reports
  is the last finished step's and says nothing about now: it is not evidence. Ticks whose share is stale
  are left out of the median too.
- **No progress.** No step for ``max(no_progress_min_s, no_progress_steps`` × the median step time``)``
  while the cards look busy (mean GPU-Util at least ``high_util_pct`` over the last 3 ticks) and their SMs
  do little (below ``sm_low_pct`` where SM activity is known): NCCL kernels spinning in a stuck collective
  hold GPU-Util at 100 % on a few SMs and do nothing, and so does a rank that hangs while its peers wait.
  A job that evaluates between training steps runs real kernels (SM activity high) and is not called hung.
- **Data wait high.** More than ``job_wait_share_pct`` of each step spent waiting for the next batch (the
  median over the judged ticks whose share is fresh, slowest rank): the data pipeline, whatever the
  utilisation says.
- **Data wait low.** Measured and below ``job_wait_low_pct``: the steps do not wait for data, so the rules
  that read a loader from the host (busy cores, a training process holding a core, few workers) are ruled
  out (:attr:`JobState.rules_out_loader`): when one of them held, the verdict names what the other facts
  support instead, with the job's share as evidence; otherwise nothing changes.
  A share the job does not measure (``None``: a log without data time, or ``pulse.step()`` without
  ``data_wait_s``) rules nothing out.

- **Its rate.** The median fresh samples/s over the judged ticks (:attr:`JobState.samples_per_s`), once the job
  has reported it for ``job_rate_min_s``, sets the num_workers recommendation's number and reason
  (:func:`with_job_rate`, ``host_evidence.JobRate``; docs/diagnosis.md "Advice" gives the formula).

A verdict whose window holds no job data is returned unchanged. Facts added when there is job data:
``job_samples_per_s``, ``job_data_wait_pct`` (NaN when stale or not reported), ``job_since_progress_s``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.host_evidence import least_busy_pct
from gpu_triage.diagnosis.mechanisms.base import Cause
from gpu_triage.diagnosis.mechanisms.communication import HANG_ADVICE
from gpu_triage.diagnosis.patterns import nanmean
from gpu_triage.diagnosis.rules import advise
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism
from gpu_triage.model import JobSample
from gpu_triage.window import WindowView

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements
    from gpu_triage.diagnosis.verdict import Verdict


@dataclass(frozen=True, slots=True)
class JobState:
    """What the job's clock says over one window (see the module docstring)."""

    last: JobSample  # the newest job sample of the judged stretch
    step_s: float | None  # median step time over the window's ticks that report one
    stale_after_s: float  # no step for longer: the figures of the last step are stale
    stopped_after_s: float  # no step for this long: no progress
    wait: float | None  # median fresh data-wait share over the judged ticks; None when stale or not measured
    th: Thresholds
    samples_per_s: float | None = None  # median fresh samples/s over the judged ticks; None when stale or not given

    @property
    def since_s(self) -> float | None:
        return self.last.since_progress_s

    @property
    def stopped(self) -> bool:
        return self.since_s is not None and self.since_s >= self.stopped_after_s

    @property
    def rules_out_loader(self) -> bool:
        """The steps measurably do not wait for data: no loader-reading rule may name the data pipeline."""
        return self.wait is not None and self.wait < self.th.job_wait_low_pct


def _tick_s(view: WindowView) -> float:
    iv = view.interval_s[~np.isnan(view.interval_s)] if view.n else view.interval_s
    if iv.size:
        return float(np.median(iv))
    steps = np.diff(view.t)
    return float(np.median(steps)) if steps.size else 0.0


def job_state(view: WindowView, start: int, th: Thresholds) -> JobState | None:
    """The job's clock over ``view`` (judged from ``start``); None when the judged ticks hold no job data."""
    if len(view.jobs) != view.n:
        return None
    judged = [j for j in view.jobs[start:] if j is not None]
    if not judged:
        return None
    steps = [j.step_time_s for j in view.jobs if j is not None and j.step_time_s]
    step = statistics.median(steps) if steps else None
    tick = _tick_s(view)
    stale_after = max(th.job_stale_min_s, th.job_stale_steps * (step or 0.0), 2.0 * tick)
    stopped_after = max(th.no_progress_min_s, th.no_progress_steps * (step or 0.0))

    wait = _fresh_median(judged, [j.data_wait_pct for j in judged], stale_after)
    rate = _fresh_median(judged, [j.samples_per_s or None for j in judged], stale_after)  # 0: not a rate to use
    return JobState(judged[-1], step, stale_after, stopped_after, wait, th, rate)


def _fresh(j: JobSample, stale_after: float) -> bool:
    return j.since_progress_s is None or j.since_progress_s <= stale_after


def _fresh_median(judged: list[JobSample], values: list[float | None], stale_after: float) -> float | None:
    """The median of ``values`` (one per judged sample) over the samples whose figures are fresh; None when
    none is given or the newest sample is stale."""
    fresh = [v for j, v in zip(judged, values, strict=True) if v is not None and _fresh(j, stale_after)]
    return statistics.median(fresh) if fresh and _fresh(judged[-1], stale_after) else None


def with_job_rate(m: Measurements, job: JobState | None) -> Measurements:
    """``m`` with the job's own samples/s beside its num_workers recommendation (host_evidence.WorkersRec),
    and the GPU-Util of its least busy working card over the same ticks (those with a fresh rate); unchanged
    without a job source, a fresh rate, or ``job_rate_min_s`` of judged ticks that report one."""
    if job is None or job.samples_per_s is None:
        return m
    jobs = m.view.jobs[m.start:]
    rows = [k for k, j in enumerate(jobs) if j is not None and j.samples_per_s and _fresh(j, job.stale_after_s)]
    if len(rows) * m.dt < m.th.job_rate_min_s:
        return m
    working = [c for c, i in enumerate(m.view.gpu_indexes) if m.all_util.get(i, 0.0) >= m.th.idle_util_pct]
    busy = least_busy_pct(m.gpu["util_pct"][rows], working)
    workers = m.workers.with_rate(job.samples_per_s, job.wait, busy)
    return m if workers is m.workers else replace(m, workers=workers)


def loader_ruled_out(job: JobState) -> Fact:
    """The evidence shown when the job's clock ruled out the loader a host rule read (engine.diagnose)."""
    wait = job.wait or 0.0
    return Fact(f"{wait:.0f} % of each step waits for the next batch (the job's own clock): not the input "
                "pipeline, whatever the cores say", "job_data_wait_pct", float(wait))


def _rank_note(job: JobSample) -> str:
    worst = max((r for r in job.ranks if r.data_wait_pct is not None), key=lambda r: r.data_wait_pct or 0.0,
                default=None)
    return f", rank {worst.rank}" if worst is not None and len(job.ranks) > 1 else ""


def apply_job(verdict: Verdict, view: WindowView, start: int, m: Measurements, job: JobState | None) -> Verdict:
    """``verdict`` with the job's evidence applied (see the module docstring); unchanged without job data."""
    if job is None:
        return verdict
    th, last, wait = m.th, job.last, job.wait
    facts = dict(verdict.facts)
    facts["job_samples_per_s"] = math.nan if last.samples_per_s is None else float(last.samples_per_s)
    facts["job_data_wait_pct"] = math.nan if wait is None else float(wait)
    facts["job_since_progress_s"] = math.nan if last.since_progress_s is None else float(last.since_progress_s)
    out = replace(verdict, facts=facts)

    recent = slice(max(start, view.n - 3), None)
    util = nanmean(view.gpu["util_pct"][recent], axis=None) if view.n_gpus else math.nan
    sm = nanmean(view.gpu["sm_active_pct"][recent], axis=None) if view.n_gpus else math.nan
    spinning = math.isnan(sm) or sm < th.sm_low_pct  # SM activity unknown: GPU-Util alone decides
    if job.stopped and not math.isnan(util) and util >= th.high_util_pct and spinning:
        return _no_progress(out, view, job, util)
    if wait is not None and wait > th.job_wait_share_pct:
        return _data_wait(out, view, job, wait, m)
    return out


def _no_progress(out: Verdict, view: WindowView, job: JobState, util: float) -> Verdict:
    """No step for long while the cards spin: a hung collective, whatever the waveforms said."""
    since = float(job.since_s or 0.0)
    fact = Fact(f"no progress for {since:.0f} s while the cards show {util:.0f} % GPU-Util: a stuck "
                "collective or a hang (NCCL kernels waiting spin at 100 % and do nothing)",
                "job_since_progress_s", since)
    advice = out.advice if out.mechanism == Mechanism.HUNG_COLLECTIVE else \
        HANG_ADVICE + [a for a in out.advice if a not in HANG_ADVICE]
    return replace(out, bottleneck=Bottleneck.HUNG_COLLECTIVE, confidence=max(out.confidence, job.th.conf_hung),
                   evidence=[fact.text, *out.evidence], evidence_facts=[fact.as_dict(), *out.evidence_facts],
                   advice=advice, mechanism=Mechanism.HUNG_COLLECTIVE,
                   gpus=out.gpus or list(view.gpu_indexes))


def _data_wait(out: Verdict, view: WindowView, job: JobState, wait: float, m: Measurements) -> Verdict:
    """Most of each step waits for the next batch: the data pipeline, whatever the utilisation said."""
    th = job.th
    fact = Fact(f"{wait:.0f} % of each step waits for the next batch (the job's own clock{_rank_note(job.last)}): "
                "the input pipeline sets the pace, whatever the utilisation says", "job_data_wait_pct", float(wait))
    if out.bottleneck == Bottleneck.DATA_PIPELINE:
        advice, destructive, mech = out.advice, out.destructive_advice, out.mechanism
    else:
        cause = Cause(Bottleneck.DATA_PIPELINE, th.conf_job_wait, [fact], Mechanism.JOB_DATA_WAIT)
        (advice, destructive), mech = advise(cause, m), Mechanism.JOB_DATA_WAIT
    return replace(out, bottleneck=Bottleneck.DATA_PIPELINE, confidence=max(out.confidence, th.conf_job_wait),
                   evidence=[fact.text, *out.evidence], evidence_facts=[fact.as_dict(), *out.evidence_facts],
                   advice=advice, destructive_advice=destructive, mechanism=mech,
                   gpus=out.gpus or list(view.gpu_indexes))
