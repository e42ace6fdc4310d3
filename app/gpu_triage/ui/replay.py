"""ReplayApp: the dashboard driven by a recording (``gpu-triage replay`` and the built-in demo).

The same screen and the same tick path as live (:meth:`TriageApp.ingest`); what differs lives here: a
position in the recording instead of a sampler, play/pause, stepping, seeking and speed, and the position
bar. Its keys are the replay rows of ui/keys.py; live-only keys (``r``) are disabled by ``check_action``.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from rich.text import Text
from textual.timer import Timer

from gpu_triage.config import Config
from gpu_triage.diagnosis.tracker import VerdictTracker
from gpu_triage.feeds import ReplayFeed
from gpu_triage.model import HostInfo
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.keys import Mode
from gpu_triage.window import RollingWindow


class ReplayApp(TriageApp):
    """The dashboard over a :class:`~gpu_triage.feeds.ReplayFeed`."""

    mode: Mode = "replay"

    def __init__(
        self,
        config: Config,
        replay: ReplayFeed,
        *,
        source_label: str = "",
        banner: str | None = None,
        labels: list[dict[str, Any]] | None = None,
    ) -> None:
        self.replay = replay  # before TriageApp.__init__: its hooks below read it
        super().__init__(config, source_label=source_label, banner=banner, labels=labels)
        if replay.window_ticks < self.window.capacity:  # the feed reads back no more than its own window
            self.window = RollingWindow(replay.window_ticks)
        self._play_timer: Timer | None = None

    # -- the hooks of TriageApp ---------------------------------------------------------------------
    def _host_info(self) -> HostInfo:
        return self.replay.trace.host

    def _interval(self) -> float:
        return self.replay.trace.interval_s

    def _start_feed(self) -> None:
        self._rebuild_from_replay()
        self._restart_play_timer()

    def _state_text(self, t: Text, compact: bool) -> None:
        r = self.replay
        state = "▶ playing" if r.playing else "■ paused"
        t.append(f"{state} x{r.speed:g}", "bold")

    def _bar_text(self, width: int) -> Text:
        r = self.replay
        ts = r.current_time().astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        info = f" {r.position + 1}/{r.n} {ts}"
        bar_w = max(5, width - len(info) - 2)
        filled = round((r.position / max(1, r.n - 1)) * (bar_w - 1))
        t = Text(no_wrap=True, end="")
        t.append("[")
        t.append("━" * filled, "bold")
        t.append("●", "bold yellow")
        t.append("─" * (bar_w - 1 - filled), "grey42")
        t.append("]")
        t.append(info)
        return t

    # -- actions ------------------------------------------------------------------------------------
    def action_pause(self) -> None:
        """``p`` plays and pauses a replay, as space does (live: it pauses the display)."""
        self.action_play_pause()

    def action_play_pause(self) -> None:
        self.replay.toggle()
        self.redraw()

    def action_step(self, delta: int) -> None:
        self.replay.playing = False
        if delta == 1 and self.replay.position + 1 < self.replay.n:
            tick = self.replay.advance()
            if tick is not None:
                self.ingest(tick)
            return
        if self.replay.step(delta):
            self._rebuild_from_replay()
        self.redraw()

    def action_jump(self, seconds: float) -> None:
        if self.replay.jump(seconds):
            self._rebuild_from_replay()
            self.redraw()

    def action_seek(self, where: str) -> None:
        moved = self.replay.seek_start() if where == "start" else self.replay.seek_end()
        if moved:
            self._rebuild_from_replay()
        self.redraw()

    def action_speed(self, direction: int) -> None:
        self.replay.faster() if direction > 0 else self.replay.slower()
        self._restart_play_timer()
        self.redraw()

    # -- playback -----------------------------------------------------------------------------------
    def _restart_play_timer(self) -> None:
        if self._play_timer is not None:
            self._play_timer.stop()
        self._play_timer = self.set_interval(self.replay.tick_interval_s, self._play_step)

    def _play_step(self) -> None:
        r = self.replay
        if not r.playing:
            return
        tick = r.advance()
        if tick is not None:
            self.ingest_streamed(tick)
        elif r.loop:
            r.seek_start()
            self._rebuild_from_replay()
            self.redraw()
        else:
            self.redraw()  # reached the end: show "paused"

    def _rebuild_from_replay(self) -> None:
        """After a seek the window is rebuilt from the recording; the diagnosis replays over it."""
        ticks = self.replay.window_ticks_at_position()
        self.window.clear()
        self.history = []
        self._tracker = VerdictTracker(self.config.thresholds)
        # feed the window tick by tick so the verdict strip fills as it would have live;
        # only the last few dozen verdicts are recomputed to keep seeking snappy
        recompute_from = max(0, len(ticks) - 40)
        for i, tick in enumerate(ticks):
            self.window.append(tick)
            if i >= recompute_from:
                self._update_verdict()
        if not ticks:
            self._update_verdict()
