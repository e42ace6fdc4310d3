"""The GPUs wait and nothing on the host explains it; or they do not wait at all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import WAITS, Advice, Cause, Rule, gbs, ge, pct
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


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
