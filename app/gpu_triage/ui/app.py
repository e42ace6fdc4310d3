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
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual._compositor import ChopsUpdate
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.filter import Monochrome, NoColor
from textual.message import Message

from gpu_triage.config import PANES, Config
from gpu_triage.feeds import LiveFeed
from gpu_triage.model import HostInfo, Tick
from gpu_triage.proc_control import ProcControl
from gpu_triage.safetext import clean_lines
from gpu_triage.sources.base import JobSource, Source, SourceStatus
from gpu_triage.ui import gpu_pane, host_panes, job_pane, palette, procview, verdict_pane
from gpu_triage.ui.app_actions import KeyActions
from gpu_triage.ui.app_header import HeaderText
from gpu_triage.ui.follow import FollowsWindow
from gpu_triage.ui.keys import KEYS, Mode, action_modes
from gpu_triage.ui.layout import plan_layout
from gpu_triage.ui.pane_widget import CroppedChops, Pane
from gpu_triage.ui.panes import Colours
from gpu_triage.ui.verdict_pane import FactsOnly, Shown
from gpu_triage.verdicts.judge import Judge, Judgement
from gpu_triage.window import WindowView

log = logging.getLogger(__name__)

# Ticks from the sampler or the replay timer are ingested at once, but the screen (and the diagnosis that
# feeds it) is redrawn at most once per REDRAW_MIN_S. Profile (py-spy, 0.25 s tick, 8 simulated cards): 58 %
# of the CPU was Textual turning pane text into terminal lines and 6 % the diagnosis, both once per tick;
# the sampler and the window append were under 10 %. A 2 s tick is unaffected (one frame per tick).
REDRAW_MIN_S = 1.0


ACTION_MODES = action_modes()


class SourceFailed(Message):
    """Posted from the sampler thread when the source raised (``App.post_message`` is thread-safe)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class TriageApp(HeaderText, KeyActions):
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
        # the one judge of these ticks: its window is the one the panes draw
        self.judge = Judge(config.thresholds, config.window_s, self.interval_s, self.host.cpu_count)
        self.window, self.window_notice = self.judge.window, self.judge.notice
        if self.window_notice:
            log.info("%s", self.window_notice)
            self.exit_notes.append(self.window_notice)
        self.publish_metrics: Callable[[Judgement, SourceStatus], object] | None = None  # live --metrics (ui/run.py)
        self.paused = False
        self.selected = 0
        self.procs = procview.ProcState()
        # the panes under the header, shown in this order; the others hidden ([ui] panes, the `o` key)
        self.pane_order: list[str] = list(config.panes)
        # this machine's processes (user, command line, signals): set for `live` only; the simulated and the
        # recorded processes are not this machine's
        self.proc_control: ProcControl | None = None
        self._proc_page = 1
        self.recorder = None  # its type: KeyActions.recorder
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
        self.history: list[tuple[float, str, str]] = []
        self.shown: Shown = FactsOnly([])
        self._judged: Judgement | None = None  # the judgement shown
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
        self.judge.add(tick)
        self.ticks_ingested += 1
        if self.source is not None:
            self._status = self.source.status()
        self._verdict_stale = True
        if (record and self.recorder is not None) or self.publish_metrics is not None:
            self.pass_on(self._update_verdict(), record)  # judged now, once: the frame shows that judgement
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

    def _update_verdict(self, view: WindowView | None = None) -> Judgement | None:
        """The judge's word on the newest tick (diagnosed once however often asked) becomes what is shown."""
        self._verdict_stale = False
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
        if self._status.driver_failure is not None:  # idle/none would read as a healthy host: no verdict at all
            self.shown = FactsOnly(["no verdict: the driver cannot read the cards (red line above)"])
        if self.history and self.history[-1][0] >= t:
            self.history = [h for h in self.history if h[0] < t]
        self.history.append((t, verdict.pattern, verdict.bottleneck))
        if len(self.history) > 2 * self.window.capacity:
            del self.history[: len(self.history) - self.window.capacity]
        return judged

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
        inside = self._inside_lines(view)  # what the waiting processes were doing, for the diagnosis pane
        hidden = frozenset(PANES) - set(self.pane_order)
        if "job" in hidden:
            job_n = 0
        budget = plan_layout(
            height,
            width,
            view.n_gpus if host_only else max(1, view.n_gpus),  # host only: one line says so, no card's
            view.cpu.shape[1],
            0 if self.procs.focused else len(view.disk_names),  # a focused table takes the disks' lines
            len(shown_procs),
            fixed + job_n,
            verdict_pane.verdict_need(self.shown, width, len(inside)),
            n_nets=len(view.nets[-1]) if view.nets else 0,
            procs_first=self.procs.focused and "procs" not in hidden,
            hidden=hidden,
        )
        self.selected = min(self.selected, max(0, view.n_gpus - 1))
        drawn: dict[str, tuple[Text, int]] = {
            "header": (header, fixed - 1 - bar_lines),
            "gpu": (
                gpu_pane.gpu_pane(
                    view,
                    width,
                    budget.gpu_rows,
                    self.colours,
                    lost=self._status.lost_gpus,
                    selected=self.selected,
                    gpu_available=self._status.gpu_available,
                    driver_failed=self._status.driver_failure is not None,
                ),
                1 + max(1, view.n_gpus) * budget.gpu_rows,
            ),
            "job": (job_pane.job_pane(view, width, job_n, self.colours, notice=notice), job_n),
            "diag": (
                verdict_pane.diag_pane(self.shown, self.history, view, width, budget.diag, self.colours, inside),
                budget.diag,
            ),
            "cpu": (host_panes.cpu_pane(view, width, budget.cpu, self.colours), budget.cpu),
            "disk": (host_panes.disk_pane(view, width, budget.disk + budget.net, net=budget.net > 0),
                     budget.disk + budget.net),
            "procs": (
                procview.proc_pane(
                    shown_procs, width, budget.procs, self.procs, self._proc_details,
                    local=self.proc_control is not None,
                    host_only=host_only,
                    inside=self._inside_of(view),
                    here=self._proc_here(),
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
