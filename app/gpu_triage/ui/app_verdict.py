"""What the dashboard's diagnosis pane shows for the newest tick, owned by :class:`ShownVerdict`: the one judge's
word on it (diagnosed once however often a frame asks), the facts alone where there is none to give, and the
history of verdicts the strip draws."""

from __future__ import annotations

from gpu_triage.model import Tick
from gpu_triage.sources.base import SourceStatus
from gpu_triage.ui import verdict_pane
from gpu_triage.ui.verdict_pane import FactsOnly, Shown
from gpu_triage.verdicts.judge import Judge, Judgement
from gpu_triage.window import RollingWindow, WindowView


class ShownVerdict:
    """The judge of the dashboard's ticks (its window is the one the panes draw) and what it shows of them."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self.shown: Shown = FactsOnly([])
        self.history: list[tuple[float, str, str]] = []  # (t, pattern, bottleneck) of each verdict shown
        self.stale = False  # ticks came in since the shown verdict was judged
        self._judged: Judgement | None = None  # the judgement shown

    @property
    def judged(self) -> Judgement | None:
        """The judgement shown (its tick, its raw and shown verdicts); None before the first."""
        return self._judged

    @property
    def window(self) -> RollingWindow:
        return self.judge.window

    def add(self, tick: Tick) -> None:
        """A tick into the window; it is judged when next asked (:meth:`now`, :meth:`update`)."""
        self.judge.add(tick)
        self.stale = True

    def restart(self) -> None:
        """The window and the history afresh (a replay that seeks elsewhere)."""
        self.judge.restart()
        self.history = []

    def now(self, status: SourceStatus, view: WindowView | None = None) -> Shown:
        """The shown verdict for the newest tick (diagnosing now if ticks came in since the last frame).

        ``view``: the frame's own copy of the window, so that a frame builds it once, not once for the
        diagnosis and again for the panes."""
        if self.stale:
            self.update(status, view)
        return self.shown

    def update(self, status: SourceStatus, view: WindowView | None = None) -> Judgement | None:
        """The judge's word on the newest tick (diagnosed once however often asked) becomes what is shown."""
        self.stale = False
        judged = self.judge.judge(view)
        if judged is None:  # no tick yet
            return None
        verdict = judged.shown
        if verdict is None:  # a diagnosis bug must not take the dashboard down: the judge logged it, facts shown
            failed = f"diagnosis failed: {judged.error}"
            self.shown = FactsOnly([*verdict_pane.facts(view or self.window.view()), failed])
            return judged
        if judged is self._judged:
            return judged  # this tick is shown already
        self._judged, t, self.shown = judged, judged.t, verdict
        if status.driver_failure is not None:  # idle/none would read as a healthy host: no verdict at all
            self.shown = FactsOnly(["no verdict: the driver cannot read the cards (red line above)"])
        if self.history and self.history[-1][0] >= t:
            self.history = [h for h in self.history if h[0] < t]
        self.history.append((t, verdict.pattern, verdict.bottleneck))
        if len(self.history) > 2 * self.window.capacity:
            del self.history[: len(self.history) - self.window.capacity]
        return judged
