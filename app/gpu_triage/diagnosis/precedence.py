"""Evidence precedence: where the job's stacks were read in the judged stretch, a mechanism they contradict is
not claimed. One rule for the whole engine, applied to whatever cause the rules found (``engine.diagnose``).

The outside rules read symptoms (cores, the training process's CPU, workers) and name the nearest mechanism;
the stacks say what the process was doing. Where they disagree the stacks win:

- a loader reading (``rules.LOADER_RULES``: busy cores or pegged workers, num_workers=0, no process
  information) while no sample of the job shows the input pipeline anywhere (no DataLoader, Dataset, collate
  or fetch frame, no thread in one, no worker in its loop: ``threads.sample_shows_loading``). The job loads
  nothing, or not where its GPU waits. Real held-out case: a job with no DataLoader and its main thread in
  backward in 7 of 9 samples read ``in_process_loader`` with num_workers advice;
- CPU arithmetic (``host_compute``, whose advice is the optimizer's or the model part's) while the main
  thread sat off CPU in more than ``inside_phase_share`` of those samples (trace v4's threads): it waits (on
  the GPU, or on another thread that holds the GIL), the arithmetic is not its own.

The contradicted cause is replaced by ``unexplained`` with what the stacks show (the main thread's leading
phase, the contradiction itself); an inside rule that holds (``mechanisms/inside.py``) has already named what
they show. A process read fewer than ``inside_min_samples`` times contradicts nothing, and without stacks every
cause stands. An ``unexplained`` reading with stacks says what they show too.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.inside import HOST_COMPUTE, ProcessInside
from gpu_triage.diagnosis.mechanisms.stall import FROM_BOTH, FROM_OUTSIDE, unexplained
from gpu_triage.diagnosis.rules import LOADER_RULES
from gpu_triage.diagnosis.vocab import Mechanism

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements
    from gpu_triage.diagnosis.mechanisms.base import Cause


def overrule(m: Measurements, cause: Cause) -> Cause:
    """``cause``, or ``unexplained`` with what the stacks show where they contradict it (module docstring)."""
    read = [p for p in m.inside.processes if p.samples >= m.th.inside_min_samples]
    if not read:
        return cause
    if cause.mechanism == Mechanism.UNEXPLAINED:  # its head now says the stacks name no mechanism either
        head, *rest = cause.evidence
        head = dataclasses.replace(head, text=head.text.replace(FROM_OUTSIDE, FROM_BOTH))
        shown = [f for f in shows(read) if f.text not in {e.text for e in cause.evidence}]
        return dataclasses.replace(cause, evidence=[head, *rest, *shown])
    why = contradiction(m, cause, read)
    if why is None:
        return cause
    return unexplained(m, [why, *shows(read)], inside=True)


def contradiction(m: Measurements, cause: Cause, read: list[ProcessInside]) -> Fact | None:
    """The sentence saying how the stacks contradict ``cause``; None where they do not."""
    if cause.mechanism in LOADER_RULES and not any(p.loading for p in read):
        n = sum(p.samples + sum(p.workers.values()) for p in read)
        return Fact(f"no DataLoader, Dataset, collate or fetch frame in any of its {n} stack samples: the job's "
                    f"stacks show no input pipeline, so not {cause.bottleneck} ({cause.mechanism})",
                    "stack_loading_samples", 0.0)
    if cause.mechanism == Mechanism.HOST_COMPUTE:
        for p in read:
            idle, total = p.thread_read.idle_share(HOST_COMPUTE)
            if total >= m.th.inside_min_samples and idle > m.th.inside_phase_share * total:  # most, not half
                return Fact(f"{p.name}'s main thread was off CPU in {idle} of its {total} samples in torch's "
                            "optimizer, backward or model: it waits (on the GPU, or on another thread), the CPU "
                            "arithmetic is not its own", "main_thread_idle_share", idle / total, p.cards, p.pid)
    return None


def shows(read: list[ProcessInside]) -> list[Fact]:
    """What the stacks show: each process's main thread in its leading phase (two processes at most)."""
    return [p.fact((max(p.counts, key=lambda k: p.counts[k]),)) for p in read[:2] if p.counts]
