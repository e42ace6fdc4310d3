"""Which cards wait, judged with hysteresis: the processes on them are the ones the stack sampler looks inside.

Why a band and not one line: a card held back by its host reads a GPU-Util that moves a few points from tick to
tick. On the real H200 family recorded by our own sampler (docs/h200.md, inside-e), a host-bound job sat at
45-51 % and crossed a bare 50 % line back and forth, so whether it was sampled at all was left to chance. A
card starts waiting below ``enter_pct`` (45 %) and stops above ``leave_pct`` (55 %): the band is as wide as that
tick-to-tick spread, centred on 50 %, so a card that settles anywhere in it keeps its state. Both are
``[inside] waiting_enter_pct`` and ``waiting_leave_pct`` in the configuration.

A card that starts waiting is news, and so is a new process on a card that waits already (a job started on an
idle card): the sampler takes a short burst of dumps of such a process then
(:class:`gpu_triage.sources.inside.InsideSampler`), so a verdict that needs stacks has more than one or two.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpu_triage.model import Tick

ENTER_PCT = 45.0  # a card below this GPU-Util starts waiting
LEAVE_PCT = 55.0  # a waiting card above this stops waiting


@dataclass(frozen=True, slots=True)
class WaitBand:
    """The hysteresis band of "a card waits": enter below ``enter_pct``, leave above ``leave_pct``."""

    enter_pct: float = ENTER_PCT
    leave_pct: float = LEAVE_PCT

    def __post_init__(self) -> None:
        if not 0.0 <= self.enter_pct <= self.leave_pct <= 100.0:
            raise ValueError(f"a waiting band needs 0 <= enter ({self.enter_pct}) <= leave ({self.leave_pct}) <= 100")


def still_waits(waited: bool, util_pct: float | None, band: WaitBand) -> bool:
    """One step of the band's hysteresis: whether a card that ``waited`` at the last reading waits after one of
    ``util_pct`` (None: not known, no news: its state is kept)."""
    if util_pct is None or util_pct != util_pct:  # None, or NaN as a window's column holds a missing reading
        return waited
    return util_pct <= band.leave_pct if waited else util_pct < band.enter_pct


def waits_after(utils: Iterable[float | None], band: WaitBand) -> bool:
    """Whether a card whose GPU-Util read ``utils`` (oldest first, from a state of not waiting) waits after the
    last: the screen reads its window's history as the sampler read the ticks, so both call the same cards waiting."""
    waited = False
    for u in utils:
        waited = still_waits(waited, u, band)
    return waited


class WaitingCards:
    """Follows each card's waiting state from tick to tick; a card whose GPU-Util is not known keeps the state
    it had (a missed reading is no news) and a card that left the tick is forgotten."""

    def __init__(self, band: WaitBand | None = None) -> None:
        self.band = band or WaitBand()
        self._waiting: set[int] = set()
        self._procs: set[int] = set()  # the processes on waiting cards at the last update

    @property
    def waiting(self) -> frozenset[int]:
        return frozenset(self._waiting)

    def update(self, tick: Tick) -> tuple[list[tuple[int, list[int]]], set[int]]:
        """The processes on waiting cards at ``tick`` with their DataLoader worker pids, and the pids among
        them that were not on a waiting card at the last update (their card has just started waiting, or they
        are new on it)."""
        seen = set()
        for g in tick.gpus:
            seen.add(g.index)
            if still_waits(g.index in self._waiting, g.util_pct, self.band):
                self._waiting.add(g.index)
            else:
                self._waiting.discard(g.index)
        self._waiting &= seen
        procs: dict[int, list[int]] = {}
        for p in tick.procs:
            if p.gpu_index in self._waiting and p.pid not in procs:
                procs[p.pid] = list(p.worker_pids)
        started = set(procs) - self._procs
        self._procs = set(procs)
        return list(procs.items()), started
