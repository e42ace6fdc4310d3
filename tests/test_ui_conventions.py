"""The dashboard behaves as the tools its users' hands know (htop, nvitop, btop, watch): Ctrl-C quits, htop's
F-keys, a sort in both directions, a USER column, a filter over every process of the host, each process's
own GPU use."""

from __future__ import annotations

import dataclasses
import os
import pwd
import subprocess
from collections.abc import Callable

import pytest

from gpu_triage.config import Config
from gpu_triage.model import ProcSample
from gpu_triage.proc_control import ProcControl
from gpu_triage.ui import procview
from gpu_triage.ui.app import TriageApp
from tests import fake_nvml
from tests.test_proc_control import FakeKill, FakePsutil
from tests.test_ui_procs import USERS, _app, _details, _procs, _procs_text
from tests.ui_ticks import TickListSource, make_tick


def _plain_app() -> TriageApp:
    prefill = [make_tick(i, gpus=2, cores=4) for i in range(5)]
    return TriageApp(Config(), source=TickListSource(2, 4), source_label="test", prefill=prefill, autostart=False)


@pytest.mark.parametrize("key", ["ctrl+c", "f10", "q"])
async def test_ctrl_c_and_f10_quit_without_a_toast(key: str) -> None:
    """Textual's own Ctrl-C shows a toast, in raw markup, naming ctrl+q; a monitor quits on Ctrl-C."""
    app = _plain_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(key)
        await pilot.pause()
        assert not app._notifications, [n.message for n in app._notifications]
    assert app.return_code is not None and not app.is_running


async def test_ctrl_c_quits_from_the_filter_dialog_too() -> None:
    app = _plain_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash")
        await pilot.pause()
        assert type(app.screen).__name__ == "FilterScreen"
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.is_running


@pytest.mark.slow
async def test_htop_function_keys() -> None:
    kill = FakeKill()
    app = _app(ProcControl(FakePsutil(USERS), kill, own_pid=1))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("f1")  # as in htop, F1 again closes it (not a second help screen over it)
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen" and len(app.screen_stack) == 1
        await pilot.press("f1", "escape", "f3")
        await pilot.pause()
        assert type(app.screen).__name__ == "FilterScreen"
        await pilot.press("escape", "f5")
        await pilot.pause()
        assert app.procs.state.tree and "DataLoader wkr" in _procs_text(app)
        await pilot.press("f6")
        await pilot.pause()
        assert app.procs.state.sort == "GPU memory"
        await pilot.press("tab", "f9")
        await pilot.pause()
        # F9 is the kill key: these processes are a fake table's, not live ones, so the key pins nothing and
        # says so instead of opening the confirmation (tests/test_proc_control.py drives it on real processes)
        assert any(n.message.startswith("not sent:") for n in app._notifications), app._notifications
        await pilot.press("escape", "f10")
        await pilot.pause()
    assert not app.is_running


def test_sort_in_both_directions_shown_in_the_heading() -> None:
    procs = _procs()
    state = procview.ProcState(sort="CPU")
    head = procview.proc_pane(procs, 120, 6, state, _details).plain.split("\n")[0]
    cpu = [r.proc.cpu_pct for r in procview.rows(procs, state, _details)]
    assert cpu == sorted(cpu, reverse=True) and "by CPU ↓" in head
    state.reverse = True
    head = procview.proc_pane(procs, 120, 6, state, _details).plain.split("\n")[0]
    cpu = [r.proc.cpu_pct for r in procview.rows(procs, state, _details)]
    assert cpu == sorted(cpu) and "by CPU ↑" in head
    # a process without a figure stays last in either direction
    state.sort = "GPU%"
    with_none = [*procs[:3], dataclasses.replace(procs[3], sm_pct=None)]
    with_none = [dataclasses.replace(p, sm_pct=float(k)) if k < 3 else p for k, p in enumerate(with_none)]
    for reverse in (False, True):
        state.reverse = reverse
        assert procview.rows(with_none, state, _details)[-1].pid == procs[3].pid


def test_sort_by_user() -> None:
    state = procview.ProcState(sort="user")
    users = [USERS[r.pid][0] for r in procview.rows(_procs(), state, _details)]
    assert users == sorted(users) and users[0] == "alice" and users[-1] == "root"


@pytest.mark.slow
async def test_capital_i_reverses_the_sort() -> None:
    app = _app(ProcControl(FakePsutil(USERS), FakeKill(), own_pid=1))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("s")
        await pilot.pause()
        assert "by GPU memory ↓" in _procs_text(app).split("\n")[0]
        await pilot.press("I")
        await pilot.pause()
        assert "by GPU memory ↑" in _procs_text(app).split("\n")[0]
        rows = [ln for ln in _procs_text(app).split("\n")[1:] if ln[:8].strip().isdigit()]
        assert int(rows[0][:8]) == 200  # the smallest GPU memory (1 GiB) first


@pytest.mark.parametrize("width", [80, 120, 200])
def test_a_user_column_on_every_row(width: int) -> None:
    lines = procview.proc_pane(_procs(), width, 8, procview.ProcState(), _details).plain.split("\n")
    assert lines[0].split()[:2] == ["PID", "USER"] and "COMMAND" in lines[0]
    col = lines[0].index("USER")
    for ln in lines[1:]:
        if ln[:8].strip().isdigit():
            assert ln[col:col + 8].strip() == USERS[int(ln[:8])][0][:8]


def test_user_of_a_process_not_of_this_machine_is_the_recorded_one_never_this_machine_s() -> None:
    """A replayed or simulated pid is not this machine's process: its USER is what the recording says (as the
    detail line says it), "n/a" where the recording says nothing, never this machine's owner of that pid."""
    procs = _procs()
    procs[0].user = "carol"  # recorded; _details would say the local owner of that pid
    lines = procview.proc_pane(procs, 100, 8, procview.ProcState(), _details, local=False).plain.split("\n")
    col = lines[0].index("USER")
    users = {int(ln[:8]): ln[col:col + 8].strip() for ln in lines[1:] if ln[:8].strip().isdigit()}
    assert users[procs[0].pid] == "carol"
    assert all(u == "n/a" for pid, u in users.items() if pid != procs[0].pid)


def test_each_process_shows_its_own_sm_share_alone_on_its_card_too() -> None:
    procs = [ProcSample(pid=20, gpu_index=1, name="alone", sm_pct=64.0),
             ProcSample(pid=21, gpu_index=2, name="idle")]
    lines = procview.proc_pane(procs, 100, 4, procview.ProcState(), _details).plain.split("\n")
    sm = lines[0].index("GPU%") + 1
    assert [ln[sm - 1:sm + 3].strip() for ln in lines[1:3]] == ["64%", "n/a"]


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 120])
async def test_host_only_filter_finds_an_idle_sleep_by_its_pid(width: int) -> None:
    """No GPU: the table shows the busiest processes, but `/` searches every process of the host."""
    from gpu_triage.sources import live

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        source = live.LiveSource(nvml_module=fake_nvml.FakeNvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))
        app = TriageApp(Config(), source=source, source_label="live", autostart=False)
        app.procs.control = ProcControl()
        # the sleep is idle: among the host's processes it is not one of the busiest 10 shown
        async with app.run_test(size=(width, 40)) as pilot:
            app.ingest(source.sample())
            await pilot.pause(0.3)  # time between two samples: the second has CPU shares to rank processes by
            app.ingest(source.sample())
            await pilot.pause()
            head = _procs_text(app).split("\n")
            assert "no GPU" in head[0] and head[0].split()[:3] == ["PID", "USER", "CPU%"] and "COMMAND" in head[0]
            assert len(head[0]) <= width and head[0].rstrip().endswith("]")  # the tag is whole
            assert not any(ln[:8].strip() == str(sleeper.pid) for ln in head)
            await pilot.press("slash", *str(sleeper.pid), "enter")
            await pilot.pause()
            text = _procs_text(app)
            assert "no process matches" not in text
            row = next(ln for ln in text.split("\n")[1:] if ln[:8].strip() == str(sleeper.pid))
            assert "sleep" in row and pwd.getpwuid(os.getuid()).pw_name[:8] in row
        source.close()
    finally:
        sleeper.kill()
        sleeper.wait()


def _read_for(fd: int, seconds: float, until: Callable[[bytes], object] | None = None) -> bytes:
    """What the pty gives within ``seconds``, or less: until it closes, or until ``until(all read so far)``."""
    import select
    import time

    got = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
            if until is not None and until(got):
                break
    return got


def _screen_text(drawn: bytes) -> bytes:
    """What a terminal shows of ``drawn``, roughly: its text without the escape sequences between."""
    import re

    return re.sub(rb"\x1b\[[0-9;?<>=$]*[ -/]*[@-~]|\x1b\][^\x07]*\x07", b"", drawn)


@pytest.fixture(scope="module")
def no_color_pty(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int | None]:
    """`demo healthy` in a real pty with NO_COLOR=1 until its verdict is shown, then the Ctrl-C byte: what it drew
    and its exit status, read by two tests (one start of the dashboard in a terminal for both). Its warm-up and
    hold are short (neither test is about them): the screen goes through collecting, pending and a shown
    verdict within a couple of frames instead of 12 s."""
    config = tmp_path_factory.mktemp("no-color") / "config.toml"
    config.write_text("[diagnosis]\nwarmup_s = 0.5\nhold_s = 0.5\n")
    return _pty_screen({"TERM": "xterm-256color", "NO_COLOR": "1", "GPU_TRIAGE_CONFIG": str(config)},
                       until=lambda drawn: b"steady_high \xc2\xb7 none  GPU 0" in _screen_text(drawn), quit=b"\x03")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="pty semantics of Linux")
def test_in_a_real_terminal_the_mouse_is_left_alone_and_ctrl_c_quits(no_color_pty: tuple[bytes, int | None]) -> None:
    """Mouse tracking off (the terminal's own selection copies a PID without Shift), and the Ctrl-C byte of a
    real pty ends the dashboard with status 0."""
    drawn, status = no_color_pty
    for mode in (b"1000", b"1002", b"1003", b"1006"):
        assert b"\x1b[?" + mode + b"h" not in drawn, f"mouse mode {mode.decode()} turned on"
    assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# -- sizes: nothing cut at 80x24, the process table kept, the graph's shape kept at every width ----------------
import numpy as np  # noqa: E402

from gpu_triage.ui import glyphs  # noqa: E402
from gpu_triage.ui.keys import footer_line  # noqa: E402
from tests.ui_prefill import prefilled, resize_to, sim  # noqa: E402


def _sim_app(scenario: str = "data_pipeline", gpus: int = 8) -> TriageApp:
    """The simulated server (seed 0) on a full window, judged once for every test that starts on it."""
    return prefilled(sim, scenario, gpus, source_label=f"demo: {scenario}")


def test_the_key_line_keeps_help_at_any_width() -> None:
    for mode in ("live", "replay"):
        for width in (60, 80, 120):
            line = footer_line(mode, width)  # type: ignore[arg-type]
            assert len(line) <= width and line.endswith("? help") and line.startswith("q quit"), (mode, width, line)
    assert footer_line("replay") == footer_line("replay", 200)  # room: every key


async def test_replay_at_80x24_shows_help_on_its_key_line() -> None:
    import argparse

    from gpu_triage.data import H200_TRACE_2S
    from gpu_triage.ui.run import build_app

    app = build_app("replay", argparse.Namespace(file=str(H200_TRACE_2S), speed=1.0, record=None), Config())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.query_one("#keys").shown_plain.endswith("? help")


async def test_the_no_gpu_hint_is_whole_at_80_columns() -> None:
    from gpu_triage.sources import live
    from gpu_triage.ui.run import NO_GPU_BANNER

    source = live.LiveSource(nvml_module=fake_nvml.FakeNvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))
    app = TriageApp(Config(), source=source, source_label="live", banner=NO_GPU_BANNER, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.ingest(source.sample())
        await pilot.pause()
        header = app.query_one("#header").shown_plain
        assert " ".join(header.split()).count(" ".join(NO_GPU_BANNER.split())) == 1, header
        assert all(len(ln) <= 80 for ln in header.split("\n"))
    source.close()


def test_the_process_heading_cuts_whole_column_names() -> None:
    from gpu_triage.proc_columns import COMMAND, GPU_COLUMNS

    names = {w for c in GPU_COLUMNS for w in c.name.split()} | {COMMAND}
    for width in (60, 80, 100):
        head = procview.proc_pane(_procs(), width, 4, procview.ProcState(), _details).plain.split("\n")[0]
        cols, tag = head.split(" [")
        assert set(cols.split()) <= names, head  # no "W" left of a cut "WORKERS"
        assert tag.endswith("]") and len(head) <= width


async def test_8_cards_at_80x24_keep_the_process_table() -> None:
    app = _sim_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        procs = app.query_one("#procs")
        lines = procs.shown_plain.split("\n")
        assert procs.display and len(lines) >= 3 and lines[0].startswith("    PID USER")


async def test_8_cards_at_120x40_tab_shows_every_process() -> None:
    app = _sim_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab")
        await pilot.pause()
        rows = [ln for ln in app.query_one("#procs").shown_plain.split("\n") if ln[:8].strip().isdigit()]
        assert len(rows) == 8


@pytest.mark.slow
@pytest.mark.parametrize(("gpus", "sizes"), [(8, [(80, 24), (120, 40), (200, 60)]), (16, [(200, 60)])])
async def test_a_full_window_fills_the_graph(gpus: int, sizes: list[tuple[int, int]]) -> None:
    """No long run of empty columns left of a card's graph once the window is full (at 200x60 ~50 were): the
    ticks a braille dot holds are whole, so the window fills at least three quarters of the graph. One app
    through the sizes."""
    app = _sim_app(gpus=gpus)
    async with app.run_test(size=sizes[0]) as pilot:
        for size in sizes:
            await resize_to(pilot, app, size)
            lines = app.query_one("#gpu").shown_plain.split("\n")
            card = next(ln for ln in lines if ln.startswith("▶ 0"))
            graph = card[4:].split("%")[0].rsplit(" ", 1)[0]  # up to the GPU-Util figure
            assert len(graph) - len(graph.lstrip()) <= len(graph) // 4, (size, card)
        legend = lines[0]
        assert "cell = " in legend and "tick" in legend, legend
        assert len(legend) <= size[0]


@pytest.mark.parametrize("width", [13, 20, 40, 75, 118, 125, 160])
def test_a_sawtooth_keeps_its_shape_at_every_width(width: int) -> None:
    """One busy, one idle tick: binned into a narrow graph it became a flat ~50 % band. Braille (two ticks a
    cell) or a shorter window keeps both the high and the low of every period; where a dot column holds
    several ticks (a long window on a narrow graph) every cell that averages the swing away is shaded."""
    saw = np.array([95.0 if i % 2 else 5.0 for i in range(150)])
    plan = glyphs.wave_plan(150, width)
    text = glyphs.waveform(saw, width, "green", newest=149)
    cells = [ch for ch in text.plain if ch != " "]
    assert len(cells) >= min(150 // plan.per_cell, width - glyphs.SCROLL_STEP)
    if plan.braille and plan.per_dot > 1:
        drawn = [i for i, ch in enumerate(text.plain) if ch != " "]
        shaded = {i for s in text.spans if glyphs.SAWTOOTH_BG in str(s.style) for i in range(s.start, s.end)}
        assert set(drawn) <= shaded, text.plain
    elif plan.braille:
        # left dot column (the older tick) one dot high, right column four: 0x40 | 0xB8
        assert set(cells) == {"⣸"}, cells
    else:
        assert set(cells) <= {"█", "▁"} and "█" in cells and "▁" in cells


def test_a_long_window_on_a_narrow_graph_keeps_minutes_and_says_how_many() -> None:
    """At 80 columns the graph showed 26 s of a 2m20s window (about one period of a 24 s sawtooth): now
    several ticks a braille dot, several minutes, and the title says which part of the window it is."""
    plan = glyphs.wave_plan(150, 36)  # 5 minutes at 2 s on the 80-column card's graph
    assert plan.braille and plan.per_dot >= 2 and plan.ticks * 2.0 >= 180
    assert 3 * plan.ticks >= 2 * plan.window


def test_the_legend_says_what_a_cell_is_and_what_part_of_the_window_is_shown() -> None:
    from gpu_triage.ui.gpu_pane import gpu_pane
    from gpu_triage.ui.panes import Colours

    view = _sim_app("single_card_busy", gpus=2).window.view()  # the tall graphs' server below: judged once
    narrow = gpu_pane(view, 80, 1, Colours()).plain.split("\n")[0]
    assert "ticks (braille)" in narrow and "last " in narrow and "of 5m" in narrow, narrow
    wide = gpu_pane(view, 400, 1, Colours()).plain.split("\n")[0]
    assert "cell = 1 tick" in wide and "last 5m," in wide and " of " not in wide, wide


# -- colours: the terminal's own depth -------------------------------------------------------------------------
@pytest.mark.parametrize(("term", "colorterm", "expected"), [
    ("xterm", "", "standard"), ("xterm-16color", "", "standard"), ("xterm-256color", "", "256"),
    ("xterm-kitty", "", "256"), ("xterm", "truecolor", "truecolor"), ("screen", "24bit", "truecolor"),
])
def test_the_colour_depth_is_the_terminal_s(monkeypatch: pytest.MonkeyPatch, term: str, colorterm: str,
                                            expected: str) -> None:
    from gpu_triage.ui import palette

    monkeypatch.delenv("TEXTUAL_COLOR_SYSTEM", raising=False)
    monkeypatch.setenv("TERM", term)
    monkeypatch.setenv("COLORTERM", colorterm)
    assert palette.color_system() == expected
    monkeypatch.setenv("TEXTUAL_COLOR_SYSTEM", "truecolor")  # asked for: wins
    assert palette.color_system() == "truecolor"


def _pty_screen(env_extra: dict[str, str], until: Callable[[bytes], object],
                quit: bytes = b"q") -> tuple[bytes, int | None]:
    """`gpu-triage --interval 0.5 demo healthy` in a real pty at 120x30: what it drew from its start until
    ``until(what it drew)`` held after its first frame (fails if it never does within 40 s), and until it
    ended on the ``quit`` key, and its exit status (None: it did not end within 20 s of the key)."""
    import pty
    import sys
    import time
    from pathlib import Path

    app_dir = Path(__file__).resolve().parents[1] / "app"
    argv = [sys.executable, "-m", "gpu_triage", "--interval", "0.5", "demo", "healthy"]
    env = {k: v for k, v in os.environ.items() if k not in ("COLORTERM", "NO_COLOR", "TEXTUAL_COLOR_SYSTEM")}
    env.update({"PYTHONPATH": str(app_dir), "COLUMNS": "120", "LINES": "30", **env_extra})
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    status = None
    try:
        drawn = _read_for(fd, 40, until=lambda got: b"SMact" in got)
        assert b"SMact" in drawn, "the dashboard never drew"
        if not until(drawn):
            drawn += _read_for(fd, 40, until=lambda got: until(drawn + got))
        assert until(drawn), "the dashboard never drew what the test reads"
        os.write(fd, quit)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            drawn += _read_for(fd, 0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
    finally:
        os.close(fd)
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    return drawn, status


def _sgr_before(drawn: bytes, text: bytes) -> list[bytes]:
    """The SGR parameters in force where ``text`` is drawn (the last escape before each occurrence)."""
    import re

    out = []
    for m in re.finditer(re.escape(text), drawn):
        codes = re.findall(rb"\x1b\[([0-9;]*)m", drawn[max(0, m.start() - 80) : m.start()])
        if codes:
            out.append(codes[-1])
    return out


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="pty semantics of Linux")
def test_under_term_xterm_the_power_cap_is_yellow_not_bright_red() -> None:
    import re

    capped = re.compile(rb" 6[0-9][0-9]W")  # a healthy busy card's watts at its power cap: in the first frame
    drawn, _ = _pty_screen({"TERM": "xterm"}, until=capped.search)
    # a healthy busy card sits at its power cap: its watts (6xxW) are drawn in the terminal's yellow
    styles = [s for m in sorted({m.group() for m in capped.finditer(drawn)})
              for s in _sgr_before(drawn, m)]
    assert styles, "no capped watts drawn"
    for sgr in styles:
        params = sgr.split(b";")
        assert b"33" in params and b"91" not in params, styles  # the terminal's yellow, as the legend says


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="pty semantics of Linux")
def test_no_color_keeps_weight_and_drops_every_colour(no_color_pty: tuple[bytes, int | None]) -> None:
    import re

    drawn, _ = no_color_pty
    params = {p for sgr in re.findall(rb"\x1b\[([0-9;]*)m", drawn) for p in sgr.split(b";")}
    assert b"1" in params  # bold survives (the busiest cores, the verdict's headline)
    colours = {p for p in params if re.fullmatch(rb"3[0-7]|9[0-7]|4[0-7]|10[0-7]|38|48", p)}
    assert not colours, colours


# -- the card detail: round ticks, the right units, one unit an axis, whole titles, no claim the clock denies ---
from gpu_triage.ui import formatters  # noqa: E402
from tests.waits import wait_for  # noqa: E402


def test_round_ticks_and_a_rate_unit_that_reads() -> None:
    assert formatters.nice_ticks(0, 100, 5) == [0, 25, 50, 75, 100]
    assert formatters.nice_ticks(1590, 1980, 5) == [1600, 1700, 1800, 1900]
    assert formatters.rate_unit(69611.3 * (1 << 20)) == (1 << 30, "GiB/s")
    assert formatters.rate_unit(300e6)[1] == "MiB/s" and formatters.rate_unit(5e3)[1] == "KiB/s"


def test_a_clock_that_swings_without_a_reason_is_not_called_never_slowed() -> None:
    masks = np.zeros(10)
    assert "never" not in formatters.slowdown_note(masks, np.linspace(1590, 1980, 10))
    assert formatters.slowdown_note(masks, np.linspace(1590, 1980, 10)) == (
        " · no slowdown reason reported, clock 1590–1980 MHz")
    assert formatters.slowdown_note(masks, np.full(10, 1980.0)) == " · no slowdown reason in the window"


def _chart(app: TriageApp, name: str) -> list[str]:
    return str(app.screen.query_one(f"#p_{name}").render()).split("\n")


def _y_labels(lines: list[str], side: str = "left") -> list[str]:
    import re

    out = []
    for ln in lines:
        m = re.match(r"^\s*([0-9.]+)┤", ln) if side == "left" else re.search(r"├([0-9.]+°C)\s*$", ln)
        if m:
            out.append(m.group(1))
    return out


@pytest.mark.slow
async def test_the_card_detail_charts() -> None:
    """At 80x24, 120x40 and 200x60: one app, its detail open through the sizes."""
    app = _sim_app("data_pipeline", gpus=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "DetailScreen", "the card's detail")
        for size in ((80, 24), (120, 40), (200, 60)):
            await pilot.resize_terminal(*size)
            half = size[0] // 2  # two charts side by side
            await wait_for(pilot, lambda w=half: app.screen.query_one("#p_util").size.width == w, f"charts at {size}")
            _the_card_detail_charts(app, size)


def _the_card_detail_charts(app: TriageApp, size: tuple[int, int]) -> None:
    util = _chart(app, "util")
    assert set(_y_labels(util)) <= {"0", "25", "50", "75", "100"} and "100" in _y_labels(util)
    link = _chart(app, "link")
    assert "GiB/s" in link[0] and "MiB/s" not in "\n".join(link)  # NVLink at ~17 GiB/s
    assert all(float(v) < 1000 for v in _y_labels(link))
    power = _chart(app, "power")
    assert _y_labels(power, "right") and all(float(v) >= 100 or float(v) == 0 for v in _y_labels(power))
    for name in ("util", "sm", "mem", "link", "power", "clock"):
        title = _chart(app, name)[0].strip()
        assert title and not title.endswith("…"), (name, title)  # a whole form of the title
    clock = _chart(app, "clock")[0]
    assert "never slowed" not in clock
    if size[0] >= 120:
        assert "no slowdown reason reported, clock" in clock


# -- the job pane, small words ---------------------------------------------------------------------------------
def test_one_core_is_one_core() -> None:
    from gpu_triage.diagnosis.engine import diagnose
    from gpu_triage.ui.host_panes import cpu_pane
    from gpu_triage.ui.panes import Colours
    from gpu_triage.window import RollingWindow

    w = RollingWindow(150)
    for i in range(2):
        w.append(make_tick(i, gpus=1, cores=1))
    view = w.view()
    assert cpu_pane(view, 100, 2, Colours()).plain.startswith("CPU 1 core avg")
    verdict = diagnose(view, Config().thresholds, 1)
    assert any("over 1 core" in e for e in verdict.evidence) and not any("1 cores" in e for e in verdict.evidence)


async def test_no_confidence_is_given_on_a_host_without_gpu() -> None:
    from gpu_triage.sources import live

    source = live.LiveSource(nvml_module=fake_nvml.FakeNvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))
    app = TriageApp(Config(), source=source, source_label="live", autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(4):
            app.ingest(source.sample())
        await pilot.pause()
        head = app.query_one("#diag").shown_plain.split("\n")[0]
        assert "confidence" not in head and "no GPU" in head, head
    source.close()


def test_the_net_line_leaves_out_idle_virtual_interfaces() -> None:
    from gpu_triage.model import NetSample
    from gpu_triage.ui.host_panes import net_line
    from gpu_triage.window import RollingWindow

    def view_with(nets: list[NetSample]):  # noqa: ANN202
        w = RollingWindow(10)
        w.append(dataclasses.replace(make_tick(0, gpus=1, cores=2), nets=nets))
        return w.view()

    idle_ifb = [NetSample("eth0", 5e6, 1e6), NetSample("ifb0", 0.0, 0.0), NetSample("ifb1", 0.0, 0.0),
                NetSample("veth12ab", 0.0, 0.0)]
    line = net_line(view_with(idle_ifb), 200)
    assert "eth0" in line and "ifb" not in line and "veth" not in line
    busy_ifb = [NetSample("eth0", 5e6, 1e6), NetSample("ifb0", 3e6, 0.0)]
    assert "ifb0" in net_line(view_with(busy_ifb), 200)  # shaping real traffic: shown


def test_diagnose_of_a_directory_full_of_other_programs_parquet_says_so_once(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpu_triage.cli import main
    from gpu_triage.data import H200_TRACE_2S

    # two of them: with a third, the four files to read (none with stored verdicts) would start worker
    # processes (fleet_history/perfile.py), seconds of start-up for what this test is not about
    for k in range(2):
        (tmp_path / f"other{k}").mkdir()
        pq.write_table(pa.table({"x": [1, 2]}), tmp_path / f"other{k}" / "data.parquet")
    shutil.copy(H200_TRACE_2S, tmp_path / "session.parquet")
    assert main(["diagnose", str(tmp_path)]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "WARNING" in ln]
    assert len(err) == 1 and "2 Parquet files" in err[0] and "not gpu-triage recordings" in err[0], err


# -- panes: hide and reorder, by a key and by the config file ---------------------------------------------------
def _body_order(app: TriageApp) -> list[str]:
    return [w.id for w in app.query_one("#body").children if w.display]


@pytest.mark.slow
async def test_o_hides_and_reorders_panes() -> None:
    app = _sim_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert _body_order(app)[:3] == ["header", "gpu", "diag"]
        before = len(app.query_one("#procs").shown_plain.split("\n"))
        await pilot.press("o")
        await pilot.pause()
        assert type(app.screen).__name__ == "PanesScreen"
        # hide the verdict (third: gpu, job, diag), move the process table up to the top
        await pilot.press("down", "down", "space", "end")
        await pilot.press("down", "down", "down", "u", "u", "u", "u", "u", "enter")
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen"
        assert app.pane_order == ["procs", "gpu", "job", "cpu", "disk"]
        shown = _body_order(app)
        assert shown[:2] == ["header", "procs"] and "diag" not in shown
        assert len(app.query_one("#procs").shown_plain.split("\n")) >= before  # the verdict's lines went to others
        await pilot.press("o", "escape")  # Esc: nothing changes
        await pilot.pause()
        assert app.pane_order == ["procs", "gpu", "job", "cpu", "disk"]


async def test_the_config_file_sets_the_panes(tmp_path) -> None:
    from gpu_triage.config import load_config

    path = tmp_path / "config.toml"
    path.write_text('[ui]\npanes = ["diag", "gpu", "procs"]\n')
    config = load_config(str(path))
    assert config.panes == ("diag", "gpu", "procs")
    app = prefilled(sim, "data_pipeline", 8, config=config, source_label="demo")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert _body_order(app) == ["header", "diag", "gpu", "procs"]


@pytest.mark.parametrize(("value", "words"), [
    ('["gpu", "graphs"]', "'graphs' is not a pane"), ("[]", "non-empty list"), ('"gpu"', "non-empty list"),
    ('["gpu", "gpu"]', "names a pane twice"),
])
def test_a_bad_panes_entry_is_one_clear_line(tmp_path, value: str, words: str) -> None:
    from gpu_triage.config import load_config
    from gpu_triage.errors import UserError

    path = tmp_path / "config.toml"
    path.write_text(f"[ui]\npanes = {value}\n")
    with pytest.raises(UserError) as err:
        load_config(str(path))
    assert "ui.panes" in str(err.value) and words in str(err.value)


@pytest.mark.parametrize(("size", "per_column"),
                         [((200, 60), "column = 1 tick, last "), ((120, 40), "column = mean of ")])
@pytest.mark.slow
async def test_tall_graphs_fill_their_width_and_say_what_a_column_is(size: tuple[int, int], per_column: str) -> None:
    """Two cards draw tall graphs: at 200x60 two ticks a column left ~40 columns empty left of them."""
    app = _sim_app("single_card_busy", gpus=2)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        lines = app.query_one("#gpu").shown_plain.split("\n")
        assert per_column in lines[0] and len(lines[0]) <= size[0], lines[0]
        if size[0] == 200:
            graph = lines[1].split("┤", 1)[1]
            assert not graph.startswith(" "), lines[1]
