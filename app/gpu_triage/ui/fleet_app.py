"""``gpu-triage fleet``'s screen: one row per host, what needs a human first; Enter opens a host.

The screen never touches the network: :class:`~gpu_triage.fleet_live.client.Fleet` fetches in its own
threads and publishes a snapshot, which this app reads on a timer and draws when it changed. Every string
drawn came through ``safetext.clip`` and is drawn as plain text (rich ``Text``, never markup), so a
label holding ``[bold]`` or an escape sequence is shown as the characters it is.
"""

from __future__ import annotations

import gc
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.filter import Monochrome, NoColor
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from gpu_triage.diagnosis.vocab import GPU_FAULT
from gpu_triage.fleet_live.client import Fleet, FleetSnapshot
from gpu_triage.fleet_live.model import DOWN, OK, SORTS, STALE, HostRow, matches
from gpu_triage.fleet_live.render import cells, columns, detail_lines, fit, summary_line
from gpu_triage.ui import palette

POLL_S = 0.5  # how often the screen looks for a new snapshot (a dict read: no network here)
KEY_LINE = "↑↓ Home End move  / filter  s sort  Enter host  Esc back  r refresh  q quit"


def _row_style(row: HostRow, column: str) -> str:
    if row.state == DOWN or (row.state == OK and row.bottleneck == GPU_FAULT):
        return "bold red" if column in ("HOST", "STATE") else "red"
    if row.state == STALE:
        return "bold yellow" if column in ("HOST", "STATE") else "yellow"
    if row.has_bottleneck and column in ("HOST", "BOTTLENECK"):
        return "bold yellow"
    return ""


class HostTable(DataTable[Text]):
    """The hosts, one row each: Home and End go to the first and the last host (the table's own Home/End scroll
    its columns sideways, which a table that fits the width never needs)."""

    BINDINGS = [Binding("home", "first_row", "first host", show=False),
                Binding("end", "last_row", "last host", show=False)]

    def action_first_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)

    def action_last_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)


class HostScreen(Screen[None]):
    """One host's detail from the metrics; redrawn from each new snapshot while it is open."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("q", "app.quit", "quit")]
    DEFAULT_CSS = """
    HostScreen { layout: vertical; }
    HostScreen VerticalScroll { height: 1fr; }
    HostScreen #detail { height: auto; padding: 0 1; }
    HostScreen #keys { height: 1; dock: bottom; }
    """

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def compose(self) -> ComposeResult:
        with VerticalScroll():  # 16 cards and their host do not fit 24 lines
            yield Static(id="detail")
        yield Static(Text("↑↓ scroll  Esc back  q quit", style="dim"), id="keys")

    def on_mount(self) -> None:
        app = self.app
        assert isinstance(app, FleetApp)
        self.show(app.shown)
        self.query_one(VerticalScroll).focus()

    def show(self, snap: FleetSnapshot) -> None:
        row = next((r for r in snap.rows if r.key == self.key), None)
        if row is None:
            lines = [f"{self.key}: no longer in the answer ({snap.source})"]
        else:
            lines = detail_lines(row)
        width = max(20, self.size.width - 3)  # the padding and the scroll bar
        text = Text("\n".join(fit(line, width) for line in lines))
        if row is not None and row.state != OK:
            text.stylize("bold red", 0, len(lines[0]))
        self.query_one("#detail", Static).update(text)


class FleetApp(App[int]):
    """The table of hosts. ``autostart=False`` (tests, screenshots) draws the fleet's current snapshot and
    starts no refresher: call ``fleet.once()`` first."""

    TITLE = "gpu-triage fleet"
    BINDINGS = [Binding("q", "quit", "quit"), Binding("r", "refresh_now", "refresh"),
                Binding("slash", "filter", "filter"), Binding("s", "next_sort", "sort")]
    DEFAULT_CSS = """
    FleetApp #summary { height: 1; }
    FleetApp #filter { height: 1; border: none; padding: 0 1; display: none; }
    FleetApp #filter.-open { display: block; }
    FleetApp #error { height: auto; max-height: 2; color: red; }
    FleetApp DataTable { height: 1fr; }
    FleetApp #selected { height: 1; }
    FleetApp #keys { height: 1; }
    FleetApp DataTable.-nocolor > .datatable--cursor { text-style: reverse bold; }
    """

    def __init__(self, fleet: Fleet, *, autostart: bool = True, clock: Any = None) -> None:
        super().__init__(ansi_color=True if palette.named_colours_pass_through() else None)
        if self.no_color:
            self._filters = [f for f in self._filters if not isinstance(f, Monochrome | NoColor)]
            self._filters.append(NoColor())
        elif palette.color_system() == "standard":
            self._filters.append(palette.Standard16())
        self.fleet = fleet
        self.shown: FleetSnapshot = fleet.snapshot
        self._autostart = autostart
        self._columns: list[tuple[str, int]] = []
        self._drawn: dict[str, dict[str, Text]] = {}  # each row's cells as the table holds them
        self.rows: tuple[HostRow, ...] = ()  # the rows on screen: the snapshot's, filtered and in the chosen order
        self.filter_text = ""
        self.sort_name = next(iter(SORTS))  # the view's own order first
        self.clock = clock  # None: the wall clock (the summary's "updated N s ago")

    def compose(self) -> ComposeResult:
        yield Static(id="summary")
        yield Static(id="error")
        # one space between columns (the default padding is one on each side: the owner would not fit in 80)
        table = HostTable(cursor_type="row", zebra_stripes=False, cell_padding=0, id="hosts")
        yield table
        yield Input(placeholder="filter: host, state, bottleneck, pattern, owner (Enter keeps it, Esc clears it)",
                    id="filter")
        yield Static(id="selected")
        yield Static(Text(KEY_LINE, style="dim"), id="keys")

    def on_mount(self) -> None:
        self._draw(self.fleet.snapshot, force=True)
        table = self.query_one(DataTable)
        if self.no_color:  # the cursor is a background colour, which NO_COLOR takes away: reversed instead
            table.add_class("-nocolor")
        table.focus()
        self.set_interval(POLL_S, self._poll)
        if self._autostart:
            self.fleet.start()

    def on_unmount(self) -> None:
        if self._autostart:
            self.fleet.stop()

    def on_resize(self) -> None:
        if columns(self.size.width) != self._columns:
            self._draw(self.shown, force=True)

    def action_refresh_now(self) -> None:
        self.fleet.refresh_now()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-open")
        box.focus()

    def action_next_sort(self) -> None:
        names = list(SORTS)
        self.sort_name = names[(names.index(self.sort_name) + 1) % len(names)]
        self._draw(self.shown)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._draw(self.shown)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            event.input.remove_class("-open")
        self.query_one(DataTable).focus()

    def on_key(self, event: Any) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.has_focus:  # Esc in the filter: no filter, back to the table
            event.stop()
            box.value = ""
            box.remove_class("-open")
            self.query_one(DataTable).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While the filter has the keys, q, r, s and / are letters of it; a host's detail has no rows to filter
        or sort."""
        if action in ("quit", "refresh_now", "next_sort", "filter") and isinstance(self.focused, Input):
            return False
        if action in ("next_sort", "filter") and isinstance(self.screen, HostScreen):
            return False
        return True

    def _poll(self) -> None:
        if not self.is_running:  # shutting down: Textual closes the screens before it stops the timers
            return
        snap = self.fleet.snapshot
        if snap is not self.shown:
            self._draw(snap)
        else:
            self._draw_summary(snap)  # its "updated N s ago" moves on

    @property
    def selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        rows = self.rows
        return rows[table.cursor_row].key if 0 <= table.cursor_row < len(rows) else None

    def _draw_summary(self, snap: FleetSnapshot) -> None:
        now = self.clock() if self.clock is not None else None
        order = ("GPU fault, down/stale, bottleneck by severity, lowest GPU-Util" if self.sort_name == "severity"
                 else self.sort_name)
        shown = f"   filter {self.filter_text.strip()!r}: {len(self.rows)} shown" if self.filter_text.strip() else ""
        line = summary_line(snap, now) + shown + f"   order: {order}"
        self.query_one("#summary", Static).update(Text(fit(line, max(10, self.size.width)), style="bold"))

    def _draw(self, snap: FleetSnapshot, *, force: bool = False) -> None:
        """Draw ``snap``. Only what changed reaches the table: a new host is added, a gone one removed,
        changed cells updated, and the order set by a sort; clearing and refilling it would measure every
        cell again (2 s for 1,000 hosts on the CI box: benchmarks/bench_fleet_view.py)."""
        table = self.query_one(DataTable)
        keep = self.selected_key  # the cursor follows its host through a re-sort
        self.shown = snap
        rows = [r for r in snap.rows if matches(r, self.filter_text)]
        if self.sort_name != "severity":  # the snapshot comes in the view's own order
            rows.sort(key=SORTS[self.sort_name])
        self.rows = tuple(rows)
        self._draw_summary(snap)
        error = self.query_one("#error", Static)
        error.update(Text(snap.error or "", style="bold red"))
        error.display = bool(snap.error)
        wanted = self._sync_table(table, force)
        if self.rows:
            order = {id(self._drawn[r.key]["HOST"]): i for i, r in enumerate(self.rows)}
            table.sort("HOST", key=lambda cell: order[id(cell)])
        if keep is not None and keep in wanted:
            index = next(i for i, r in enumerate(self.rows) if r.key == keep)
            table.move_cursor(row=index, animate=False)
        self._draw_selected()
        if isinstance(self.screen, HostScreen):
            self.screen.show(snap)

    def _sync_table(self, table: DataTable[Text], force: bool) -> set[str]:
        """The table made to hold ``self.rows`` by the fewest changes (columns anew only when their widths
        change, or ``force``); the keys it holds."""
        cols = columns(self.size.width)
        if force or cols != self._columns:
            table.clear(columns=True)
            for title, width in cols:
                table.add_column(Text(title, style="bold"), key=title, width=width + 1)
            self._columns = cols
            self._drawn = {}
        wanted = {r.key for r in self.rows}
        for gone in [k for k in self._drawn if k not in wanted]:
            table.remove_row(gone)
            del self._drawn[gone]
        for row in self.rows:
            c = cells(row)
            now = {t: (fit(c[t], w), _row_style(row, t)) for t, w in cols}
            before = self._drawn.get(row.key)
            if before is None:
                drawn = {t: Text(text, style=style) for t, (text, style) in now.items()}
                table.add_row(*drawn.values(), key=row.key)
                self._drawn[row.key] = drawn
                continue
            for t, (text, style) in now.items():
                if before[t].plain != text or str(before[t].style) != style:
                    before[t] = Text(text, style=style)
                    table.update_cell(row.key, t, before[t])
        return wanted

    def _draw_selected(self) -> None:
        """Under the table: why the selected host is down, or its notes."""
        key = self.selected_key
        row = next((r for r in self.rows if r.key == key), None)
        text = ""
        if row is not None:
            names = "   ".join(dict.fromkeys(n for n in (row.hostname, row.address) if n))
            if row.error:
                text = f"{names}: {row.error}"
            else:
                text = f"{names}   " + (row.notes[0] if row.notes else "Enter: each card, memory, power")
        self.query_one("#selected", Static).update(Text(fit(text, max(10, self.size.width))))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._draw_selected()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.push_screen(HostScreen(str(event.row_key.value)))


def run_fleet_screen(fleet: Fleet) -> int:
    """Run the screen until q; the refresher stops with it."""
    app = FleetApp(fleet)
    app.run()
    # What the rounds left on the heap (a 1,000-host answer is millions of objects, some still being parsed by a
    # worker) would be walked by the interpreter's last garbage collection, seconds on a busy box after the
    # screen is gone (py-spy: gc_collect_main in Py_Finalize). Nothing there needs a finaliser: frozen, so the
    # exit does not walk it.
    gc.freeze()
    return app.return_code or 0

