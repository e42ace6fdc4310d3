"""Hysteresis: the shown verdict changes only when a new one has held for ``hold_s``.

Without it, one noisy tick would flip the dashboard back and forth (crying wolf). With it, a real change
is shown ``hold_s`` after the raw verdict first sees it; the raw verdict itself judges only the recent
stretch (see engine.py), so a change reaches the screen well inside 30 s at a 2 s tick.

Pattern and bottleneck have their own hysteresis: a job that sits on the border between two acceptable
shapes (steady_low and a sawtooth faster than the tick) must not hold back the news that its bottleneck
changed, and vice versa. What is *shown* is always one raw verdict whole (headline, evidence and advice
from the same ticks): the newest raw verdict that says exactly the held pattern and bottleneck. When the
two holds name a pair no raw verdict has said yet, a raw verdict naming the held bottleneck is shown (the
bottleneck is what the user acts on; its pattern comes with it), and only when there is none either does the
previous shown verdict stay.

A change backed by a confident verdict on a *fresh regime* needs only half the hold: the regime rule already
required the new level to hold in one band for ``max(regime_min_s, 3 ticks)``, a stability test the noise of
a healthy job does not pass (its ticks stay in the band of the old level, so no fresh regime is seen).

The held verdict is what the hold protects, not what must be shown at any price: :meth:`VerdictTracker.update`
returns it through :func:`present.on_screen`, which lets the raw verdict through (saying the verdict is
changing) when the numbers of the window it is shown beside contradict the held one's evidence.

Destructive advice (kill, free, restart) is added only when the shown verdict's confidence reaches
``destructive_min_conf`` and the same pattern and bottleneck have been shown for ``hold_s``.

A job *starting up* (its processes appeared and have run no kernel yet: ``causes.StartUp``) says nothing yet
about its bottleneck, as the warm-up says nothing: its verdict is shown as it is (headline and evidence from
the same ticks), but it does not count towards a change of the held pattern and bottleneck, and the verdicts
kept for them are forgotten (they were another job's). Once the job runs, the held pair is shown again as soon
as a raw verdict of the new job says it; a different one needs half the hold (the held pair was another
job's: there is no verdict of this job to protect from noise yet), then the usual hold applies again.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from gpu_triage.diagnosis.engine import COLLECTING, START_UP, Verdict
from gpu_triage.diagnosis.present import on_screen
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.window import WindowView

log = logging.getLogger(__name__)


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
        (see :meth:`VerdictTracker.update`), so half the hold is enough. Nothing is held over "collecting"
        (the warm-up): the first real verdict still waits its hold."""
        if self.value is None or (self.value == COLLECTING and value == COLLECTING):
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
        self.th = thresholds
        self._pattern = _Held(thresholds.hold_s)
        self._bottleneck = _Held(thresholds.hold_s)
        self._latest: dict[tuple[str, str], Verdict] = {}  # newest raw verdict for each (pattern, bottleneck)
        self._shown_since = 0.0
        self._new_job = False  # a job started up and none of its verdicts has been held yet
        self._raw_key: tuple[str, str] | None = None  # the raw pair of the previous tick, and since when
        self._raw_since = 0.0
        self._raw_bottleneck: str | None = None  # ... and its bottleneck alone
        self._raw_bottleneck_since = 0.0
        self.shown: Verdict | None = None  # the held verdict (before present.on_screen)

    def update(self, t_seconds: float, verdict: Verdict, view: WindowView | None) -> Verdict:
        """Feed the raw verdict of time ``t_seconds`` and the window it was made from; returns the verdict to
        show beside that window's numbers (:func:`present.on_screen`: held while the numbers agree with it).
        ``view`` None: no numbers beside it (the hold alone, as for verdicts made up in a test)."""
        if verdict.key != self._raw_key:
            self._raw_key, self._raw_since = verdict.key, t_seconds
        if verdict.bottleneck != self._raw_bottleneck:
            self._raw_bottleneck, self._raw_bottleneck_since = verdict.bottleneck, t_seconds
        held = self._update(t_seconds, verdict)
        if view is None:
            return held
        # how long the news has been seen, as the hold counts it: its bottleneck when that is what changes,
        # else the pair
        since = self._raw_bottleneck_since if verdict.bottleneck != held.bottleneck else self._raw_since
        seen_s = t_seconds - since
        return on_screen(held, verdict, view, self.th, seen_s)

    def _update(self, t_seconds: float, verdict: Verdict) -> Verdict:
        if verdict.mechanism == START_UP:
            self._latest = {}  # the verdicts kept so far were another job's
            self._new_job = True
            self._note_shown(t_seconds, verdict)
            self.shown = verdict
            return verdict
        # a confident verdict on a fresh regime (a step that already held max(regime_min_s, 3 ticks) in one
        # band, see engine.judged_span) has passed a stability test of its own: half the hold suffices
        quick = verdict.facts.get("regime_fresh") == 1.0 and verdict.confidence >= self.th.quick_hold_conf
        quick = quick or self._new_job  # the first verdict of a job that just started up
        self._pattern.update(t_seconds, verdict.pattern, quick)
        self._bottleneck.update(t_seconds, verdict.bottleneck, quick)
        if verdict.key == (self._pattern.value, self._bottleneck.value):
            self._new_job = False  # the new job's verdict is held: the usual hold from now on
        self._latest[verdict.key] = verdict
        key = (self._pattern.value or verdict.pattern, self._bottleneck.value or verdict.bottleneck)
        first: Verdict | None = None
        if key[0] == COLLECTING:
            # the warm-up's pattern is still held: no pattern has held since. A bottleneck that has held is
            # the news all the same (a first job whose shape flips between sawtooth and steady_low while its
            # data_pipeline holds): the raw verdict naming it is shown, as _same_bottleneck does later on
            if key[1] != "none" and verdict.bottleneck == key[1] and verdict.pattern != COLLECTING:
                first = verdict
            key = (COLLECTING, "none")
        shown = first or self._latest.get(key) or self._same_bottleneck(key[1], verdict) or self.shown or verdict
        if self._note_shown(t_seconds, shown):
            # only the pairs that can still be shown are kept: the held values and the newest raw one
            self._latest = {k: v for k, v in self._latest.items() if k[0] == key[0] or k[1] == key[1]
                            or k == verdict.key}
        if (shown.destructive_advice and shown.confidence >= self.th.destructive_min_conf
                and t_seconds - self._shown_since >= self.th.hold_s):
            shown = dataclasses.replace(shown, advice=shown.advice + shown.destructive_advice)
        self.shown = shown
        return shown

    def _same_bottleneck(self, bottleneck: str, verdict: Verdict) -> Verdict | None:
        """A raw verdict naming the held bottleneck when none names the held pair: the bottleneck's change has
        held but the pattern's has not (a job alternating between two shapes, e.g. a checkpoint seen as a
        sawtooth on one tick and as imbalanced cards on the next). The bottleneck is the news: it is shown,
        keeping the shown pattern while a raw verdict still says it with this bottleneck, else this tick's."""
        if bottleneck == COLLECTING or self.shown is None:
            return None
        kept = self._latest.get((self.shown.pattern, bottleneck))
        if kept is not None:
            return kept
        return verdict if verdict.bottleneck == bottleneck else None

    def _note_shown(self, t_seconds: float, shown: Verdict) -> bool:
        """Note (and log) a change of the shown pair; True when it changed."""
        if self.shown is not None and self.shown.key == shown.key and (
                (self.shown.mechanism == START_UP) == (shown.mechanism == START_UP)):
            return False
        self._shown_since = t_seconds
        before = "none" if self.shown is None else "/".join(self.shown.key)
        log.info("verdict %s -> %s (cards %s, confidence %.2f, tick at %s)", before, "/".join(shown.key),
                 ",".join(map(str, shown.gpus)) or "-", shown.confidence,
                 time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_seconds)))
        return True
