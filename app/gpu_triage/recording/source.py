"""What a recorder samples: the ``--source`` (``live`` or ``sim:SCENARIO``) with the job's own progress beside it,
the training's pulse files on a live machine and ``--job-log`` where given. ``record``, ``gpu-triage run
--record`` and ``export`` set their source up here, so that they record the same things."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from gpu_triage.config import Config, inside_settings
from gpu_triage.sources.base import Source

if TYPE_CHECKING:
    from gpu_triage.sources.job import JobMonitor


def job_monitor(spec: str, config: Config, job_log: str | None = None,
                batch_size: int | None = None) -> JobMonitor | None:
    """The job's progress beside ``spec``'s ticks: the training's pulse on a live machine, ``job_log`` where
    given; None for neither. A log that cannot be followed is a UserError (one line) here, at start, before
    any source is opened."""
    if spec != "live" and not job_log:
        return None
    from gpu_triage.sources.job import monitor_for  # noqa: PLC0415

    return monitor_for(job_log, batch_size, config, use_pulse=spec == "live")


def recorded_source(
    spec: str,
    config: Config,
    interval_s: float,
    *,
    stacks: bool,
    monitor: JobMonitor | None = None,
    gpus: int = 8,
    seed: int = 0,
    start: datetime | None = None,
    tell: Callable[[str], None] | None = None,
) -> Source:
    """The source ``spec`` names (``stacks``: a live one reads its waiting processes' stacks; a simulated one's
    cards, seed and ``start`` as given), with ``monitor``'s job progress (:func:`job_monitor`) merged into its
    ticks; ``tell`` gets the monitor's notices."""
    from gpu_triage.sources.spec import make_source  # noqa: PLC0415 - NVML or the simulator: lazily

    source = make_source(spec, gpus=gpus, seed=seed, interval_s=interval_s, start=start, stacks=stacks,
                         inside=inside_settings(config))
    if monitor is None:
        return source
    from gpu_triage.sources.job import WithJob  # noqa: PLC0415

    return WithJob(source, monitor, interval_s, on_message=tell)
