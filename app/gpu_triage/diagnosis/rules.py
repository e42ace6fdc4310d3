"""The one ordered tuple of rules, and the search for the first that holds.

Order decides: a rule that holds hides every rule after it. A job starting up first (it waits for nothing),
then what the job's own stacks say (they name what the outside rules can only guess), then the idle rules
(they apply only to idle cards), then the collectives (a rank blocked on storage before a hang before
communication: each is a narrower reading of the same waiting cards), then the host's inputs, then where the
work runs (one card of many, cards far apart), then what is left.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.mechanisms.base import Advice, Cause, Rule
from gpu_triage.diagnosis.mechanisms.cards import Imbalance, Placement, placement_advice
from gpu_triage.diagnosis.mechanisms.communication import Communication, HungCollective
from gpu_triage.diagnosis.mechanisms.host import HostBoundStep
from gpu_triage.diagnosis.mechanisms.idle import IdleNothing, MemoryIdle, StartUp
from gpu_triage.diagnosis.mechanisms.inside import INSIDE_RULES
from gpu_triage.diagnosis.mechanisms.launch import LaunchOverhead
from gpu_triage.diagnosis.mechanisms.one_core import IdleOneCore, OneCoreNoWorkers
from gpu_triage.diagnosis.mechanisms.pipeline import (
    DataPipeline,
    HostToDeviceCopy,
    IdleData,
    NoProcessInfo,
)
from gpu_triage.diagnosis.mechanisms.stall import Healthy, StallUnexplained, Unexplained
from gpu_triage.diagnosis.mechanisms.storage import IdleStorage, RankBlockedOnStorage, Storage
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements

RULES: tuple[Rule, ...] = (
    StartUp(), *INSIDE_RULES, IdleStorage(), IdleData(), IdleOneCore(), MemoryIdle(), Unexplained(), IdleNothing(),
    RankBlockedOnStorage(), HungCollective(), Communication(),
    Storage(), DataPipeline(), HostToDeviceCopy(), LaunchOverhead(), HostBoundStep(), OneCoreNoWorkers(),
    NoProcessInfo(),
    Placement(), Imbalance(), StallUnexplained(), Healthy(),
)

# The mechanisms whose rules read an input pipeline from the host: they stand aside when the job's own clock
# says its steps do not wait for data (job.py). Not the host-to-device copy: it happens inside the step
# (``.to(device)``), after the loader has returned.
LOADER_RULES: frozenset[Mechanism] = frozenset(r.name for r in RULES if r.reads_loader)

BOTTLENECKS: tuple[Bottleneck, ...] = tuple(dict.fromkeys([Bottleneck.NONE, *(r.bottleneck for r in RULES)]))

_OWNER: dict[Mechanism, Rule] = {}
for _rule in RULES:
    for _mech in (_rule.name, *_rule.also):
        _OWNER.setdefault(_mech, _rule)


def find_cause(m: Measurements, loader_ruled_out: bool = False) -> Cause:
    """The first rule that holds names the bottleneck (Healthy always holds); with ``loader_ruled_out``
    the rules that read the loader from the host are skipped (and the rules that need it ruled out may hold)."""
    if loader_ruled_out != m.loader_ruled_out:
        m = replace(m, loader_ruled_out=loader_ruled_out)
    for rule in RULES:
        if loader_ruled_out and rule.reads_loader:
            continue
        if rule.applies(m):
            cause = rule.detect(m)
            if cause is not None:
                return cause
    raise AssertionError("Healthy always holds")  # pragma: no cover


# one card busy, the rest idle: where the job runs is the first thing to change, whatever else holds
_PLACEMENT_FIRST = (Bottleneck.NONE, Bottleneck.DATA_PIPELINE, Bottleneck.LAUNCH_OVERHEAD, Bottleneck.STALL_UNEXPLAINED,
                    Bottleneck.HOST_OR_INPUT)


def advise(cause: Cause, m: Measurements) -> Advice:
    """(advice, destructive advice) for ``cause``: its mechanism's rule's, and the placement first."""
    rule = _OWNER.get(cause.mechanism)
    out, destructive = rule.advise(m, cause) if rule is not None else ([], [])
    if m.pattern == Pattern.SINGLE_CARD_BUSY and cause.bottleneck in _PLACEMENT_FIRST:
        out.insert(0, placement_advice(m))
    return out, destructive
