"""The job's side of a tick (trace v2): what the training itself says about its progress.

Filled from the job's log (``--job-log``) or from :mod:`gpu_triage.pulse` inside the job. A tick without a
job source has ``job = None`` (shown "n/a"); a field the source does not give is ``None``, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class JobRank:
    """One training process (rank) as its pulse reports it."""

    rank: int
    local_rank: int | None = None
    world_size: int | None = None
    pid: int | None = None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    step_time_s: float | None = None
    data_wait_pct: float | None = None  # share of each step spent waiting for the next batch
    since_progress_s: float | None = None  # seconds since this rank last finished a step


@dataclass(slots=True)
class JobSample:
    """The job over one tick. Whole-job figures: samples/s summed over ranks, step time and wait of the
    slowest rank, ``since_progress_s`` of the rank that progressed last longest ago."""

    source: str  # "pulse", "log:tqdm", "log:hf_trainer", ...
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    step_time_s: float | None = None
    data_wait_pct: float | None = None
    since_progress_s: float | None = None
    steps: int | None = None  # the job's own step counter, where it says one
    loss: float | None = None
    ranks: list[JobRank] = field(default_factory=list)
