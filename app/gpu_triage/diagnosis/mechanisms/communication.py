"""The GPUs wait at a collective: for a late rank over busy links, or for a peer that is gone."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import SM_KNOWN, Advice, Cause, Rule, cards_text, gbs, ge
from gpu_triage.diagnosis.mechanisms.cards import straggler_advice, straggler_cause
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements

HANG_ADVICE = [
    "find the missing rank: py-spy dump --pid PID of every rank shows which one is not in the collective",
    "rerun with NCCL_DEBUG=INFO to see the last collective each rank entered",
    ("set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a collective timeout (init_process_group(timeout=...)) so a "
     "hung collective fails instead of spinning"),
]
HANG_DESTRUCTIVE = ["once the missing rank is known, restart the job from its last checkpoint"]


def _most_wait(m: Measurements, waiting: list[int]) -> bool:
    """Cards wait (GPU-Util high, SM low), at least half of the working ones."""
    working = [u for u in m.util.values() if u >= m.th.stall_util_pct]
    return bool(waiting) and len(waiting) * 2 >= max(1, len(working))


def _waiting_fact(m: Measurements, waiting: list[int]) -> Fact:
    th = m.th
    return Fact(f"{cards_text(waiting)}: GPU-Util ≥ {th.high_util_pct:.0f} % but SM activity "
                f"< {th.sm_low_pct:.0f} %: kernels waiting, not computing", "sm_active_mean_pct",
                max(m.sm[i] for i in waiting), tuple(waiting))


class HungCollective(Rule):
    """Ranks spinning in a collective with no traffic: a peer died, hung or never joined. No bytes move, so
    it is not the topology; the fix is to find the rank that is missing."""

    name, bottleneck = Mechanism.HUNG_COLLECTIVE, Bottleneck.HUNG_COLLECTIVE
    needs = (SM_KNOWN,)

    def detect(self, m: Measurements) -> Cause | None:
        th, waiting = m.th, m.waiting
        if not (_most_wait(m, waiting) and m.n_gpus >= 2):
            return None
        link = max((m.link.get(i, math.nan) for i in waiting), default=math.nan)
        # quiet over the judged stretch, or quiet for a regime's length now (a hang right after traffic)
        quiet_now = m.quiet_wait_s >= th.regime_min_s
        if not quiet_now and (math.isnan(link) or link >= th.link_quiet_bytes_per_s):
            return None
        if quiet_now:
            link = min(link, th.link_quiet_bytes_per_s) if not math.isnan(link) else 0.0
        hung = m.quiet_wait_s >= th.hung_min_s
        what = ("a hung collective: no traffic and no progress (a peer died, hung or never joined)" if hung
                else "a collective waiting with no traffic: a peer is late or gone")
        # the hang leads: it is what the on-call engineer acts on, the figures follow
        ev = [Fact(f"{what}: links under {gbs(th.link_quiet_bytes_per_s)} (PCIe + NVLink) for the last "
                   f"{m.quiet_wait_s:.0f} s", "link_bytes_per_s", link, tuple(waiting)),
              _waiting_fact(m, waiting), *m.base]
        return self.cause(th.conf_hung if hung else th.conf_comm_no_links, ev)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return list(HANG_ADVICE), list(HANG_DESTRUCTIVE)


class Communication(Rule):
    """NCCL kernels waiting for a late rank hold their SMs and read 100 % GPU-Util (NVIDIA/nccl#403)."""

    name, bottleneck = Mechanism.COMMUNICATION, Bottleneck.COMMUNICATION
    needs = (SM_KNOWN,)
    also = (Mechanism.STRAGGLER,)

    def detect(self, m: Measurements) -> Cause | None:
        th, waiting = m.th, m.waiting
        if not _most_wait(m, waiting):
            return None
        link_ok = ge(m.hf.link_bytes_per_s, th.link_busy_bytes_per_s)
        if m.n_gpus < 2:
            return None  # one card has nobody to talk to: PCIe traffic there is a copy from the host
        ev = m.base + [_waiting_fact(m, waiting)]
        if link_ok:
            ev.append(Fact(f"link traffic {gbs(m.hf.link_bytes_per_s)} on the busiest card", "link_bytes_per_s",
                           m.hf.link_bytes_per_s))
        strag = [i for i, u in m.util.items() if i not in waiting and u >= th.stall_util_pct]
        if strag and m.pattern == Pattern.IMBALANCED:
            return straggler_cause(m, strag, ev)  # the slow card is what to look at, not the links
        if strag:
            ev.append(Fact(f"{cards_text(strag)} computes while the others wait: a straggler", None, None,
                           tuple(strag)))
        return self.cause(th.conf_comm_links if link_ok else th.conf_comm_no_links, ev)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        if cause.mechanism == Mechanism.STRAGGLER:
            return straggler_advice(m, cause)
        out = ["check the topology (nvidia-smi topo -m / gpu-triage doctor): cards talking over PHB/SYS "
               "instead of NVLink pay for every all-reduce",
               "set NCCL_P2P_LEVEL to what the topology allows (NVL, PIX, PHB) and check NCCL_DEBUG=INFO",
               "mixed precision (bf16) halves gradient traffic; larger batches or gradient accumulation "
               "all-reduce less often"]
        if m.pattern == Pattern.IMBALANCED:
            out.append("a straggler holds the others: balance the work per rank (drop_last=True, equal shard "
                       "sizes) and look for a slow card or a busy host core next to it")
        return out, []
