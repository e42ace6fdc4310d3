"""One core, no DataLoader workers, the GPU waiting: the training process's own CPU work or its in-process
loading (num_workers=0), which the outside cannot tell apart.

PyTorch's default ``num_workers=0`` loads each batch in the training process: ~100 % of one core, moved between
cores by the scheduler. A Python loop between the steps, per-step bookkeeping or ``.item()`` syncs hold the same
one core with the same idle card and next to no input bytes (real `h200x2-loader0`, a DataLoader with
num_workers=0, against the held-out Python loops of `h200-inside-{a,c,e}`: one core, no workers, the card nearly
idle in both). So without the job's stacks (``mechanisms/inside.py``: the main thread in the DataLoader's fetch,
or in its own Python) or its own clock (``job.py``: the data wait it measures) the reading is ``host_or_input``:
neither a data pipeline nor a host step is claimed, and metrics, alerts and summaries count it as neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import PROCS_SEEN, SM_KNOWN, WAITS, Advice, Cause, Rule, ge, pct
from gpu_triage.diagnosis.mechanisms.launch import launch_advice
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements

AMBIGUOUS = ("it loads the data itself (a DataLoader with num_workers=0) or its own CPU work holds the step (a "
             "Python loop, bookkeeping, .item() syncs): from outside the two look alike, its stacks tell which")
MANY = ("it loads the data itself (a DataLoader with num_workers=0, decoding on every intra-op thread) or its own "
        "CPU work holds the step (a model part or an optimizer on the CPU): from outside the two look alike, its "
        "stacks tell which")


def _holds(m: Measurements, where: str) -> Fact:
    """The evidence line: how much CPU the training process holds with no workers, and what that may be."""
    cpu = m.pf.main_cpu
    if ge(cpu, 100.0 * m.th.one_thread_max_cores):
        return Fact(f"the training process holds {cpu / 100:.1f} cores {where}, with no DataLoader workers: {MANY}",
                    "main_process_cpu_pct", cpu)
    return Fact(f"the training process holds {pct(cpu)} of a core {where}, with no DataLoader workers "
                f"(num_workers=0): {AMBIGUOUS}", "main_process_cpu_pct", cpu)


def one_core_advice(m: Measurements) -> list[str]:
    """Both readings' advice, each under its condition, after how to tell them apart."""
    hi = m.workers.hi
    span = "2" if hi <= 2 else f"2..{hi}"
    return ["see which: py-spy dump --pid PID (gpu-triage reads the stacks itself when it may ptrace the job: as "
            "root or as the job's user); or let the job measure its data wait: pulse.step(n, data_wait_s=...)",
            f"if the dump is in the DataLoader's fetch or the Dataset's __getitem__: DataLoader(num_workers={span}) "
            "(now 0), pin_memory=True, so batches are made beside the step instead of in it",
            "if it is the process's own code: move per-step work off the step (every N steps, a background thread), "
            "vectorise loops over tensors, read GPU values (.item(), .cpu()) every N steps"]


def _holds_one_core(m: Measurements) -> bool:
    """No DataLoader workers, the training process at ``proc_busy_pct`` of a core or more, no rank waiting at a
    collective (DDP ranks spin at 100 % of a core there), no bytes both ways (gradients and parameters, not
    batches), and the cards fed slowly since the job runs (a job starting up holds a core with idle cards too,
    but runs no kernel): see ``Measurements.fed_slowly``."""
    pf, th = m.pf, m.th
    if not (pf.workers == 0 and ge(pf.main_cpu, th.proc_busy_pct)):
        return False
    return not m.rank_held and m.round_trip is None and m.fed_slowly


class IdleOneCore(Rule):
    """The idle pattern: a model so small its cards read 0-1 % while its process holds a whole core."""

    name, bottleneck = Mechanism.IN_PROCESS_OR_HOST, Bottleneck.HOST_OR_INPUT
    patterns, needs, reads_loader = (Pattern.IDLE,), (PROCS_SEEN, SM_KNOWN), True

    def detect(self, m: Measurements) -> Cause | None:
        if not _holds_one_core(m):
            return None
        return self.cause(m.th.conf_idle_data, [*m.base, _holds(m, "while its cards run nothing")])

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return one_core_advice(m), []


class OneCoreNoWorkers(Rule):
    """The GPU waits while the training process holds one core with no workers. The scheduler moves it between
    cores, so no core looks pegged: the process's own CPU is read. Without SM activity it cannot be told from
    many tiny kernels either (``in_process_or_launch``)."""

    name, bottleneck = Mechanism.IN_PROCESS_OR_HOST, Bottleneck.HOST_OR_INPUT
    needs, reads_loader = (WAITS, PROCS_SEEN), True
    also = (Mechanism.IN_PROCESS_OR_LAUNCH,)

    def detect(self, m: Measurements) -> Cause | None:
        if not _holds_one_core(m):
            return None
        th, pf = m.th, m.pf
        if not m.sm_known:  # cannot tell in-process loading from tiny kernels without SM activity
            return Cause(Bottleneck.LAUNCH_OVERHEAD, th.conf_launch_no_sm, m.base + [
                Fact("the training process holds one core and has no DataLoader workers: it either launches "
                     "many small kernels or loads data itself (num_workers=0)", "main_process_cpu_pct", pf.main_cpu),
                m.no_sm_note], Mechanism.IN_PROCESS_OR_LAUNCH)
        return self.cause(th.conf_in_process, [*m.base, _holds(m, "while the GPU waits")])

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        if cause.mechanism == Mechanism.IN_PROCESS_OR_LAUNCH:
            return [*launch_advice(), "if the process loads data itself: DataLoader(num_workers=2 or more)"], []
        return one_core_advice(m), []
