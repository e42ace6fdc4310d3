"""TriageApp: the one dashboard, driven by a live/simulated source; :class:`~gpu_triage.ui.replay.ReplayApp`
(ui/replay.py) is the same dashboard driven by a recording, with its own keys. One path for ticks either way.

Data flows one way: sampler thread (live) or replay timer -> :meth:`TriageApp.ingest` on the UI thread ->
RollingWindow -> diagnosis -> panes. Ticks from the sampler thread are scheduled with
``loop.call_soon_threadsafe`` (never blocking the sampler); several ticks that arrive before the screen
is drawn are coalesced into one redraw of the newest state. Panes are plain ``Static`` widgets updated
only when their text changed, so a quiet screen writes almost nothing to the terminal (SSH).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import textwrap
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.console import Console
from rich.control import Control
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._compositor import ChopsUpdate
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.filter import Monochrome, NoColor
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Static

from gpu_triage.config import PANES, Config
from gpu_triage.diagnosis.engine import diagnose
from gpu_triage.diagnosis.tracker import VerdictTracker
from gpu_triage.feeds import LiveFeed, Recorder
from gpu_triage.model import HostInfo, ProcSample, Tick
from gpu_triage.proc_control import ProcControl, ProcDetails
from gpu_triage.safetext import clean_lines
from gpu_triage.sources.base import AllHostProcesses, HostProcesses, JobSource, Source, SourceStatus, Wrapper
from gpu_triage.ui import job_pane, palette, panes, procview
from gpu_triage.ui.follow import FollowsWindow
from gpu_triage.ui.formatters import safe_text
from gpu_triage.ui.keys import KEYS, Mode, action_modes, footer_line
from gpu_triage.ui.layout import plan_layout
from gpu_triage.ui.panes import Colours, FactsOnly, Shown
from gpu_triage.units import short_bytes
from gpu_triage.window import RollingWindow, WindowView, window_capacity

log = logging.getLogger(__name__)

# Ticks from the sampler or the replay timer are ingested at once, but the screen (and the diagnosis that
# feeds it) is redrawn at most once per REDRAW_MIN_S. Profile (py-spy, 0.25 s tick, 8 simulated cards): 58 %
# of the CPU was Textual turning pane text into terminal lines and 6 % the diagnosis, both once per tick;
# the sampler and the window append were under 10 %. A 2 s tick is unaffected (one frame per tick).
REDRAW_MIN_S = 1.0


class _CroppedChops(ChopsUpdate):
    """Textual's partial screen update, cropped on both sides of each dirty span.

    Textual 8's ``ChopsUpdate.render_segments`` crops a widget's line at the right end of the dirty span but
    starts it at the widget's left edge (its own "TODO: crop to x extents"): a pane whose only change is one
    cell in column 150 sent the 150 cells before it too. The only difference here is the left crop.
    """

    def render_segments(self, console: Console) -> str:
        move_to = Control.move_to
        out: list[str] = []
        last_y = self.spans[-1][0]
        for y, x1, x2 in self.spans:
            for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
                if strip is None or x > x2 or end <= x1:
                    continue
                left = max(0, x1 - x)
                right = min(end, x2) - x
                out.append(move_to(x + left, y).segment.text)
                out.append((strip.crop(left, right) if left or end > x2 else strip).render(console))
            if y != last_y:
                out.append("\n")
        return "".join(out)


def changed_span(before: Strip, after: Strip) -> tuple[int, int] | None:
    """The cells [start, end) of a line that differ between two renderings of it, or None when they are the
    same. Whole segments, narrowed by the characters they share where the style is the same: a waveform
    whose newest column changed differs only at its right end, even inside one long run of a colour."""
    a, b = list(before), list(after)
    if a == b:
        return None
    head = 0
    x0 = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        x0 += a[head].cell_length
        head += 1
    tail = 0
    end_a, end_b = before.cell_length, after.cell_length
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        end_a -= a[-1 - tail].cell_length
        end_b -= b[-1 - tail].cell_length
        tail += 1
    whole = (x0, max(end_a, end_b, x0 + 1))  # the differing segments
    start, end = whole
    if head < len(a) and head < len(b) and a[head].style == b[head].style:
        start += cell_len(_common_prefix(a[head].text, b[head].text))
    last_a, last_b = len(a) - 1 - tail, len(b) - 1 - tail
    if last_a >= head and last_b >= head and a[last_a].style == b[last_b].style and end_a == end_b:
        end -= cell_len(_common_prefix(a[last_a].text[::-1], b[last_b].text[::-1]))
    return (start, end) if end > start else whole


def _common_prefix(x: str, y: str) -> str:
    n = 0
    for cx, cy in zip(x, y, strict=False):
        if cx != cy:
            break
        n += 1
    return x[:n]


def _fits(text: Text, width: int) -> bool:
    """True when Rich's wrapping would leave ``text`` as it is: no tab, no line wider than ``width``, no
    justification that pads (the panes build their lines to the width already)."""
    plain = text.plain
    if not plain or "\t" in plain or text.justify not in (None, "default"):
        return False
    return all(cell_len(line) <= width for line in plain.split("\n"))


def render_strips(console: Console, text: Text, width: int, style: Style | None) -> list[Strip]:
    """The lines of ``text`` as Strips of ``width`` cells under the pane's ``style``: what
    ``console.render_lines(text, width, style=style, pad=True)`` gives, segment for segment.

    A pane's text already fits its width, so Rich's word wrap (split into lines, wrap each, join them again)
    changes nothing but took about half of the rendering (benchmarks/bench_dashboard.py): such text goes
    straight from its spans to segments. Anything else (a too-long line, a tab) takes Rich's own path.
    """
    if not _fits(text, width):
        options = console.options.update(width=width, height=None)
        return [Strip(line, width) for line in console.render_lines(text, options, style=style, pad=True)]
    segments: Iterable[Segment] = text.render(console, end="")
    if text.style and not text.spans:
        # Text.render leaves out the text's own style when it has no spans (wrapping had made it a span)
        segments = Segment.apply_style(segments, console.get_style(text.style))
    if style:
        segments = Segment.apply_style(segments, style)
    lines = Segment.split_and_crop_lines(segments, width, style=style, pad=True, include_new_lines=False)
    return [Strip(line, width) for line in lines]


class Pane(Static):
    """A Static that repaints only when its text really changed (saves terminal bytes over SSH)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: Text | None = None

    def show(self, text: Text) -> None:
        text = safe_text(text)  # names, command lines, paths: someone else's characters, drawn visibly
        if self._shown is not None and text == self._shown:
            return
        # Same number of lines: the pane keeps its size (its height is set by the app), so no layout pass
        # over the whole screen is needed, only a repaint of this pane (profile: the layout pass was a
        # third of the frame's cost).
        same_size = self._shown is not None and self._shown.plain.count("\n") == text.plain.count("\n")
        old = self._strips if same_size and self._strips_key == self._key() else None
        self._shown = text
        self._strips = None
        if not same_size:
            self.update(text, layout=True)
        elif old is None:
            # Static.update would convert the text to Textual Content only for render_line below to ignore it
            self.refresh()
        else:
            # Only the cells that changed go to the terminal: Textual sends every line of a repainted
            # widget, and most lines of a pane (titles, numbers, idle rows) are the same frame after frame.
            new = self._render_strips()
            for y, (before, after) in enumerate(zip(old, new, strict=False)):
                span = changed_span(before, after)
                if span is not None:
                    self.refresh(Region(span[0], y, span[1] - span[0], 1))
            if len(new) != len(old):
                self.refresh()

    _strips: list[Strip] | None = None
    _strips_key: tuple[int, Any] | None = None

    def _key(self) -> tuple[int, Any]:
        return (self.size.width, self.visual_style.rich_style)

    def _render_strips(self) -> list[Strip]:
        assert self._shown is not None
        key = self._key()
        self._strips = render_strips(self.app.console, self._shown, *key)
        self._strips_key = key
        return self._strips

    def render_line(self, y: int) -> Strip:
        """Lines straight from Rich's renderer, cached until the text or the width changes.

        Profile (py-spy, demo healthy, 8 cards, 2 s tick): Textual's path for a Static (Rich Text -> Content,
        wrap, one Textual Style per span -> Strip) was 40 % of the busy CPU; Rich renders the same spans to
        segments several times faster. The pane's own style (colour, background) goes under every segment,
        as Static does.
        """
        if self._shown is None:
            return super().render_line(y)
        strips = self._strips if self._strips is not None and self._strips_key == self._key() else None
        if strips is None:
            strips = self._render_strips()
        if y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    @property
    def shown_plain(self) -> str:
        return self._shown.plain if self._shown is not None else ""


ACTION_MODES = action_modes()


class SourceFailed(Message):
    """Posted from the sampler thread when the source raised (``App.post_message`` is thread-safe)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class TriageApp(App[int]):
    """The live dashboard over a ``source`` (live NVML or simulated); a recording is :class:`ReplayApp`."""

    TITLE = "gpu-triage"
    SUB_TITLE = "gpu-triage"

    CSS = """
    Screen { overflow: hidden; }
    #body { height: 1fr; overflow: hidden; }
    Pane { width: 100%; height: auto; overflow: hidden; }
    #header { background: $panel; }
    /* 16/256 colours: the theme's panel grey came out light grey under grey and cyan text (unreadable) */
    App:ansi #header { background: ansi_default; }
    #foot { dock: bottom; height: auto; }
    /* Textual's toast is 60 columns at most half the screen: at 80 columns a path made it 40 wide and so
       tall that its end fell off the bottom. Wider on narrow screens; the text wraps. */
    Toast { width: auto; max-width: 90%; }
    """
    # built from the one key table (ui/keys.py); check_action disables (and so hides) a mode's keys in the
    # other mode: replay's step and seek keys used to be bound, silently doing nothing, in live
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(key, action, k.footer or "", show=False, priority=key in k.priority)
        for k in KEYS for key, action in k.bindings
    ]
    mode: Mode = "live"

    def __init__(
        self,
        config: Config,
        *,
        source: Source | None = None,
        source_label: str = "",
        banner: str | None = None,
        record_path: Path | None = None,
        prefill: list[Tick] | None = None,
        autostart: bool = True,
        labels: list[dict[str, Any]] | None = None,
        speed: float = 1.0,
    ) -> None:
        # 16/256 colours: "red" and "yellow" reach the terminal as its own (see ui/palette.py)
        super().__init__(ansi_color=True if palette.named_colours_pass_through() else None)
        self._fit_filters()
        if source is None and self.mode == "live":
            raise ValueError("the live dashboard needs a source (a recording: ReplayApp)")
        self.doctor_loader: Callable[[], Any] | None = None  # None: the doctor checks this machine
        self.exit_notes: list[str] = []  # lines for the terminal once the screen is gone
        self.config = config
        self.source = source
        self.source_label = source_label
        self.banner = banner
        self.labels = labels or []
        self.speed = speed  # the simulated demo samples its ticks this many times faster than their interval
        self.colours = Colours(config.color_gpu, config.color_sm, config.color_alert)
        self.host: HostInfo = self._host_info()
        # the simulated demo is not this machine: its header must not say "live", its doctor has nothing to check
        self.simulated = self.host.extra.get("source") == "simulated"
        self.interval_s = self._interval()
        capacity, self.window_notice = window_capacity(config.window_s, self.interval_s)
        if self.window_notice:
            log.info("%s", self.window_notice)
            self.exit_notes.append(self.window_notice)
        self.window = RollingWindow(capacity)
        self.paused = False
        self.selected = 0
        self.procs = procview.ProcState()
        # the panes under the header, shown in this order; the others hidden ([ui] panes, the `o` key)
        self.pane_order: list[str] = list(config.panes)
        # this machine's processes (user, command line, signals): set for `live` only; the simulated and the
        # recorded processes are not this machine's
        self.proc_control: ProcControl | None = None
        self._proc_page = 1
        self.recorder: Recorder | None = None
        self.record_error: str | None = None
        self._record_path = record_path
        self._autostart = autostart
        self._prefill = prefill or []
        self._feed: LiveFeed | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._redraw_pending = False
        self._last_redraw_at = -math.inf
        self._verdict_stale = False
        self.redraw_min_s = REDRAW_MIN_S
        self.clock = time.monotonic  # replaceable in tests (the outside world's clock)
        self._tracker = VerdictTracker(config.thresholds)
        self.history: list[tuple[float, str, str]] = []
        self.shown: Shown = FactsOnly([])
        self._status = SourceStatus()
        self.ticks_ingested = 0
        self.source_errors = 0
        self.source_error: str | None = None  # the last source error, shown under the header
        self._mounted = False
        self.redraws = 0
        self.theme = config.theme

    def _fit_filters(self) -> None:
        """NO_COLOR: no colour at all instead of Textual's greys; 16 colours: drawn as the terminal will;
        and whatever colours, no control character of anyone's making reaches the terminal."""
        self._filters.append(palette.NoControlCodes())
        if self.no_color:
            self._filters = [f for f in self._filters if not isinstance(f, Monochrome | NoColor)]
            self._filters.append(NoColor())
        elif palette.color_system() == "standard":
            self._filters.append(palette.Standard16())

    def notify(self, message: str, *, markup: bool = False, **kwargs: Any) -> None:
        """Textual's notify, without markup by default: our messages carry paths and errors such as
        ``[Errno 28]``, which markup swallowed (or took for a style, e.g. ``[bold]`` in a file name)."""
        super().notify(clean_lines(message), markup=markup, **kwargs)

    # -- composition --------------------------------------------------------------------------------
    def _display(self, screen: Any, renderable: Any) -> None:
        """Partial updates go out cropped on both sides (:class:`_CroppedChops`): with panes that refresh only
        their changed cells, this is what keeps a 2 s frame to the cells that changed."""
        if type(renderable) is ChopsUpdate:
            renderable = _CroppedChops(renderable.chops, renderable.spans, renderable.chop_ends)
        super()._display(screen, renderable)

    def compose(self) -> ComposeResult:
        with Vertical(id="body"):
            yield Pane(id="header")
            yield Pane(id="gpu")
            yield Pane(id="job")
            yield Pane(id="diag")
            yield Pane(id="cpu")
            yield Pane(id="disk")
            yield Pane(id="procs")
        with Vertical(id="foot"):
            yield Pane(id="bar")
            yield Pane(id="keys")

    def on_mount(self) -> None:
        self._mounted = True
        self._loop = asyncio.get_running_loop()
        if self.source is not None:
            self._status = self.source.status()
        for tick in self._prefill:
            self.ingest(tick, draw=False, record=False)
        self._start_feed()
        if self._record_path is not None:
            self.start_recording(self._record_path)
        self.redraw()

    # -- what differs between live and replay (ReplayApp overrides these) ------------------------------
    def _host_info(self) -> HostInfo:
        assert self.source is not None
        return self.source.host_info()

    def _interval(self) -> float:
        return self.config.interval_s

    def _start_feed(self) -> None:
        if self._autostart:
            assert self.source is not None
            period = self.config.interval_s / self.speed
            self._feed = LiveFeed(self.source, period, self._tick_from_thread, self._error_from_thread)
            self._feed.start()

    def _state_text(self, t: Text, compact: bool) -> None:
        """The live / paused (/ playing) word of the header."""
        if self.paused:
            t.append("■ PAUSED" if compact else "■ PAUSED (sampling goes on)", "bold yellow")
        elif self.simulated:
            t.append("● simulated", "bold cyan")
        else:
            t.append("● live", "bold green")

    def _bar_text(self, width: int) -> Text:
        """The replay position bar; live has none."""
        return Text("")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A key of the other mode does nothing (and Textual hides it) instead of being bound to a no-op.
        The process keys act on the main screen only (Tab must still move the focus in a dialog)."""
        if action.startswith("proc") and len(self.screen_stack) > 1:
            return False
        modes = ACTION_MODES.get(action)
        return modes is None or self.mode in modes

    def on_resize(self) -> None:
        self.redraw()

    def on_unmount(self) -> None:
        self._mounted = False
        self.shutdown()

    def shutdown(self) -> None:
        """Stop sampling and finish a recording as a valid file. Idempotent; also used on SIGHUP."""
        if self._feed is not None:
            self._feed.stop()
            self._feed = None
        if self.recorder is not None:
            # said after the screen is gone (run_dashboard prints these): `r` then `q` at once wrote nothing
            # and said nothing, because the first tick had not come yet
            path = self.stop_recording()
            self.exit_notes.append(f"recording saved: {path}" if path is not None
                                   else f"recording not saved: {self.record_error}")

    # -- data in ------------------------------------------------------------------------------------
    def _tick_from_thread(self, tick: Tick) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.ingest_streamed, tick)

    def ingest_streamed(self, tick: Tick) -> None:
        """A tick from the running feed (sampler or replay timer): the frame is rate-capped."""
        self.ingest(tick, draw=True, throttle=True)

    def _error_from_thread(self, exc: BaseException) -> None:
        # A Textual message, not loop.call_soon_threadsafe(self.notify, ..., severity=...): that call takes
        # no keywords, the TypeError ended the sampler thread and the screen silently stopped updating.
        self.post_message(SourceFailed(f"{type(exc).__name__}: {exc}"))

    def on_source_failed(self, message: SourceFailed) -> None:
        """A source error is shown (a toast, and a header line that stays) while sampling goes on."""
        self.source_errors += 1
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        count = f" ({self.source_errors} errors so far)" if self.source_errors > 1 else ""
        self.source_error = f"source error at {stamp} UTC: {message.error}{count}; sampling goes on"
        self.notify(f"source error: {message.error}", severity="error")
        self.redraw()

    def ingest(self, tick: Tick, *, draw: bool = True, record: bool = True, throttle: bool = False) -> None:
        """The single entry point of every tick, live or replayed.

        With ``draw`` the diagnosis is left to the next frame (one diagnosis per frame, not per tick); with
        ``throttle`` that frame comes no sooner than ``redraw_min_s`` after the previous one. Without
        ``draw`` (prefill, headless use) the verdict is brought up to date at once.
        """
        self.window.append(tick)
        self.ticks_ingested += 1
        if record and self.recorder is not None:
            self.recorder.append(tick)
        if self.source is not None:
            self._status = self.source.status()
        self._verdict_stale = True
        if draw:
            self._schedule_redraw(throttle=throttle)
        else:
            self._update_verdict()

    def verdict_now(self, view: WindowView | None = None) -> Shown:
        """The shown verdict for the newest tick (diagnosing now if ticks came in since the last frame).

        ``view``: the frame's own copy of the window, so that a frame builds it once, not once for the
        diagnosis and again for the panes."""
        if self._verdict_stale:
            self._update_verdict(view)
        return self.shown

    def _update_verdict(self, view: WindowView | None = None) -> None:
        self._verdict_stale = False
        if view is None:
            view = self.window.view()
        t = float(view.t[-1]) if view.n else 0.0
        try:
            verdict = diagnose(view, self.config.thresholds, self.host.cpu_count)
        except Exception as exc:  # a diagnosis bug must not take the dashboard down: logged, facts shown
            log.exception("diagnosis failed")
            self.shown = FactsOnly([*panes.facts(view), f"diagnosis failed: {exc}"])
            return
        verdict = self._tracker.update(t, verdict, view)
        self.shown = verdict
        if self.history and self.history[-1][0] >= t:
            self.history = [h for h in self.history if h[0] < t]
        self.history.append((t, verdict.pattern, verdict.bottleneck))
        if len(self.history) > 2 * self.window.capacity:
            del self.history[: len(self.history) - self.window.capacity]

    # -- drawing ------------------------------------------------------------------------------------
    def _schedule_redraw(self, *, throttle: bool = False) -> None:
        if self._redraw_pending:
            return  # several ticks before one frame: draw only the newest state
        self._redraw_pending = True
        wait = self._last_redraw_at + self.redraw_min_s - self.clock() if throttle else 0.0
        if wait > 0 and self._loop is not None:
            # asyncio's timer, not Textual's: this runs in a callback from the sampler thread, outside the
            # app's context, where a Textual timer would never fire
            self._loop.call_later(wait, self.call_later, self._redraw_now)
        else:
            self.call_later(self._redraw_now)

    def _redraw_now(self) -> None:
        self._redraw_pending = False
        self.redraw()

    def redraw(self) -> None:
        if not self._mounted:
            return
        if self.paused:
            self.query_one("#header", Pane).show(self._header_text(self.size.width))
            return
        self.redraws += 1
        self._last_redraw_at = self.clock()
        view = self.window.view()
        self.verdict_now(view)
        width = max(20, self.size.width)
        height = max(5, self.size.height)
        header = self._header_text(width)
        bar = self._bar_text(width)
        bar_lines = 1 if bar.plain else 0
        fixed = len(header.plain.split("\n")) + 1 + bar_lines
        shown_procs, host_only = self._procs_now()
        notice = self.source.job_notice() if isinstance(self.source, JobSource) else None  # the job pane's
        job_n = job_pane.job_lines(view, notice) if isinstance(self.source, JobSource) or any(view.jobs) else 0
        hidden = frozenset(PANES) - set(self.pane_order)
        if "job" in hidden:
            job_n = 0
        budget = plan_layout(
            height,
            width,
            max(1, view.n_gpus),
            view.cpu.shape[1],
            0 if self.procs.focused else len(view.disk_names),  # a focused table takes the disks' lines
            len(shown_procs),
            fixed + job_n,
            panes.verdict_need(self.shown, width),
            n_nets=len(view.nets[-1]) if view.nets else 0,
            procs_first=self.procs.focused and "procs" not in hidden,
            hidden=hidden,
        )
        self.selected = min(self.selected, max(0, view.n_gpus - 1))
        drawn: dict[str, tuple[Text, int]] = {
            "header": (header, fixed - 1 - bar_lines),
            "gpu": (
                panes.gpu_pane(
                    view,
                    width,
                    budget.gpu_rows,
                    self.colours,
                    lost=self._status.lost_gpus,
                    selected=self.selected,
                    gpu_available=self._status.gpu_available,
                ),
                1 + max(1, view.n_gpus) * budget.gpu_rows,
            ),
            "job": (job_pane.job_pane(view, width, job_n, self.colours, notice=notice), job_n),
            "diag": (panes.diag_pane(self.shown, self.history, view, width, budget.diag, self.colours), budget.diag),
            "cpu": (panes.cpu_pane(view, width, budget.cpu, self.colours), budget.cpu),
            "disk": (panes.disk_pane(view, width, budget.disk + budget.net, net=budget.net > 0),
                     budget.disk + budget.net),
            "procs": (
                procview.proc_pane(
                    shown_procs,
                    width,
                    budget.procs,
                    self.procs,
                    self._proc_details,
                    local=self.proc_control is not None,
                    host_only=host_only,
                ),
                budget.procs,
            ),
            "keys": (self._keys_text(width), 1),
            "bar": (bar, bar_lines),
        }
        self._proc_page = max(1, budget.procs - 2)
        self._order_panes()
        for name, (text, lines) in drawn.items():
            lines = min(lines, len(text.plain.split("\n"))) if text.plain and name not in hidden else 0
            pane = self.query_one(f"#{name}", Pane)
            if pane.styles.height is None or pane.styles.height.value != lines:
                pane.styles.height = lines
                pane.display = lines > 0
            pane.show(text)
        if isinstance(self.screen, FollowsWindow):
            self.screen.refresh_data(view)

    def _order_panes(self) -> None:
        """The body's panes in the user's order (the header first, hidden ones last, with no lines)."""
        wanted = ["header", *self.pane_order, *(p for p in PANES if p not in self.pane_order)]
        body = self.query_one("#body", Vertical)
        if [w.id for w in body.children] == wanted:
            return
        for before, after in zip(wanted, wanted[1:], strict=False):
            body.move_child(self.query_one(f"#{after}", Pane), after=self.query_one(f"#{before}", Pane))

    def set_panes(self, order: list[str]) -> None:
        """Show these panes in this order (the others hidden): the `o` screen's answer."""
        self.pane_order = [p for p in order if p in PANES]
        if "procs" not in self.pane_order:
            self.procs.focused = False
        self.redraw()

    def action_panes(self) -> None:
        from gpu_triage.ui.screens import PanesScreen

        def apply(order: list[str] | None) -> None:
            if order is not None:
                self.set_panes(order)

        self.push_screen(PanesScreen(self.pane_order), apply)

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

    # -- recording ----------------------------------------------------------------------------------
    def start_recording(self, path: Path) -> None:
        try:
            self.recorder = Recorder(path, self.host, self.interval_s)
            self.record_error = None
        except Exception as exc:  # UserError, OSError, Arrow's errors: shown, the dashboard goes on
            log.exception("recording to %s could not start", path)
            self.recorder = None
            self.record_error = str(exc)

    def stop_recording(self) -> Path | None:
        rec, self.recorder = self.recorder, None
        if rec is None:
            return None
        try:
            return rec.close()
        except Exception as exc:  # noqa: BLE001 - UserError (no tick yet), OSError: said on screen and at exit
            log.warning("recording not saved: %s", exc)
            self.record_error = str(exc)
            return None

    # -- actions ------------------------------------------------------------------------------------
    def action_pause(self) -> None:
        self.paused = not self.paused
        self.redraw()

    def action_help(self) -> None:
        from gpu_triage.ui.screens import HelpScreen

        self.push_screen(HelpScreen(self.mode))

    def action_select(self, delta: int) -> None:
        if self.procs.focused:
            self.action_proc_move(delta)
            return
        n = max(1, self.window.view().n_gpus) if self.window.last is not None else 1
        self.selected = (self.selected + delta) % n
        self.redraw()

    # -- the process table ----------------------------------------------------------------------------
    def _proc_details(self, pid: int) -> ProcDetails | None:
        return self.proc_control.details(pid) if self.proc_control is not None else None

    def _procs_now(self) -> tuple[list[ProcSample], bool]:
        """The GPU processes of the newest tick; with none and no GPU (host-only), the host's busiest, or
        with a filter every process of the host: `/` then the PID of an idle process must find it."""
        last = self.window.last
        procs = list(last.procs) if last else []
        source = self.source.inner if isinstance(self.source, Wrapper) else self.source  # under --job-log, pulse
        if not procs and not self._status.gpu_available and isinstance(source, HostProcesses):
            if self.procs.filter and isinstance(source, AllHostProcesses):
                return list(source.host_processes()), True
            return list(source.busiest_processes()), True
        return procs, False

    def _proc_rows(self) -> list[procview.Row]:
        return procview.rows(self._procs_now()[0], self.procs, self._proc_details)

    def action_procs_focus(self) -> None:
        self.procs.focused = not self.procs.focused
        self.redraw()

    def action_procs_unfocus(self) -> None:
        if self.procs.focused:
            self.procs.focused = False
            self.redraw()

    def action_proc_move(self, delta: int | str) -> None:
        self.procs.focused = True
        procview.move(self.procs, self._proc_rows(), delta, self._proc_page)
        self.redraw()

    def action_proc_sort(self) -> None:
        self.procs.sort = procview.SORTS[(procview.SORTS.index(self.procs.sort) + 1) % len(procview.SORTS)]
        self.redraw()

    def action_proc_reverse(self) -> None:
        self.procs.reverse = not self.procs.reverse
        self.redraw()

    def action_proc_tree(self) -> None:
        self.procs.tree = not self.procs.tree
        self.redraw()

    def action_proc_filter(self) -> None:
        from gpu_triage.ui.screens import FilterScreen

        def apply(text: str | None) -> None:
            if text is not None:
                self.procs.filter = text.strip()
                self.procs.focused = True
                self.procs.offset = 0
                self.redraw()

        self.push_screen(FilterScreen(self.procs.filter), apply)

    def action_proc_signal(self) -> None:
        from gpu_triage.ui.screens import SignalScreen

        if self.proc_control is None:
            self.notify("these are not processes of this machine (simulated or recorded): nothing to signal")
            return
        table = self._proc_rows()
        row = next((r for r in table if r.pid == self.procs.selected), None) if self.procs.focused else None
        if row is None:
            self.notify("select a process first: Tab, then ↑ ↓")
            return
        control = self.proc_control
        # pinned now, as the confirmation names it: a signal goes to this process or, once it has
        # exited, to none (its pid may be another process's by the time the key is pressed)
        pinned = control.pin(row.pid)
        if isinstance(pinned, str):
            self.notify(f"not sent: {pinned}", severity="warning")
            return
        what = procview.detail_line(row, lambda _pid: pinned.details, local=True)

        def send(name: str | None) -> None:
            try:
                if name is None:
                    return
                error = control.send(pinned, name)
            finally:
                pinned.close()
            if error is None:
                self.notify(f"{name} sent to PID {row.pid}")
            else:
                self.notify(f"not sent: {error}", severity="error")

        self.push_screen(SignalScreen(what), send)

    def action_detail(self) -> None:
        from gpu_triage.ui.detail_screen import DetailScreen

        view = self.window.view()
        if not view.n_gpus:
            self.notify("no GPU to show")
            return
        self.push_screen(DetailScreen(min(self.selected, view.n_gpus - 1), view))

    def action_record(self) -> None:
        if self.recorder is not None:
            path = self.stop_recording()
            if path is not None:
                self.notify(f"recording saved: {path}")
            else:  # not "recording saved: None": say what failed (the stream stays for `gpu-triage recover`)
                self.notify(f"recording not saved: {self.record_error}", severity="error")
        else:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            path = self.config.recording_dir / f"gpu-triage-{stamp}.parquet"
            self.start_recording(path)
            if self.recorder is not None:
                self.notify(f"recording to {path}")
        self.redraw()

    def action_doctor(self) -> None:
        if self.simulated and self.doctor_loader is None:
            # it used to check this machine while the screen showed the simulated server
            self.notify("the doctor checks a real machine, not the simulated server: "
                        "run `gpu-triage doctor` on the GPU machine")
            return
        try:
            from gpu_triage.ui.doctor_screen import DoctorScreen
        except ImportError:
            self.notify("doctor screen not available in this build: run `gpu-triage doctor`")
            return
        self.push_screen(DoctorScreen(loader=self.doctor_loader))


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
