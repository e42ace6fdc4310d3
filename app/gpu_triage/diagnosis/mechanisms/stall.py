"""The GPUs wait and nothing on the host explains it; or they do not wait at all."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import PROCS_SEEN, WAITS, Advice, Cause, Rule, gbs, ge, pct
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


def _seen(m: Measurements) -> list[str]:
    """What the host shows of the job, figure by figure, without reading a mechanism into it."""
    pf, hf = m.pf, m.hf
    cpu = pf.main_cpu if not math.isnan(pf.main_cpu) else pf.startup_cpu
    parts = []
    if not math.isnan(cpu):
        parts.append(f"its process at {pct(cpu)} of a core")
    parts.append(f"{pf.workers} DataLoader worker{'' if pf.workers == 1 else 's'}" if pf.seen else "no process seen")
    parts += [f"CPU {pct(hf.cpu_busy)} over {hf.cores} cores", f"disk {pct(hf.disk_busy)}", f"iowait {pct(hf.iowait)}",
              f"PCIe host-to-device {gbs(hf.h2d_bytes_per_s)}"]
    return parts


FROM_OUTSIDE, FROM_BOTH = "from outside the job", "from its stacks or from outside"  # where no rule named it


def unexplained(m: Measurements, extra: list[Fact] | None = None, what: str = "", inside: bool = False) -> Cause:
    """The honest verdict when no rule names the mechanism: what is seen, and no advice that guesses one
    (``inside``: the job's stacks were read too, and name none either)."""
    state = "idle" if m.pattern == Pattern.IDLE else "waiting"
    where = FROM_BOTH if inside else FROM_OUTSIDE
    head = Fact(f"unexplained: GPU {state} while its job holds it ({', '.join(_seen(m))}){what}; no rule "
                f"names the mechanism {where}", "gpu_util_mean_pct", m.hf.gpu_mean)
    return Cause(Bottleneck.UNEXPLAINED, m.th.conf_unexplained, [head, *(extra or []), *m.base],
                 Mechanism.UNEXPLAINED)


def _kernels_recur(m: Measurements) -> bool:
    """Some SM activity (above ``sm_trace_pct``) on at least ``sm_trace_ticks`` of the judged ticks:
    kernels too small for GPU-Util's whole percents keep coming back, the job steps (real: 2 DataLoader
    workers sleeping 50 ms a sample, GPU-Util 0 %, SM 0.06-0.12 % on every tick; a CPU model part feeding a
    tiny MLP, SM 0.01-0.04 %). An idle card reads 0.0."""
    sm = m.gpu["sm_active_pct"]
    if not sm.size:
        return False
    with np.errstate(invalid="ignore"):
        ticks = int((sm > m.th.sm_trace_pct).any(axis=1).sum())
    return ticks >= m.th.sm_trace_ticks


class Unexplained(Rule):
    """Idle cards held by a job that still does something: it runs a kernel now and then, or it appeared in
    the window and is past start-up. Neither the host nor the cards say what it waits for (a service, a
    sleep in its loader, a compiler, host compute): saying "none" would hide a job to fix, and naming the
    nearest mechanism would give advice that is wrong as often as right. The one line of advice says how
    to look inside."""

    name, bottleneck, patterns, needs = Mechanism.UNEXPLAINED, Bottleneck.UNEXPLAINED, (Pattern.IDLE,), (PROCS_SEEN,)

    def detect(self, m: Measurements) -> Cause | None:
        pf, th = m.pf, m.th
        trickle = ge(m.hf.gpu_mean, th.trickle_util_pct) or _kernels_recur(m)
        if not (trickle or not math.isnan(pf.startup_s)):
            return None
        what = ": it runs a kernel now and then" if trickle else f": it appeared {pf.startup_s:.0f} s ago"
        return unexplained(m, what=what)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return ["to see what the job does while its cards wait: py-spy dump --pid PID of the training process "
                "(and of its DataLoader workers), or torch.profiler over a few steps"], []


class StallUnexplained(Rule):
    name, bottleneck = Mechanism.STALL_UNEXPLAINED, Bottleneck.STALL_UNEXPLAINED
    patterns, needs = (Pattern.SAWTOOTH, Pattern.STEADY_LOW), (WAITS,)

    def detect(self, m: Measurements) -> Cause | None:
        th, hf = m.th, m.hf
        conf = th.conf_stall_sawtooth if m.pattern == Pattern.SAWTOOTH else th.conf_stall_low
        if not m.sm_known:
            conf -= th.conf_no_sm_penalty
        parts = [(f"CPU {pct(hf.cpu_busy)} (busiest core {pct(hf.max_core)})",
                  ge(hf.cpu_saturated_share, th.cpu_saturated_share)),
                 (f"disk {pct(hf.disk_busy)}", ge(hf.disk_busy, th.disk_busy_pct)),
                 (f"iowait {pct(hf.iowait)}", ge(hf.iowait, th.iowait_pct)),
                 (f"links {gbs(hf.link_stall_bytes_per_s)}", ge(hf.link_stall_bytes_per_s, th.link_busy_bytes_per_s))]
        quiet = [p for p, busy in parts if not busy]
        busy = [p for p, b in parts if b]
        text = "while the GPU waits: " + ", ".join(quiet) + (": all quiet" if not busy else " quiet")
        if busy:
            text += "; " + ", ".join(busy) + " busy but no rule names them"
        text += ", so the wait is in the job itself (sleeps, syncs, checkpoints, logging)"
        return self.cause(conf, m.base + [Fact(text, "link_stall_bytes_per_s", hf.link_stall_bytes_per_s)])

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return ["the job itself pauses: look for time.sleep, synchronous checkpoints or evaluation, "
                "logging with .item()/.cpu() every step, or waits on another service",
                "profile one period with torch.profiler to see what the GPU waits on"], []


class Healthy(Rule):
    name, bottleneck = Mechanism.HEALTHY, Bottleneck.NONE

    def detect(self, m: Measurements) -> Cause:
        th = m.th
        conf = th.conf_none_busy if m.sm_known and ge(m.hf.sm_mean, th.sm_low_pct) else th.conf_none_other
        ev = m.base + [Fact("the GPUs are kept busy" if m.high
                            else "nothing on the host explains the difference between the cards")]
        if not m.sm_known:
            ev.append(m.no_sm_note)
        return self.cause(conf, ev)
