"""The dashboard's header and key line as a mixin of :class:`~gpu_triage.ui.app.TriageApp`: host, state,
REC, source, tick and window; the banner, the window notice, the source's error; in the demo, which known
case of the recording is playing (:func:`load_labels` reads the bundled trace's labels)."""

from __future__ import annotations

import json
import math
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App

from gpu_triage.model import HostInfo
from gpu_triage.recording.background import Recorder
from gpu_triage.sources.base import SourceStatus
from gpu_triage.ui.keys import Mode, footer_line
from gpu_triage.ui.panes import Colours
from gpu_triage.units import short_bytes
from gpu_triage.window import RollingWindow


class HeaderText(App[int]):
    """The header's text; the state it reads is the app's (set in TriageApp.__init__)."""

    host: HostInfo
    interval_s: float
    mode: Mode
    window: RollingWindow
    recorder: Recorder | None
    record_error: str | None
    colours: Colours
    source_label: str
    speed: float
    banner: str | None
    window_notice: str | None
    source_error: str | None
    labels: list[dict[str, Any]]
    _status: SourceStatus

    def _state_text(self, t: Text, compact: bool) -> None:
        """Live, paused or replay: appended to ``t`` (TriageApp's, ReplayApp's)."""
        raise NotImplementedError

    def _header_text(self, width: int) -> Text:
        """Host, state, REC, source, tick and window. Narrow terminals get a compact form that keeps what
        matters at a glance (host, live/paused/replay state, REC) and drops the wording, not the facts."""
        compact = width < 100
        t = Text(no_wrap=True, end="")
        host = self.host.hostname or "this host"
        t.append(f" {host[:24] if compact else host} ", "bold reverse")
        t.append(" ")
        self._state_text(t, compact)
        if self.recorder is not None:
            rec = self.recorder
            t.append(" · ")
            rec_txt = (f"● REC {short_bytes(rec.bytes_written)}" if compact
                       else f"● REC {rec.ticks} ticks {short_bytes(rec.bytes_written)}")
            t.append(rec_txt, f"bold {self.colours.alert}")
            if rec.error is not None:
                t.append(" failed" if compact else f" (failed: {rec.error})", self.colours.alert)
        elif self.record_error:
            t.append(" · REC failed" if compact else f" · REC failed: {self.record_error}", self.colours.alert)
        # the state already says "live": repeat the source only when it says more (demo, replay file)
        label = "" if self.source_label in ("", "live") else self.source_label
        if compact:
            label = label.removeprefix("demo: ").replace("simulated ", "").replace("-GPU server", " GPU")
            tail = f"{self.interval_s:g}s/{_dur(self.window.capacity * self.interval_s)}"
            tail = f"{label} · {tail}" if label else tail  # no empty field ("● live ·  · 2s/5m")
        else:
            tail = f"tick {self.interval_s:g}s · window {_dur(self.window.capacity * self.interval_s)}"
            tail = f"{label} · {tail}" if label else tail
        if self.speed != 1.0 and self.mode == "live":
            tail += f" · x{self.speed:g}"
        t.append(" · ", "grey50")
        t.append(tail)
        t.truncate(width)
        lines = [t]
        # the cards themselves are faulty (a broken driver, a lost or missing card): the first thing read, in red,
        # whole; every other figure on the screen is about cards that may not be there
        for part in textwrap.wrap(self._status.fault_line() or "", width)[:4]:
            lines.append(Text(part.ljust(width), f"bold reverse {self.colours.alert}", no_wrap=True, end=""))
        # the banner and the notice are sentences to read whole (the no-GPU hint names the command to run):
        # wrapped on narrow terminals rather than cut
        for note, style in ((self.banner, "bold yellow"), (self.window_notice, "yellow")):
            for part in textwrap.wrap(note or "", width)[:3]:
                lines.append(Text(part, style, no_wrap=True, end=""))
        if self.source_error:
            lines.append(Text(self.source_error[:width], f"bold {self.colours.alert}", no_wrap=True, end=""))
        now_playing = self._label_now()
        if now_playing:
            lines.append(Text(now_playing[:width], "italic", no_wrap=True, end=""))
        return Text("\n", end="").join(lines)

    def _label_now(self) -> str | None:
        """In the demo, which known case of the recording is on screen now."""
        if not self.labels or self.window.last is None:
            return None
        now = self.window.last.ts
        for lab in self.labels:
            if lab["_start"] <= now <= lab["_end"]:
                exp = f"{'/'.join(lab.get('pattern', []))} · {'/'.join(lab.get('bottleneck', []))}"
                return f"now playing: {lab['scenario']}: {lab.get('what_ran', '')} (expected {exp})"
        return "now playing: between cases"

    def _keys_text(self, width: int) -> Text:
        return Text(footer_line(self.mode, width)[:width], "grey62", no_wrap=True, end="")


def _dur(seconds: float) -> str:
    if seconds >= 120 and math.isclose(seconds % 60, 0, abs_tol=1e-6):
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"


def load_labels(path: Path) -> list[dict[str, Any]]:
    """The labels file of a bundled trace (its cases' windows), parsed for the demo's 'now playing' line."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    for lab in items:
        lab["_start"] = datetime.fromisoformat(lab["start"])
        lab["_end"] = datetime.fromisoformat(lab["end"])
    return items
