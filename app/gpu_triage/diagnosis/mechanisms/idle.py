"""Cards that run nothing: a job starting up, memory held by a job that runs nothing, nothing at all."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import Advice, Cause, Rule, ge, pct
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


class StartUp(Rule):
    """A job whose processes appeared on the cards and do not run yet, one of them busy on the host: imports,
    the CUDA context, building and moving the model, NCCL set-up, then the first steps. Its process holds a
    core while the cards idle, exactly as a loader with num_workers=0 would, but no step has run yet: nothing
    waits for input. (Real lab jobs: 4-8 s of it, SM activity 0.0 and card memory arriving.) The tracker
    shows it without letting it change the held verdict (tracker.py)."""

    # any pattern: the judged stretch may still hold the job before it
    name, bottleneck = Mechanism.START_UP, Bottleneck.NONE

    def detect(self, m: Measurements) -> Cause | None:
        pf, th = m.pf, m.th
        if math.isnan(pf.startup_s) or (not math.isnan(pf.startup_cpu) and pf.startup_cpu < th.others_quiet_pct):
            return None  # a process that appeared idle on the host waits for something else: not start-up
        if pf.startup_s > th.startup_max_s:
            return None  # imports, the context and the model take seconds: a minute without a step is not that
        if (pf.startup_s > th.startup_busy_max_s and not math.isnan(pf.startup_cpu)
                and pf.startup_cpu >= 100.0 * th.host_compute_cores):
            return None  # building a model takes every intra-op thread for seconds; for longer it is host compute
        mem = ""
        if not math.isnan(pf.startup_mem_from):
            mem = f"; card memory {pf.startup_mem_from / 2**30:.1f} → {pf.startup_mem_now / 2**30:.1f} GiB"
        cpu = "" if math.isnan(pf.startup_cpu) else f"; its process at {pct(pf.startup_cpu)} of a core"
        ran = ("no kernel since" if math.isnan(pf.startup_kernel_s)
               else f"its first kernels {pf.startup_kernel_s:.0f} s ago")
        return self.cause(th.conf_start_up, m.base + [Fact(
            f"the job appeared {pf.startup_s:.0f} s ago, {ran}{cpu}{mem}: starting up (imports, CUDA context, "
            "model build, first steps), not yet waiting for input", "startup_s", pf.startup_s)])


class MemoryIdle(Rule):
    """Memory held on cards that run nothing, with nothing on the host that the job could be waiting for."""

    name, bottleneck, patterns = Mechanism.MEMORY_IDLE, Bottleneck.MEMORY_IDLE, (Pattern.IDLE,)

    def detect(self, m: Measurements) -> Cause | None:
        hf = m.hf
        if not ge(hf.mem_frac, m.th.mem_held_frac):
            return None
        ev = [Fact(f"card {hf.mem_card} holds {hf.mem_frac * 100:.0f} % of its memory", "gpu_mem_used_frac",
                   hf.mem_frac, () if hf.mem_card is None else (hf.mem_card,)),
              Fact(m.gpu_line.text + ": no kernels run", "gpu_util_mean_pct", hf.gpu_mean)]
        if m.sm_known:
            ev.append(Fact(f"SM activity {pct(hf.sm_mean)}", "sm_active_mean_pct", hf.sm_mean))
        return self.cause(m.th.conf_memory_idle, ev)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return (["a process holds GPU memory without running kernels: see which one in the process list and "
                 "whether it should still be waiting"],
                ["if it should not: finish or kill it, or free the memory with del + "
                 "torch.cuda.empty_cache() if it is yours"])


class IdleNothing(Rule):
    name, bottleneck, patterns = Mechanism.IDLE, Bottleneck.NONE, (Pattern.IDLE,)

    def detect(self, m: Measurements) -> Cause:
        seen = m.pf.seen
        return self.cause(m.th.conf_idle_waiting if seen else m.th.conf_idle_nothing, m.base + [
            Fact("no kernels run" + ("" if seen else " and no process uses the GPUs"))])
