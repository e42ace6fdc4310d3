"""Where the work runs: every rank on one card, cards doing unequal work, one card holding the others.

These come after every rule that explains a card's own waits: a single busy card starved of input is the
input pipeline first (its advice still leads with the placement, rules.advise). What is left of a job that
uses one card of many, or of cards far apart, still needs someone to act: it is never "none".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import Advice, Cause, Rule, cards_text
from gpu_triage.diagnosis.patterns import nanmean
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern
from gpu_triage.model import throttle_names

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


def placement_advice(m: Measurements) -> str:
    ranks = m.pf.ranks_on_first_card
    if ranks >= 2:
        return (f"{ranks} processes share one card while the others idle: call torch.cuda.set_device(local_rank) "
                "(or use cuda:{local_rank}) in every rank")
    return ("one card works and the rest idle: launch one process per card (torchrun --nproc_per_node=N) and "
            "call torch.cuda.set_device(local_rank)")


class Placement(Rule):
    """One card busy with several processes on it, the others idle, and nothing on the host explains the
    busy card's waits: every rank on cuda:0 (no set_device(local_rank)). One process on one card is a job
    that uses one card: not something to fix on its own (real 1-card jobs on a 2-card host)."""

    name, bottleneck, patterns = Mechanism.PLACEMENT, Bottleneck.PLACEMENT, (Pattern.SINGLE_CARD_BUSY,)

    def detect(self, m: Measurements) -> Cause | None:
        ranks = m.pf.ranks_on_first_card
        if ranks < 2:
            return None  # one process on one card: a job that uses one card (the others may be someone else's)
        busy = m.shape.cards
        idle = [i for i, s in m.shape.shapes.items() if s.pattern == "idle"]
        return self.cause(m.th.conf_placement, m.base + [
            Fact(f"{cards_text(busy)} does the work of {ranks} processes while {cards_text(idle)} idle: every "
                 "rank placed on one card", "ranks_on_first_card", float(ranks), tuple(busy))])

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return [placement_advice(m)], []


def _col(m: Measurements, field: str, j: int) -> np.ndarray:
    g = m.gpu.get(field)
    if g is None or not g.size:
        return np.zeros(0)
    col: np.ndarray = g[:, j]
    return np.asarray(col[~np.isnan(col)])


def _clock(m: Measurements, j: int) -> list[str]:
    clock = m.gpu["sm_clock_mhz"]
    others = [k for k in range(len(m.view.gpu_indexes)) if k != j]
    mine = float(nanmean(clock[:, j])) if clock.size else math.nan
    rest = float(nanmean(clock[:, others], axis=None)) if clock.size and others else math.nan
    if math.isnan(mine) or math.isnan(rest) or mine >= 0.95 * rest:
        return []
    return [f"its SM clock {mine:.0f} MHz against {rest:.0f} MHz on the others"]


def _throttles(m: Measurements, card: int, j: int) -> tuple[list[str], list[str]]:
    seen = _col(m, "clock_event_reasons", j).astype(np.int64)
    names = set(throttle_names(int(np.bitwise_or.reduce(seen))) or []) if seen.size else set()
    if not names:
        return [], []
    advice = []
    if {"thermal", "hw-thermal"} & names:
        advice.append(f"card {card} is thermally throttled: check its airflow, fans and inlet temperature "
                      "(nvidia-smi -q -d TEMPERATURE,PERFORMANCE)")
    if {"power", "power-brake", "hw-slowdown"} & names:
        advice.append(f"card {card} is held by its power limit or a hardware slowdown: check nvidia-smi -q -d "
                      "POWER,PERFORMANCE and the power supply")
    return ["throttled: " + ", ".join(sorted(names))], advice


def card_health(m: Measurements, card: int) -> tuple[list[str], list[str]]:
    """What the card's own samples say against the others' (over the judged ticks): (facts, advice)."""
    if card not in m.view.gpu_indexes:
        return [], []
    j = m.view.gpu_indexes.index(card)
    facts, advice = _throttles(m, card, j)
    facts = _clock(m, j) + facts
    power = _col(m, "power_w", j)
    if power.size:
        facts.append(f"{float(power.mean()):.0f} W")
    for field, what in (("ecc_uncorrected", "uncorrected ECC errors"), ("xid_count", "XID events")):
        col = _col(m, field, j)
        if col.size and float(col.max()) > 0:
            facts.append(f"{float(col.max()):.0f} {what}")
            advice.append(f"card {card} reports {what}: drain it and have it checked (nvidia-smi -q, dmesg for "
                          "Xid) before it is trusted with a job again")
    return facts, advice


class Imbalance(Rule):
    """Cards far apart, and no wait on storage, the input or the links to explain it: unequal work per rank."""

    name, bottleneck, patterns = Mechanism.IMBALANCE, Bottleneck.IMBALANCE, (Pattern.IMBALANCED,)

    def detect(self, m: Measurements) -> Cause:
        means = m.all_util
        lo = min(means, key=means.__getitem__) if means else None
        ev = list(m.base)
        if lo is not None:
            ev.append(Fact(f"card {lo} does least ({means[lo]:.0f} %) while nothing on the host holds it: the ranks "
                           "do unequal work, or a card runs slower", "gpu_util_mean_pct", means[lo], (lo,)))
        return self.cause(m.th.conf_none_other, ev)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return (["balance the work per rank: equal shard sizes (DistributedSampler, drop_last=True), the same "
                 "batch size on every rank",
                 "if one rank does more (logging, evaluation, rank-0 extras), move that work off the step or "
                 "spread it"], [])


def straggler_cause(m: Measurements, strag: list[int], evidence: list[Fact]) -> Cause:
    """One card computes while the others wait for it at a collective: the card is the thing to look at."""
    ev = list(evidence)
    for card in strag:
        facts, _ = card_health(m, card)
        ev.append(Fact(f"{cards_text([card])} computes while the others wait for it: a straggler"
                       + (f" ({'; '.join(facts)})" if facts else ""), None, None, (card,)))
    return Cause(Bottleneck.IMBALANCE, m.th.conf_comm_no_links, ev, Mechanism.STRAGGLER, list(strag))


def straggler_advice(m: Measurements, cause: Cause) -> Advice:
    out: list[str] = []
    for card in cause.cards or []:
        _, advice = card_health(m, card)
        out.extend(advice)
    if not out:
        names = cards_text(cause.cards or [])
        out.append(f"{names} is slower than the others with no throttle or error reported: check what else runs "
                   "on it or on the host cores next to it (the process list), and its clocks (nvidia-smi -q -d "
                   "CLOCK)")
    out.append("if the slow rank does more work (uneven shards, rank-0 extras): balance the work per rank "
               "(drop_last=True, equal shard sizes)")
    return out, []
