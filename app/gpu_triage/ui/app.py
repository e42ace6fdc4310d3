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
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual._compositor import ChopsUpdate
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.events import Resize
from textual.filter import Monochrome, NoColor
from textual.geometry import Size
from textual.message import Message

from gpu_triage.config import PANES, Config, wait_band
from gpu_triage.feeds import LiveFeed
from gpu_triage.model import HostInfo, Tick
from gpu_triage.safetext import clean_lines
from gpu_triage.sources.base import Source, SourceStatus
from gpu_triage.ui import palette
from gpu_triage.ui.app_frame import Frame, Still, put_on_screen
from gpu_triage.ui.app_header import Header
from gpu_triage.ui.app_pacing import FramePacer
from gpu_triage.ui.app_procs import ProcTable
from gpu_triage.ui.app_recording import Recording
from gpu_triage.ui.app_verdict import ShownVerdict
from gpu_triage.ui.follow import FollowsWindow
from gpu_triage.ui.keys import KEYS, Mode, action_modes
from gpu_triage.ui.pane_widget import CroppedChops, Pane
from gpu_triage.ui.panes import Colours
from gpu_triage.ui.verdict_pane import Shown
from gpu_triage.verdicts.judge import Judge, Judgement
from gpu_triage.window import RollingWindow, WindowView

log = logging.getLogger(__name__)

ACTION_MODES = action_modes()


class SourceFailed(Message):
    """Posted from the sampler thread when the source raised (``App.post_message`` is thread-safe)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class TriageApp(App[int]):
    """The live dashboard over a ``source`` (live NVML or simulated); a recording is :class:`ReplayApp`.

    The app wires its controllers, each the owner of its state: the shown verdict (``verdicts``), the header
    (``header``), the process table (``procs``), the recording (``recording``) and the frame's layout
    (``frame``); Textual's entry points (``on_*``, ``action_*``) hand over to them. What stays here: the ticks'
    way in, when a frame is drawn, the card selected, the panes shown, pause and the dialogs."""

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
    # other mode: replay's step and seek keys would otherwise be bound, silently doing nothing, in live
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
        judged: ShownVerdict | None = None,
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
        self.speed = speed  # the simulated demo samples its ticks this many times faster than their interval
        self.colours = Colours(config.color_gpu, config.color_sm, config.color_alert)
        self.host: HostInfo = self._host_info()
        # the simulated demo is not this machine: its header must not say "live", its doctor has nothing to check
        self.simulated = self.host.extra.get("source") == "simulated"
        self.interval_s = self._interval()
        # the one judge of these ticks: its window is the one the panes draw. ``judged``: a window already filled
        # and judged with this configuration, as ``prefill`` leaves it (tests judge a shared prefill once)
        if judged is None:
            judged = ShownVerdict(Judge(config.thresholds, config.window_s, self.interval_s, self.host.cpu_count,
                                        capacity=self._window_ticks()))
        self.verdicts = judged
        judge = judged.judge
        if judge.notice:
            log.info("%s", judge.notice)
            self.exit_notes.append(judge.notice)
        self.header = Header(host=self.host, mode=self.mode, colours=self.colours, interval_s=self.interval_s,
                             source_label=source_label, speed=speed, banner=banner, window_notice=judge.notice,
                             labels=labels or [], state_text=self._state_text)
        self.recording = Recording(self, config, self.host, self.interval_s)
        self.procs = ProcTable(self, source, self._newest, self._status_shown)
        self.frame = Frame(source, self.colours, self.procs, wait_band(config))
        self.publish_metrics: Callable[[Judgement, SourceStatus], object] | None = None  # live --metrics (ui/run.py)
        self.paused = False
        self._still: Still | None = None  # the data of the last frame drawn: what a paused screen keeps showing
        self.selected = 0  # the card selected (the detail screen's, Enter)
        # the panes under the header, shown in this order; the others hidden ([ui] panes, the `o` key)
        self.pane_order: list[str] = list(config.panes)
        self._record_path = record_path
        self._autostart = autostart
        self._prefill = prefill or []
        self._feed: LiveFeed | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pacer = FramePacer(self.redraw, self.call_later, lambda: self._loop)
        self._status = SourceStatus()
        self.ticks_ingested = 0
        self.source_errors = 0
        self.source_error: str | None = None  # the last source error, shown under the header
        self._mounted = False
        self.redraws = 0
        self.laid_out: Size | None = None  # the screen's size when the last frame was drawn
        self.theme = config.theme

    @property
    def window(self) -> RollingWindow:
        """The judge's window of the newest ticks, the one the panes draw."""
        return self.verdicts.window

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
        """Partial updates go out cropped on both sides (:class:`CroppedChops`): with panes that refresh only
        their changed cells, this is what keeps a 2 s frame to the cells that changed."""
        if type(renderable) is ChopsUpdate:
            renderable = CroppedChops(renderable.chops, renderable.spans, renderable.chop_ends)
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
            self.recording.start(self._record_path)
        self.redraw()

    # -- what differs between live and replay (ReplayApp overrides these) ------------------------------
    def _host_info(self) -> HostInfo:
        assert self.source is not None
        return self.source.host_info()

    def _interval(self) -> float:
        return self.config.interval_s

    def _window_ticks(self) -> int | None:
        """At most this many ticks in the window (None: as many as the configured window holds)."""
        return None

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

    def _header_text(self, width: int) -> Text:
        return self.header.text(width, window=self.window, recording=self.recording, status=self._status,
                                source_error=self.source_error)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A key of the other mode does nothing (and Textual hides it) instead of being bound to a no-op.
        The process keys act on the main screen only (Tab must still move the focus in a dialog)."""
        if action.startswith("proc") and len(self.screen_stack) > 1:
            return False
        modes = ACTION_MODES.get(action)
        return modes is None or self.mode in modes

    def on_resize(self, event: Resize) -> None:
        # a frame after this event, not in it: Textual calls this handler before App's own, which records the
        # new size, so a frame drawn here was laid out for the old size and stayed until the next tick. None for
        # the size drawn already: Textual's start-up says its size twice, the second time when it gets to it.
        if event.size != self.laid_out:
            self.pacer.schedule()

    def on_unmount(self) -> None:
        self._mounted = False
        self.shutdown()

    def shutdown(self) -> None:
        """Stop sampling and finish a recording as a valid file. Idempotent; also used on SIGHUP."""
        if self._feed is not None:
            self._feed.stop()
            self._feed = None
        if self.recording.recorder is not None:
            # said after the screen is gone (run_dashboard prints these): `r` then `q` at once wrote nothing
            # and said nothing, because the first tick had not come yet
            path = self.recording.stop()
            self.exit_notes.append(f"recording saved: {path}" if path is not None
                                   else f"recording not saved: {self.recording.error}")

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
        ``throttle`` that frame comes no sooner than ``pacer.min_s`` after the previous one. Without
        ``draw`` (prefill, headless use) the verdict is brought up to date at once.
        """
        self.verdicts.add(tick)
        self.ticks_ingested += 1
        if self.source is not None:
            self._status = self.source.status()
        if (record and self.recording.recorder is not None) or self.publish_metrics is not None:
            judged = self.verdicts.update(self._status)  # judged now, once: the frame shows that judgement
            if judged is not None and record:
                self.recording.append(judged)  # the recording stores its raw verdict
            if judged is not None and self.publish_metrics is not None:
                self.publish_metrics(judged, self._status)  # live --metrics its shown one
        if draw:
            self.pacer.schedule(throttle=throttle)
        else:
            self.verdicts.update(self._status)

    def verdict_now(self, view: WindowView | None = None) -> Shown:
        """The shown verdict for the newest tick (diagnosing now if ticks came in since the last frame)."""
        return self.verdicts.now(self._status, view)

    def _newest(self) -> Tick | None:  # the process table's: while paused, the frozen frame's
        return self._still.newest if self.paused and self._still else self.window.last

    def _status_shown(self) -> SourceStatus:
        return self._still.status if self.paused and self._still else self._status

    # -- drawing ------------------------------------------------------------------------------------
    def redraw(self) -> None:
        """A frame of the newest data; while paused, the frozen frame again (at the screen's size now: a resize
        or a key lays it out afresh), under a header that goes on counting the ticks sampled."""
        if not self._mounted:
            return
        self.redraws += 1
        self.pacer.drawing()
        if not self.paused or self._still is None:
            view = self.window.view()
            self._still = Still.of(view, self.verdict_now(view), self.verdicts.history, self.window.last, self._status)
        still = self._still
        width = max(20, self.size.width)
        self.selected = min(self.selected, max(0, still.view.n_gpus - 1))
        self.laid_out = self.size
        drawn = self.frame.panes(still, width, max(5, self.size.height), header=self._header_text(width),
                                 bar=self._bar_text(width), keys=self.header.keys(width),
                                 selected=self.selected, order=self.pane_order)
        put_on_screen(self, drawn, self.pane_order)
        if isinstance(self.screen, FollowsWindow):
            self.screen.refresh_data(still.view)

    @property
    def settled(self) -> bool:
        """The last frame was laid out for the screen's size and no other is on its way: what a test waits on
        before it counts frames (the start-up's come when Textual delivers its events)."""
        return self.laid_out == self.size and not self.pacer.pending

    # -- keys ---------------------------------------------------------------------------------------
    def action_pause(self) -> None:
        self.paused = not self.paused
        self.redraw()

    def action_help(self) -> None:
        from gpu_triage.ui.screens import HelpScreen

        self.push_screen(HelpScreen(self.mode))

    def action_select(self, delta: int) -> None:
        if self.procs.state.focused:
            self.procs.move(delta)
            return
        n = max(1, self.window.view().n_gpus) if self.window.last is not None else 1
        self.selected = (self.selected + delta) % n
        self.redraw()

    def set_panes(self, order: list[str]) -> None:
        """Show these panes in this order (the others hidden): the `o` screen's answer."""
        self.pane_order = [p for p in order if p in PANES]
        if "procs" not in self.pane_order:
            self.procs.state.focused = False
        self.redraw()

    def action_panes(self) -> None:
        from gpu_triage.ui.screens import PanesScreen

        def apply(order: list[str] | None) -> None:
            if order is not None:
                self.set_panes(order)

        self.push_screen(PanesScreen(self.pane_order), apply)

    def action_detail(self) -> None:
        from gpu_triage.ui.detail_screen import DetailScreen

        view = self.window.view()
        if not view.n_gpus:
            self.notify("no GPU to show")
            return
        self.push_screen(DetailScreen(min(self.selected, view.n_gpus - 1), view))

    def action_doctor(self) -> None:
        if self.simulated and self.doctor_loader is None:
            # checking this machine while the screen shows the simulated server would mislead
            self.notify("the doctor checks a real machine, not the simulated server: "
                        "run `gpu-triage doctor` on the GPU machine")
            return
        try:
            from gpu_triage.ui.doctor_screen import DoctorScreen
        except ImportError:
            self.notify("doctor screen not available in this build: run `gpu-triage doctor`")
            return
        self.push_screen(DoctorScreen(loader=self.doctor_loader))

    def action_record(self) -> None:
        self.recording.toggle()

    # the process table's keys: ui/app_procs.py
    def action_procs_focus(self) -> None:
        self.procs.focus()

    def action_procs_unfocus(self) -> None:
        self.procs.unfocus()

    def action_proc_move(self, delta: int | str) -> None:
        self.procs.move(delta)

    def action_proc_sort(self) -> None:
        self.procs.sort()

    def action_proc_reverse(self) -> None:
        self.procs.reverse()

    def action_proc_tree(self) -> None:
        self.procs.tree()

    def action_proc_filter(self) -> None:
        self.procs.filter()

    def action_proc_signal(self) -> None:
        self.procs.signal()
