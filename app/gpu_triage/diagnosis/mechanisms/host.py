"""The step is bound by the host thread that issues it (the job's clock rules out the data)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import LOADER_RULED_OUT, PROCS_SEEN, WAITS, Advice, Cause, Rule, ge, pct
from gpu_triage.diagnosis.mechanisms.launch import launch_advice
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


class HostBoundStep(Rule):
    """The step is bound by the host thread that issues it: the job's own clock says its steps do not wait
    for data, its process holds a whole core, and the GPU is fed steadily below what it could do (no pauses:
    not a sawtooth). A process sleeping or waiting on a service would not hold a core; one loading data would
    show a data wait. What is left is the Python loop launching kernels (and small host work between them)
    faster than nothing but slower than the GPU runs them: launch overhead, whatever the kernels' size
    (real `gpu-triage baseline`, a 16.8 M-parameter MLP on 2 H200: GPU-Util 60-75 %, SM activity 33-36 %,
    the rank at ~92 % of a core, data wait a measured 0 %)."""

    name, bottleneck = Mechanism.HOST_BOUND_STEP, Bottleneck.LAUNCH_OVERHEAD
    patterns = (Pattern.STEADY_LOW, Pattern.SINGLE_CARD_BUSY, Pattern.IMBALANCED)
    needs = (LOADER_RULED_OUT, WAITS, PROCS_SEEN)

    def detect(self, m: Measurements) -> Cause | None:
        th, pf, hf = m.th, m.pf, m.hf
        if not (ge(hf.gpu_mean, th.stall_util_pct) and ge(pf.main_cpu, th.proc_busy_pct)):
            return None
        return self.cause(th.conf_host_bound, m.base + [
            Fact(f"the training process holds {pct(pf.main_cpu)} of a core while the GPU is fed steadily at "
                 f"{pct(hf.gpu_mean)}: the host thread issuing the step is the limit (kernel launches and the "
                 "Python between them), not the data", "main_process_cpu_pct", pf.main_cpu)])

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return launch_advice(), []
