"""The ``--source`` of the headless commands (``record``, ``export``): ``live`` or ``sim:SCENARIO``.

Light on purpose: naming a source imports neither the simulator (numpy work) nor the trace writer
(pyarrow), so ``export`` without ``--record`` never loads pyarrow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpu_triage.errors import UserError
from gpu_triage.sources.base import Source
from gpu_triage.sources.dumpbudget import InsideSettings


def sim_scenarios() -> tuple[str, ...]:
    # the light list (gpu_triage.scenarios), not the simulator: a live recording must not import the
    # simulator and its numpy work (importtime: 13.5 ms of `record` start-up)
    from gpu_triage.scenarios import SCENARIOS

    return tuple(SCENARIOS)


def make_source(
    spec: str, *, gpus: int = 8, seed: int = 0, interval_s: float = 2.0, start: datetime | None = None,
    stacks: bool = False, inside: InsideSettings | None = None,
) -> Source:
    """The source named by ``--source``: ``live`` or ``sim:SCENARIO``; UserError listing what is allowed.
    ``stacks``: the live source reads its waiting processes' stacks (a simulated one has none to read), a card
    waiting and its dumps budgeted as ``inside`` says (sources/waiting.py, sources/dumpbudget.py)."""
    allowed = "live, or sim:SCENARIO with SCENARIO one of " + ", ".join(sim_scenarios())  # light: no simulator
    if spec == "live":
        from gpu_triage.sources.inside import InsideSampler  # noqa: PLC0415 - lazy, with the live source
        from gpu_triage.sources.live import LiveSource  # noqa: PLC0415 - lazy: NVML loads only when asked

        return LiveSource(inside=InsideSampler(settings=inside) if stacks else None)
    if spec.startswith("sim:"):
        scenario = spec[4:]
        if scenario not in sim_scenarios():
            raise UserError(f"unknown --source {spec!r}: use {allowed}")
        from gpu_triage.sources.sim import SimulatedSource  # noqa: PLC0415 - lazy, like the live source

        kwargs: dict[str, Any] = {"gpus": gpus, "seed": seed, "interval_s": interval_s}
        if start is not None:
            kwargs["start"] = start
        return SimulatedSource(scenario, **kwargs)
    raise UserError(f"unknown --source {spec!r}: use {allowed}")
