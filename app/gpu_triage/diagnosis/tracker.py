"""Hysteresis: the shown verdict changes only when a new one has held for ``hold_s``.

Without it, one noisy tick would flip the dashboard back and forth (crying wolf). With it, a real change
is shown ``hold_s`` after the raw verdict first sees it; the raw verdict itself judges only the recent
stretch (see engine.py), so a change reaches the screen well inside 30 s at a 2 s tick.

Pattern and bottleneck have their own hysteresis: a job that sits on the border between two acceptable
shapes (steady_low and a sawtooth faster than the tick) must not hold back the news that its bottleneck
changed, and vice versa. While the shown bottleneck stays, its evidence and advice are refreshed from each
raw verdict that agrees with it, so the figures stay current without the headline flickering.

A change backed by a confident verdict on a *fresh regime* needs only half the hold: the regime rule already
required the new level to hold in one band for ``max(regime_min_s, 3 ticks)``, a stability test the noise of
a healthy job does not pass (its ticks stay in the band of the old level, so no fresh regime is seen).
"""

from __future__ import annotations

import dataclasses

from gpu_triage.diagnosis.engine import Verdict
from gpu_triage.diagnosis.thresholds import Thresholds

QUICK_CONFIDENCE = 0.6  # at or above: the rule that named the bottleneck had its own evidence (not a fallback)


class _Held:
    """One value with hysteresis: a new value replaces it once seen for hold_s and at least two ticks."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.value: str | None = None
        self._cand: str | None = None
        self._since = 0.0
        self._ticks = 0
        self._quick = False

    def update(self, t: float, value: str, quick: bool = False) -> bool:
        """Returns True when the held value changed. ``quick``: this evidence already proved itself stable
        (see :meth:`VerdictTracker.update`), so half the hold is enough."""
        if self.value is None:
            self.value = value
            return True
        if value == self.value:
            self._cand = None
            return False
        if value != self._cand:
            self._cand, self._since, self._ticks, self._quick = value, t, 1, quick
        else:
            self._ticks += 1
            self._quick = self._quick and quick
        hold = self.hold_s / 2 if self._quick else self.hold_s
        if t - self._since >= hold and self._ticks >= 2:
            self.value = value
            self._cand = None
            return True
        return False


class VerdictTracker:
    def __init__(self, thresholds: Thresholds) -> None:
        self.hold_s = thresholds.hold_s
        self._pattern = _Held(self.hold_s)
        self._bottleneck = _Held(self.hold_s)
        self._basis: Verdict | None = None  # latest raw verdict whose bottleneck is the shown one
        self.shown: Verdict | None = None
        self.history: list[tuple[float, str, str]] = []  # (t, pattern, bottleneck) each time the shown one changes

    def reset(self) -> None:
        self.__init__(Thresholds(hold_s=self.hold_s))  # type: ignore[misc]

    def update(self, t_seconds: float, verdict: Verdict) -> Verdict:
        """Feed the raw verdict of time ``t_seconds``; returns the verdict to show."""
        # a confident verdict on a fresh regime (a step that already held max(regime_min_s, 3 ticks) in one
        # band, see engine.judged_span) has passed a stability test of its own: half the hold suffices
        quick = verdict.facts.get("regime_fresh") == 1.0 and verdict.confidence >= QUICK_CONFIDENCE
        self._pattern.update(t_seconds, verdict.pattern, quick)
        self._bottleneck.update(t_seconds, verdict.bottleneck, quick)
        if verdict.bottleneck == self._bottleneck.value:
            self._basis = verdict
        basis = self._basis or verdict
        pattern = self._pattern.value or verdict.pattern
        if basis.pattern == pattern:
            shown = basis
        elif verdict.pattern == pattern:
            shown = dataclasses.replace(basis, pattern=pattern, period_s=verdict.period_s, duty=verdict.duty,
                                        gpus=verdict.gpus)
        else:
            shown = dataclasses.replace(basis, pattern=pattern)
        if self.shown is None or self.shown.key != shown.key:
            self.history.append((t_seconds, shown.pattern, shown.bottleneck))
        self.shown = shown
        return shown
