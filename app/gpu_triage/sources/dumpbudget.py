"""How many py-spy runs the stack sampler may start in any minute, across every process it follows.

Why one budget for all: the sampler's paces (a burst when a card starts waiting, then one dump per process every
2 s, then every 4 s) bound what one process costs, and the burst's cooldown bounds how often one process earns a
burst; neither bounds a machine where a new job starts on a waiting card every few seconds, or where many cards
wait at once: each new process earns its own burst. On the H200 a new waiting job every 22 s cost +0.82 % of a core
over ``--no-stacks`` (docs/performance.md), over the +0.5 % the sampler is allowed. A dump costs the monitor the
same whichever process, thread or burst it is for, so the budget counts py-spy runs: a process's dump, a DataLoader
worker's, and the second read of a dump that raced the interpreter ("torn"). The paces then decide what is due and
the budget whether it runs now: a dump the budget refuses waits for a later round, and the process that has waited
longest for a dump goes first, so a storm of new processes cannot starve one that waits longer.

The default, DUMPS_PER_MIN, follows from the measured cost per dump (docs/performance.md): the costliest session
measured, f, spent +0.82 % of a core on at least 159 recorded dumps in 223 s (43 a minute): 11.5 ms of the
monitor's CPU per dump at most, py-spy's own counted (the true figure is lower: failed reads were retried and are
not all among the recorded samples). The longer session g spent 6.7 ms a dump, the first measurement 7 ms
(one dump every 2 s for +0.35 %). +0.5 % of a core is 300 ms of CPU a minute: 26 dumps at the worst figure. 24 a
minute keep the worst case at 0.46 % and the measured ordinary one at 0.27-0.28 %; the storm measured with this
budget, a new waiting job every 22 s, costs +0.39 to +0.47 % over ``--no-stacks``. One job alone asks about 24 in
its first minute of waiting (a burst, then its paces), and keeps its burst and nearly all of its paces (AT_ONCE);
processes that wait together share the minute. ``[inside] dumps_per_min`` in the configuration sets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_triage.sources.waiting import WaitBand

DUMPS_PER_MIN = 24  # py-spy runs a minute across all processes (the derivation: this module's docstring)
WINDOW_S = 60.0
# Runs in a row at most, for the default budget: the tokens then come back at 24 - 9 = 15 a minute, one process's
# settled pace (a dump every 4 s), and the 9 cover a burst (6 dumps 0.5 s apart) and the first dumps of the 2 s pace
# after it: one job alone keeps its burst and its paces (its 2 s pace stretches to 4 s about 15 s after the burst,
# where the tokens run out). A smaller budget keeps half its minute for the pace.
AT_ONCE = 9
DUMPS_PER_MIN_RANGE = (2, 600)  # the configuration's bounds: 600 a minute is ten dumps a second


@dataclass(frozen=True, slots=True)
class InsideSettings:
    """What the configuration says about looking inside the waiting processes: which cards wait (the band) and how
    many py-spy runs a minute the sampler may start."""

    band: WaitBand = field(default_factory=WaitBand)
    dumps_per_min: int = DUMPS_PER_MIN

    def __post_init__(self) -> None:
        lo, hi = DUMPS_PER_MIN_RANGE
        if isinstance(self.dumps_per_min, bool) or not lo <= self.dumps_per_min <= hi:
            raise ValueError(f"dumps_per_min must be {lo} to {hi}, got {self.dumps_per_min!r}")


class DumpBudget:
    """At most ``per_min`` runs started in any WINDOW_S of ``clock``, at most ``at_once`` of them in a row: a run
    takes a token; the tokens are kept up to ``at_once`` (the sampler starts with them all) and come back at
    ``per_min - at_once`` a minute. In any WINDOW_S the runs are at most the tokens held at its start plus those
    that came back during it, ``at_once + (per_min - at_once)``: the bound is exact, and the runs are spread over
    the minute, so a storm of bursts cannot spend a minute's runs in its first seconds and leave every process
    without a dump for the rest of it. Not thread-safe: the sampler's own thread (or the caller of its step) is
    the one user."""

    def __init__(self, per_min: int, clock: Callable[[], float], at_once: int = AT_ONCE) -> None:
        if per_min < DUMPS_PER_MIN_RANGE[0]:
            raise ValueError(f"a dump budget needs at least {DUMPS_PER_MIN_RANGE[0]} runs a minute, got {per_min}")
        self.per_min = per_min
        self.at_once = max(1, min(at_once, per_min // 2))  # half at most: the rest of the minute is paced
        self._per_s = (per_min - self.at_once) / WINDOW_S
        self._clock = clock
        self._tokens = float(self.at_once)
        self._at = clock()
        self.refused = 0  # runs asked for and refused, over the sampler's life (tests, the cost figures)

    def _refresh(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.at_once), self._tokens + max(0.0, now - self._at) * self._per_s)
        self._at = now

    def left(self) -> int:
        """Runs that may start now, one after the other."""
        self._refresh()
        return int(self._tokens)

    def wait_s(self) -> float:
        """Seconds until a run may start: 0 while one may now."""
        self._refresh()
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self._per_s

    def take(self) -> bool:
        """One run may start now (and is counted), or not (False: wait for a later round)."""
        self._refresh()
        if self._tokens < 1.0:
            self.refused += 1
            return False
        self._tokens -= 1.0
        return True
