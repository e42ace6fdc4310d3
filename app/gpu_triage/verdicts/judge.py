"""The judge: the rolling window of ticks, the engine and the hysteresis, so that each tick is diagnosed once
and every reader of it says the same words.

:class:`Judge` is fed ticks (:meth:`Judge.add`) and judges the newest on demand (:meth:`Judge.judge`): the
dashboard adds every tick and judges once a frame, or every tick while it records or serves ``/metrics``;
``record``, the exporter and ``snapshot`` judge every tick they take. The newest tick is diagnosed once however
many readers ask for it: the dashboard that records and serves ``/metrics`` holds one window and runs the
engine once a tick. ``diagnose FILE`` reads a recording through the same engine and window length
(:mod:`gpu_triage.offline.judge`, columns streamed from the file instead of a window of ticks).

The window starts afresh where ``diagnose FILE`` starts its own when it reads the recording back: at a tick
that begins a file (``fresh``: a dataset's next hour, its hold keeping the shown verdict through the
warm-up), after a diagnosis that failed (a tick that broke the engine must not break it for a window's
length), and, with the hysteresis, after a gap (:mod:`.gaps`) or a clock that went back (what was shown
before is another time's) and at :meth:`Judge.restart` (a seek in a replay).

A diagnosis that fails leaves that tick's verdicts None and says why; it is logged once with its traceback,
later ones at debug level, counted in ``failures``. One thread adds and judges.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

from gpu_triage.diagnosis.engine import Verdict, confidence_word, diagnose
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.tracker import VerdictTracker
from gpu_triage.diagnosis.worth import BOUND, LOST, NONE, Headroom
from gpu_triage.model import Tick, VerdictSample
from gpu_triage.tracefields import TEXT_LIMIT
from gpu_triage.verdicts.gaps import gap_limit
from gpu_triage.window import RollingWindow, WindowView, window_capacity

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Judgement:
    """One tick and what the judge says of it: the engine's raw verdict and the verdict shown (after the
    hysteresis); both None when the diagnosis failed (``error`` says why, ``cause`` is what was raised)."""

    tick: Tick
    raw: Verdict | None
    shown: Verdict | None
    error: str | None = None
    cause: Exception | None = None  # for a caller that raises in turn: its error chained to the engine's

    @property
    def t(self) -> float:
        return self.tick.ts.timestamp()

    def stamped(self) -> Tick:
        """The tick with its raw verdict as a recording keeps it (trace v3's ``verdict`` column); as it came
        when the diagnosis failed."""
        return self.tick if self.raw is None else dataclasses.replace(self.tick, verdict=verdict_sample(self.raw))


def verdict_sample(v: Verdict) -> VerdictSample:
    """What a recording keeps of a raw verdict: its pattern, bottleneck, mechanism (None before any rule
    named one), confidence as the word the screen shows, the cards it names, and its headroom."""
    hr = v.headroom
    return VerdictSample(str(v.pattern), str(v.bottleneck), str(v.mechanism) or None,
                         confidence_word(v.confidence), [int(g) for g in v.gpus],
                         *(() if hr is None else (hr.kind, hr.factor, hr.share, hr.unit, hr.basis[:TEXT_LIMIT],
                                                  hr.assumes[:TEXT_LIMIT])))


def stored_headroom(v: VerdictSample | None) -> Headroom | None:
    """The headroom a recording stored with a verdict; None where it stored none (a file written before the
    field, another tool's) or one that does not hold together (a kind it does not know, a bound without its
    factor). The reader has made figures outside their range null and cleaned the words."""
    if v is None or v.headroom_kind not in (BOUND, LOST, NONE):
        return None
    factor = v.headroom_factor
    if v.headroom_kind == BOUND and (factor is None or not math.isfinite(factor) or factor < 1.0):
        return None
    share = v.headroom_share if v.headroom_share is not None and 0.0 <= v.headroom_share <= 1.0 else None
    return Headroom(v.headroom_kind, factor if v.headroom_kind == BOUND else None, share, None,
                    v.headroom_basis or "", v.headroom_assumes or "", v.headroom_unit or "GPU-busy time")


class Judge:
    """A window of ``window_s`` at ``interval_s`` (at most ``capacity`` ticks where given), the engine with
    ``thresholds`` and ``cpu_count``, and the hysteresis."""

    def __init__(self, thresholds: Thresholds, window_s: float, interval_s: float, cpu_count: int | None,
                 *, capacity: int | None = None) -> None:
        self.thresholds = thresholds
        self.window_s = window_s
        self.interval_s = interval_s
        self.cpu_count = cpu_count
        wanted, self.notice = window_capacity(window_s, interval_s)  # notice: the line that says it is capped
        self.window = RollingWindow(wanted if capacity is None else max(1, min(wanted, capacity)))
        self.tracker = VerdictTracker(thresholds)
        self.latest: Judgement | None = None  # of the newest tick judged
        self.failures = 0  # ticks whose diagnosis failed
        self._gap_s = gap_limit(interval_s)
        self._last_t: float | None = None
        self._newest: Tick | None = None
        self._stale = False  # the newest tick is not judged yet
        self._afresh = False  # the next tick starts the window afresh (the last diagnosis failed)

    def add(self, tick: Tick, *, fresh: bool = False) -> None:
        """Append ``tick`` to the window; ``fresh``: it begins a new file (the window starts afresh)."""
        t = tick.ts.timestamp()
        if self._last_t is not None and not 0 < t - self._last_t <= self._gap_s:
            self.restart()  # a gap, a clock that went back: a new stretch, as diagnose FILE reads it
        elif fresh or self._afresh:
            self.window.clear()  # a new file (where diagnose FILE starts), or after a failure
        self._afresh = False
        self._last_t = t
        self._newest = tick
        self._stale = True
        try:
            self.window.append(tick)
        except Exception as exc:  # a tick the window cannot hold (a source's bug) costs that tick's verdict only
            self._failed(tick, exc)

    def judge(self, view: WindowView | None = None) -> Judgement | None:
        """The judgement of the newest tick (None before the first), diagnosing it if nobody has yet.
        ``view``: the caller's copy of the window as it is now (a frame builds it once for all its panes)."""
        if not self._stale or self._newest is None:
            return self.latest
        self._stale = False
        tick = self._newest
        try:
            if view is None:
                view = self.window.view()
            raw = diagnose(view, self.thresholds, self.cpu_count)
            shown = self.tracker.update(tick.ts.timestamp(), raw, view)
        except Exception as exc:  # a diagnosis bug must cost neither the tick nor the screen: said, counted
            self._failed(tick, exc)
            return self.latest
        self.latest = Judgement(tick, raw, shown)
        return self.latest

    def _failed(self, tick: Tick, exc: Exception) -> None:
        self.failures += 1
        if self.failures == 1:
            log.exception("diagnosing the tick at %s failed; it goes without a verdict (said once; the "
                          "window starts afresh at the next tick)", tick.ts)
        else:
            log.debug("diagnosis failed again at %s (%d ticks without a verdict)", tick.ts, self.failures)
        self._afresh = True
        self._stale = False
        self.latest = Judgement(tick, None, None, f"{type(exc).__name__}: {exc}", exc)

    def take(self, tick: Tick, *, fresh: bool = False) -> Judgement:
        """Add ``tick`` and judge it: the readers that judge every tick (a recorder, the exporter)."""
        self.add(tick, fresh=fresh)
        judged = self.judge()
        assert judged is not None  # a tick was just added
        return judged

    def restart(self) -> None:
        """Window and hysteresis afresh (a replay that seeks elsewhere)."""
        self.window.clear()
        self.tracker = VerdictTracker(self.thresholds)
        self.latest = None
        self._last_t = None
        self._newest = None
        self._stale = False
        self._afresh = False
