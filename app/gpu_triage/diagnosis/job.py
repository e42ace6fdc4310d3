"""The job's own clock as direct evidence (trace v2 ``job``): it outranks what the waveforms suggest.

Two rules, applied after the waveform verdict is made (``engine.diagnose`` calls :func:`apply_job` once):

- **Data wait.** When more than ``WAIT_SHARE_PCT`` of each step is spent waiting for the next batch (the
  median over the judged ticks that report it, slowest rank), the bottleneck is the data pipeline, whatever
  the utilisation says: the GPUs cannot be the limit of a step that spends most of its time without work.
- **No progress.** When the job has not finished a step for ``NO_PROGRESS_S`` seconds (and for more than
  three of its own steps) while the cards look busy (mean GPU-Util at least ``high_util_pct``), the cards
  are not working but waiting: NCCL kernels spinning in a stuck collective hold GPU-Util at 100 %, and so
  does a rank that hangs while its peers wait for it.

A verdict whose window holds no job data is returned unchanged. Facts added when there is job data:
``job_samples_per_s``, ``job_data_wait_pct``, ``job_since_progress_s`` (NaN where the source does not say).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.advice import HANG_ADVICE, advise
from gpu_triage.diagnosis.causes import Cause, Context
from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.patterns import nanmean
from gpu_triage.model import JobSample
from gpu_triage.window import WindowView

if TYPE_CHECKING:
    from gpu_triage.diagnosis.engine import Verdict

WAIT_SHARE_PCT = 50.0  # more than half of each step without a batch: the input is the limit
NO_PROGRESS_S = 30.0  # no step for this long: stopped (a healthy step of a training is far shorter)


def _rank_note(job: JobSample) -> str:
    worst = max((r for r in job.ranks if r.data_wait_pct is not None), key=lambda r: r.data_wait_pct or 0.0,
                default=None)
    return f", rank {worst.rank}" if worst is not None and len(job.ranks) > 1 else ""


def apply_job(verdict: Verdict, view: WindowView, start: int, ctx: Context) -> Verdict:
    """``verdict`` with the job's evidence applied (see the module docstring); unchanged without job data."""
    th = ctx.th
    jobs = view.jobs[start:] if len(view.jobs) == view.n else []
    present = [j for j in jobs if j is not None]
    if not present:
        return verdict
    last = present[-1]
    facts = dict(verdict.facts)
    waits = [j.data_wait_pct for j in present if j.data_wait_pct is not None]
    wait = statistics.median(waits) if waits else None
    facts["job_samples_per_s"] = math.nan if last.samples_per_s is None else float(last.samples_per_s)
    facts["job_data_wait_pct"] = math.nan if wait is None else float(wait)
    facts["job_since_progress_s"] = math.nan if last.since_progress_s is None else float(last.since_progress_s)
    out = replace(verdict, facts=facts)

    util = nanmean(view.gpu["util_pct"][max(start, view.n - 3):], axis=None) if view.n_gpus else math.nan
    since = last.since_progress_s
    step = last.step_time_s or 0.0
    if since is not None and since >= max(NO_PROGRESS_S, 3 * step) and not math.isnan(util) \
            and util >= th.high_util_pct:
        fact = Fact(f"no progress for {since:.0f} s while the cards show {util:.0f} % GPU-Util: a stuck "
                    "collective or a hang (NCCL kernels waiting spin at 100 % and do nothing)",
                    "job_since_progress_s", float(since))
        advice = out.advice if out.mechanism == "hung_collective" else \
            HANG_ADVICE + [a for a in out.advice if a not in HANG_ADVICE]
        return replace(out, bottleneck="communication", confidence=max(out.confidence, 0.85),
                       evidence=[fact.text, *out.evidence], evidence_facts=[fact.as_dict(), *out.evidence_facts],
                       advice=advice, mechanism="hung_collective", gpus=out.gpus or list(view.gpu_indexes))
    if wait is not None and wait > WAIT_SHARE_PCT:
        fact = Fact(f"{wait:.0f} % of each step waits for the next batch (the job's own clock{_rank_note(last)}): "
                    "the input pipeline sets the pace, whatever the utilisation says", "job_data_wait_pct", float(wait))
        if out.bottleneck == "data_pipeline":
            advice, destructive = out.advice, out.destructive_advice
        else:
            advice, destructive = advise(Cause("data_pipeline", 0.9, [fact], "job_data_wait"), ctx)
        return replace(out, bottleneck="data_pipeline", confidence=max(out.confidence, 0.9),
                       evidence=[fact.text, *out.evidence], evidence_facts=[fact.as_dict(), *out.evidence_facts],
                       advice=advice, destructive_advice=destructive,
                       mechanism=out.mechanism if out.bottleneck == "data_pipeline" else "job_data_wait",
                       gpus=out.gpus or list(view.gpu_indexes))
    return out
