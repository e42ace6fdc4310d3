"""ReplayApp: the dashboard driven by a recording (``gpu-triage replay`` and the built-in demo).

The same screen and the same tick path as live (:meth:`TriageApp.ingest`); what differs lives here: a
position in the recording instead of a sampler, play/pause, stepping, seeking and speed, and the position
bar. A gap in the recording (as ``diagnose`` defines it) starts the window afresh, is said under the header
while the window is still short after it, and is marked on the position bar. Its keys are the replay rows
of ui/keys.py; live-only keys (``r``) are disabled by ``check_action``.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import numpy as np
from rich.text import Text
from textual.timer import Timer

from gpu_triage.config import Config
from gpu_triage.diagnosis.engine import Verdict
from gpu_triage.feeds import ReplayFeed
from gpu_triage.model import HostInfo
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.keys import Mode
from gpu_triage.verdicts.judge import stored_headroom

GAP_MARK = "┊"  # a gap on the position bar
_BAR_STYLES = {"━": "bold", "●": "bold yellow", "─": "grey42", GAP_MARK: "bold red"}


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
        self.frame.lines_first = self._recorded_headroom
        self._play_timer: Timer | None = None
        # pyarrow comes with the offline diagnosis: imported here, not at the top, as live imports this module
        from gpu_triage.offline.render import clock_format

        ts = replay.trace.timestamps
        # the date beside the times when the recording spans days or is not from today, as diagnose does
        self._clock = clock_format(datetime.fromtimestamp(float(ts[0]), UTC),
                                   datetime.fromtimestamp(float(ts[-1]), UTC))

    # -- the hooks of TriageApp ---------------------------------------------------------------------
    def _host_info(self) -> HostInfo:
        return self.replay.trace.host

    def _interval(self) -> float:
        return self.replay.interval_s  # the interval diagnose trusts: the same window, the same gaps

    def _window_ticks(self) -> int | None:
        return self.replay.window_ticks  # the feed reads back no more than its own window

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
        scale = (bar_w - 1) / max(1, r.n - 1)
        filled = round(r.position * scale)
        cells = ["━"] * filled + ["●"] + ["─"] * (bar_w - 1 - filled)
        for c in np.unique(np.rint(r.gap_starts * scale).astype(int)).tolist():  # where the recording has a hole
            if c != filled:
                cells[c] = GAP_MARK
        t = Text(no_wrap=True, end="")
        t.append("[")
        for cell, run in itertools.groupby(cells):
            t.append(cell * len(list(run)), _BAR_STYLES[cell])
        t.append("]")
        t.append(info)
        return t

    def _header_text(self, width: int) -> Text:
        """The header, and the gap before the window under it while the window is still short after it."""
        t = super()._header_text(width)
        notice = self.gap_notice()
        if notice:
            t = Text("\n", end="").join([t, Text(notice[:width], "bold yellow", no_wrap=True, end="")])
        return t

    def gap_notice(self) -> str | None:
        """``gap 3 h 12 min before this window (nothing recorded 10:05:20 - 13:17:20 UTC)`` while the window
        holds fewer ticks than it would without the gap; None otherwise. The gap's times are those
        ``diagnose`` prints; the most telling words come first, as narrow screens cut the line's end."""
        from gpu_triage.offline.render import human_duration  # loaded by the feed already

        r = self.replay
        gap = r.gap_before()
        if gap is None or r.position - r.stretch_start() + 1 >= self.window.capacity:
            return None
        fmt = self._clock
        return (f"gap {human_duration(gap.seconds)} before this window "
                f"(nothing recorded {gap.start:{fmt}} - {gap.end:{fmt}} UTC)")

    def _recorded_headroom(self) -> list[str]:
        """The headroom the recording stored with this tick's verdict, where it differs from the one computed
        now (the file was judged with other settings, or by another version): the diagnosis pane's first line."""
        j, shown = self.verdicts.judged, self.verdicts.shown
        stored = j.tick.verdict if j is not None else None
        recorded = stored_headroom(stored)
        if stored is None or recorded is None or not isinstance(shown, Verdict):
            return []
        now = shown.headroom
        if now is not None and stored.bottleneck == shown.bottleneck and now.line() == recorded.line():
            return []
        which = "" if stored.bottleneck == shown.bottleneck else f" ({stored.bottleneck})"
        return [f"recorded then{which}: {recorded.line()}"]

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
            if self.replay.at_gap:
                self._rebuild_from_replay()  # the window starts afresh after a gap
                self.redraw()
            elif tick is not None:
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
        if tick is not None and r.at_gap:
            self._rebuild_from_replay()  # the window starts afresh after a gap
            self.redraw()
        elif tick is not None:
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
        self.verdicts.restart()
        # feed the window tick by tick so the verdict strip fills as it would have live;
        # only the last few dozen verdicts are recomputed to keep seeking snappy
        recompute_from = max(0, len(ticks) - 40)
        for i, tick in enumerate(ticks):
            self.verdicts.add(tick)
            if i >= recompute_from:
                self.verdicts.update(self._status)
        if not ticks:
            self.verdicts.update(self._status)
