"""GPU-hours lost: what a bottleneck cost, measured tick by tick (docs/diagnosis.md, "GPU-hours lost").

Pure: one judged tick's verdict (its bottleneck and the cards it names), the tick's cards with their GPU-Util,
and the tick's seconds in; the GPU-seconds lost out. The exporter's counter (``gpu_triage_gpu_lost_seconds_total``)
adds this up tick by tick; the fleet's summary computes the same on a recording's columns
(:mod:`gpu_triage.fleet_history.lost`, checked against this one in the tests).

- A tick whose verdict names no bottleneck (``none``, no verdict yet) loses nothing: idle cards no job holds are
  the scheduler's business, not a bottleneck's.
- The cards it covers: the verdict's own cards, except where the loss is the cards *beside* the ones it names
  (placement: one card busy, the others idle; imbalance: the cards waiting for the straggler or the laggards; a
  hung collective: the hung rank's card idles beside the ones spinning), and where it names none: then every card
  of the tick.
- Each covered card loses the share of the tick it did no work, ``1 - GPU-Util``; a hung collective loses the
  whole tick (its kernels spin and read busy while nothing progresses). GPU-Util counts a kernel waiting on a
  peer as work (communication, a straggler's peers): the figure is a floor.
- A card with no GPU-Util reading (unsupported: MIG, vGPU; or one outside 0-100 %, as the reader takes it) adds
  nothing, so a tick some of whose covered cards read is the sum over those that do (a floor too); a tick none
  of whose covered cards reads (or that covers no card) has no figure: None, never 0, as every unsupported field.
- Added up (:func:`total`), the figures are a floor too; a floor of 0 beside a tick of no figure says nothing,
  so a sum that holds a None and nothing lost is None ("n/a"), and 0 only where every tick was measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from gpu_triage.diagnosis.vocab import Bottleneck, is_healthy

#: Bottlenecks whose loss is on every card of the machine, not only the cards the verdict names.
MACHINE_WIDE: frozenset[str] = frozenset({Bottleneck.PLACEMENT, Bottleneck.IMBALANCE, Bottleneck.HUNG_COLLECTIVE})
#: Bottlenecks that lose the whole tick on each card they cover, whatever GPU-Util reads.
WHOLE_TICK: frozenset[str] = frozenset({Bottleneck.HUNG_COLLECTIVE})


def covered(bottleneck: str, named: Iterable[int], cards: Iterable[int]) -> list[int]:
    """The cards of the tick whose time the verdict's bottleneck costs."""
    every = list(cards)
    mine = set(named)
    if bottleneck in MACHINE_WIDE or not mine:
        return every
    return [c for c in every if c in mine]


def card_share(bottleneck: str, util_pct: float | None) -> float | None:
    """The share of one covered card's tick that is lost, 0..1; None: the card has no GPU-Util reading."""
    if bottleneck in WHOLE_TICK:
        return 1.0
    if util_pct is None or not 0.0 <= util_pct <= 100.0:  # NaN and a value no card reports: no reading
        return None
    return 1.0 - util_pct / 100.0


def lost_gpu_seconds(bottleneck: str | None, named: Iterable[int], util_pct: Mapping[int, float | None],
                     seconds: float | None) -> float | None:
    """GPU-seconds one tick lost: ``seconds`` x the lost share of each covered card that reads, summed; None
    where the verdict names a bottleneck and no covered card reads (see the module)."""
    if bottleneck is None or is_healthy(bottleneck) or seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return 0.0
    shares = [s for c in covered(bottleneck, named, util_pct) if (s := card_share(bottleneck, util_pct[c])) is not None]
    return seconds * sum(shares) if shares else None


def total(figures: Iterable[float | None]) -> float | None:
    """GPU-seconds lost over many ticks (or hosts, owners): the sum of the known figures; None where one is
    unknown and the known ones lost nothing (a floor of 0 beside an unknown says nothing: "n/a")."""
    known = 0.0
    unknown = False
    for f in figures:
        if f is None:
            unknown = True
        else:
            known += f
    return None if unknown and known <= 0 else known
