"""What every rule is made of: the cause it returns, the needs it declares, the helpers its sentences use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact, ge, pct
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern
from gpu_triage.units import fmt_rate

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements

Advice = tuple[list[str], list[str]]  # (advice, destructive advice: kill/free/restart, shown only when held)


@dataclass(slots=True)
class Cause:
    bottleneck: Bottleneck
    confidence: float
    evidence: list[Fact]
    mechanism: Mechanism
    cards: list[int] | None = None  # the cards concerned, when not the pattern's


@dataclass(frozen=True, slots=True)
class Need:
    """A measurement a rule cannot do without: checked before ``detect`` (the rule holds only where it is)."""

    name: str
    holds: Callable[[Measurements], bool]


SM_KNOWN = Need("sm_known", lambda m: m.sm_known)  # SM activity measured (Hopper and later: GPM)
SEVERAL_CARDS = Need("several_cards", lambda m: m.n_gpus >= 2)
WAITS = Need("waits", lambda m: m.waits)  # the GPU waits over the judged ticks (see Measurements.waits)
JOB_PRESENT = Need("job_present", lambda m: m.job_present)
PROCS_SEEN = Need("procs_seen", lambda m: m.pf.seen)
LOADER_RULED_OUT = Need("loader_ruled_out", lambda m: m.loader_ruled_out)  # the job's clock: no data wait


class Rule:
    """detect → evidence (a Cause) or None; advise → what to change.

    ``patterns``: the patterns it applies to (empty: any); ``needs``: what must hold before ``detect`` is
    asked; ``reads_loader``: it reads an input pipeline from the host (cores, the training process's CPU,
    workers), so it stands aside when the job's own clock says its steps do not wait for data;
    ``also``: mechanisms besides its own name that its advice covers."""

    name: Mechanism
    bottleneck: Bottleneck
    patterns: tuple[Pattern, ...] = ()
    needs: tuple[Need, ...] = ()
    reads_loader = False
    also: tuple[Mechanism, ...] = ()

    def applies(self, m: Measurements) -> bool:
        return (not self.patterns or m.pattern in self.patterns) and all(n.holds(m) for n in self.needs)

    def detect(self, m: Measurements) -> Cause | None:  # pragma: no cover - every rule overrides it
        raise NotImplementedError

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return [], []

    def cause(self, confidence: float, evidence: list[Fact], cards: list[int] | None = None) -> Cause:
        return Cause(self.bottleneck, confidence, evidence, self.name, cards)


__all__ = ["Advice", "Cause", "Need", "Rule", "cards_text", "gbs", "ge", "pct"]


def gbs(x: float) -> str:
    return fmt_rate(x)  # the project's one convention for rates (units.py)


def cards_text(ids: Sequence[int]) -> str:
    return ("card " if len(ids) == 1 else "cards ") + ", ".join(map(str, ids))
