"""The dashboard's header and key line, drawn by :class:`Header`: host, state, REC, source, tick and window;
the banner, the window notice, the source's error; in the demo, which known case of the recording is playing
(:func:`load_labels` reads the bundled trace's labels)."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.text import Text

from gpu_triage.model import HostInfo
from gpu_triage.sources.base import SourceStatus
from gpu_triage.ui.app_recording import Recording
from gpu_triage.ui.keys import Mode, footer_line
from gpu_triage.ui.panes import Colours
from gpu_triage.units import short_bytes
from gpu_triage.window import RollingWindow


class Header:
    """The header and the key line. What stays for the app's life is given at the start; what changes (the window,
    the recording, the source's state and error) at each frame."""

    def __init__(
        self,
        *,
        host: HostInfo,
        mode: Mode,
        colours: Colours,
        interval_s: float,
        source_label: str,
        speed: float,
        banner: str | None,
        window_notice: str | None,
        labels: list[dict[str, Any]],
        state_text: Callable[[Text, bool], None],
    ) -> None:
        self.host = host
        self.mode = mode
        self.colours = colours
        self.interval_s = interval_s
        self.source_label = source_label
        self.speed = speed
        self.banner = banner
        self.window_notice = window_notice
        self.labels = labels
        self._state_text = state_text  # live, paused or replay: appended to the line (TriageApp's, ReplayApp's)

    def text(self, width: int, *, window: RollingWindow, recording: Recording, status: SourceStatus,
             source_error: str | None) -> Text:
        """Host, state, REC, source, tick and window. Narrow terminals get a compact form that keeps what
        matters at a glance (host, live/paused/replay state, REC) and drops the wording, not the facts."""
        compact = width < 100
        t = Text(no_wrap=True, end="")
        host = self.host.hostname or "this host"
        t.append(f" {host[:24] if compact else host} ", "bold reverse")
        t.append(" ")
        self._state_text(t, compact)
        self._rec_text(t, recording, compact)
        tail = self._tail(window, compact)
        t.append(" · ", "grey50")
        t.append(tail)
        t.truncate(width)
        lines = [t]
        # the cards themselves are faulty (a broken driver, a lost or missing card): the first thing read, in red,
        # whole; every other figure on the screen is about cards that may not be there
        for part in textwrap.wrap(status.fault_line() or "", width)[:4]:
            lines.append(Text(part.ljust(width), f"bold reverse {self.colours.alert}", no_wrap=True, end=""))
        # the banner and the notice are sentences to read whole (the no-GPU hint names the command to run):
        # wrapped on narrow terminals rather than cut
        for note, style in ((self.banner, "bold yellow"), (self.window_notice, "yellow")):
            for part in textwrap.wrap(note or "", width)[:3]:
                lines.append(Text(part, style, no_wrap=True, end=""))
        if source_error:
            lines.append(Text(source_error[:width], f"bold {self.colours.alert}", no_wrap=True, end=""))
        now_playing = self._label_now(window)
        if now_playing:
            lines.append(Text(now_playing[:width], "italic", no_wrap=True, end=""))
        return Text("\n", end="").join(lines)

    def _rec_text(self, t: Text, recording: Recording, compact: bool) -> None:
        """The REC field: ticks and bytes written, or that the recording failed."""
        if recording.recorder is not None:
            rec = recording.recorder
            t.append(" · ")
            rec_txt = (f"● REC {short_bytes(rec.bytes_written)}" if compact
                       else f"● REC {rec.ticks} ticks {short_bytes(rec.bytes_written)}")
            t.append(rec_txt, f"bold {self.colours.alert}")
            if rec.error is not None:
                t.append(" failed" if compact else f" (failed: {rec.error})", self.colours.alert)
        elif recording.error:
            t.append(" · REC failed" if compact else f" · REC failed: {recording.error}", self.colours.alert)

    def _tail(self, window: RollingWindow, compact: bool) -> str:
        """The line's end: the source (when it says more than the state), tick and window, replay speed."""
        # the state already says "live": repeat the source only when it says more (demo, replay file)
        label = "" if self.source_label in ("", "live") else self.source_label
        if compact:
            label = label.removeprefix("demo: ").replace("simulated ", "").replace("-GPU server", " GPU")
            tail = f"{self.interval_s:g}s/{_dur(window.capacity * self.interval_s)}"
            tail = f"{label} · {tail}" if label else tail  # no empty field ("● live ·  · 2s/5m")
        else:
            tail = f"tick {self.interval_s:g}s · window {_dur(window.capacity * self.interval_s)}"
            tail = f"{label} · {tail}" if label else tail
        if self.speed != 1.0 and self.mode == "live":
            tail += f" · x{self.speed:g}"
        return tail

    def _label_now(self, window: RollingWindow) -> str | None:
        """In the demo, which known case of the recording is on screen now."""
        if not self.labels or window.last is None:
            return None
        now = window.last.ts
        for lab in self.labels:
            if lab["_start"] <= now <= lab["_end"]:
                exp = f"{'/'.join(lab.get('pattern', []))} · {'/'.join(lab.get('bottleneck', []))}"
                return f"now playing: {lab['scenario']}: {lab.get('what_ran', '')} (expected {exp})"
        return "now playing: between cases"

    def keys(self, width: int) -> Text:
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
