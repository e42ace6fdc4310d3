"""The doctor's checks, registered: what a check returns, the registry, the report's status.

Each check says ok / warn / fail / skip, one line of why (``summary``) and one line of what to do
(``advice``), plus the numbers behind it (``data``) for scripts. ``skip`` means the check had nothing to
look at here (no GPU, torch not importable, a field the hardware does not report): it is not a pass, and
like ``ok`` it never changes the exit status.

Every check is registered once, with :func:`register` (its id, a title, when it runs): the id is written
in one place, and :func:`gpu_triage.doctor.checks.run_checks` runs them in display order. A
check function returns a :class:`Finding`; the registry names it. The checks live by topic in
``gpu_checks``, ``link_checks``, ``host_checks`` and ``checks`` (the planned job's traffic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpu_triage.doctor.facts import Facts, GpuFacts

Status = Literal["ok", "warn", "fail", "skip"]
#: How bad each status is; a skip weighs nothing (see :func:`worst`).
STATUS_ORDER: dict[str, int] = {"skip": -1, "ok": 0, "warn": 1, "fail": 2}


@dataclass(slots=True)
class Finding:
    """What one check found; :func:`run_checks` turns it into a :class:`Check` under the check's id."""

    status: Status
    summary: str
    advice: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Check:
    id: str
    status: Status
    summary: str
    advice: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "summary": self.summary, "advice": self.advice,
                "data": self.data}


def worst(statuses: Iterable[Status]) -> Status:
    """The report's status: the worst of its checks, skips left out ("ok" when nothing else is left)."""
    return max((s for s in statuses if s != "skip"), key=STATUS_ORDER.__getitem__, default="ok")


#: What a check reads: the facts alone; with the topology analysis; with the --params count too.
Needs = Literal["facts", "topology", "params"]
#: When it runs: always; only when some card answers (else gpu.driver stands for the GPU part); only
#: with --params.
When = Literal["always", "cards", "params"]


@dataclass(frozen=True, slots=True)
class CheckSpec:
    id: str
    title: str
    func: Callable[..., Finding]
    needs: Needs = "facts"
    when: When = "always"


#: Every check, in the order their modules were imported (the display order is checks.REGISTRY).
REGISTERED: list[CheckSpec] = []


def register(check_id: str, title: str, *, needs: Needs = "facts", when: When = "always"
             ) -> Callable[[Callable[..., Finding]], Callable[..., Finding]]:
    """Add the decorated check function to :data:`REGISTERED` under ``check_id``."""

    def add(func: Callable[..., Finding]) -> Callable[..., Finding]:
        if any(spec.id == check_id for spec in REGISTERED):
            raise ValueError(f"doctor check {check_id} registered twice")
        REGISTERED.append(CheckSpec(check_id, title, func, needs, when))
        return func

    return add


def card_list(indexes: list[int]) -> str:
    return ("card " if len(indexes) == 1 else "cards ") + ",".join(str(i) for i in indexes)


def live_gpus(facts: Facts) -> list[GpuFacts]:
    return [g for g in facts.gpus if not g.lost]
