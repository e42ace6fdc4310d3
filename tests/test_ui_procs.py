"""Issue #13: the process table as htop and nvitop users expect it: focus and scroll, sort, filter, workers
as a tree, user and command line of the selection, and signals with a confirmation that names the process."""

from __future__ import annotations

import dataclasses
import signal

import pytest

from gpu_triage.config import Config
from gpu_triage.model import ProcSample
from gpu_triage.proc_control import ProcControl, ProcDetails
from gpu_triage.ui import procview
from gpu_triage.ui.app import TriageApp
from tests.test_proc_control import FakeKill, FakePsutil
from tests.ui_ticks import TickListSource, make_tick

USERS = {1000 + k: ("alice" if k % 2 == 0 else "bob", ["python", f"train_{k}.py", "--rank", str(k)]) for k in range(12)}
USERS[200] = ("root", ["python", "someone_elses.py"])  # FakeKill: PermissionError for pid 200


def _procs() -> list[ProcSample]:
    out = [
        ProcSample(
            pid=1000 + k,
            gpu_index=k % 8,
            name="python" if k != 5 else "trainer",
            gpu_mem_bytes=(10 + (k * 7) % 12) << 30,
            cpu_pct=float((k * 37) % 100),
            workers=2,
            workers_cpu_pct=[50.0, 40.0],
            worker_pids=[3000 + 2 * k, 3001 + 2 * k],
        )
        for k in range(12)
    ]
    out.append(ProcSample(pid=200, gpu_index=7, name="python", gpu_mem_bytes=1 << 30, cpu_pct=1.0, workers=0))
    return out


def _details(pid: int) -> ProcDetails | None:
    if pid not in USERS:
        return None
    user, argv = USERS[pid]
    return ProcDetails(pid, user, " ".join(argv))


def test_sort_by_gpu_memory_and_by_cpu() -> None:
    procs = _procs()
    state = procview.ProcState(sort="GPU memory")
    mem = [r.proc.gpu_mem_bytes or 0 for r in procview.rows(procs, state, _details)]
    assert mem == sorted(mem, reverse=True)
    state.sort = "CPU"
    cpu = [r.proc.cpu_pct or 0 for r in procview.rows(procs, state, _details)]
    assert cpu == sorted(cpu, reverse=True)


def test_sort_by_sm_puts_the_process_keeping_a_shared_card_busy_first() -> None:
    """Every rank on cuda:0: the SM share says which one works. Without a driver sample (shared or alone
    on its card) it is n/a, never 0."""
    procs = [
        ProcSample(pid=11, gpu_index=0, name="rank1", sm_pct=2.0),
        ProcSample(pid=10, gpu_index=0, name="rank0", sm_pct=91.0),
        ProcSample(pid=12, gpu_index=0, name="rank2"),
        ProcSample(pid=20, gpu_index=1, name="alone"),
    ]
    state = procview.ProcState(sort="GPU%")
    assert [r.pid for r in procview.rows(procs, state, _details)] == [10, 11, 12, 20]
    lines = procview.proc_pane(procs, 100, 6, state, _details).plain.split("\n")
    assert "GPU%" in lines[0] and "by GPU%" in lines[0] and "SM" not in lines[0]  # not the card's SM activity
    sm_column = lines[0].index("GPU%") + 1
    cells = {int(ln[:8]): ln[sm_column - 1 : sm_column + 3].strip() for ln in lines[1:]}
    assert cells == {10: "91%", 11: "2%", 12: "n/a", 20: "n/a"}
    assert procview.SORTS.index("GPU%") == procview.SORTS.index("GPU memory") + 1  # `s`: card, memory, GPU%, CPU, user


def test_filter_by_name_user_or_command() -> None:
    procs = _procs()
    assert [r.pid for r in procview.rows(procs, procview.ProcState(filter="trainer"), _details)] == [1005]
    bobs = {r.pid for r in procview.rows(procs, procview.ProcState(filter="BOB"), _details)}
    assert bobs == {1001, 1003, 1005, 1007, 1009, 1011}
    assert [r.pid for r in procview.rows(procs, procview.ProcState(filter="train_7"), _details)] == [1007]


def test_workers_as_a_tree_under_their_trainer() -> None:
    table = procview.rows(_procs()[:2], procview.ProcState(tree=True), _details)
    assert [r.pid for r in table] == [1000, 3000, 3001, 1001, 3002, 3003]
    text = procview.proc_pane(_procs()[:1], 100, 6, procview.ProcState(tree=True), _details).plain
    assert "├ DataLoader wkr" in text and "└ DataLoader wkr" in text


def test_the_focused_table_scrolls_with_its_selection_and_shows_user_and_command() -> None:
    procs = _procs()
    state = procview.ProcState(focused=True)
    table = procview.rows(procs, state, _details)
    procview.move(state, table, "end", 4)
    text = procview.proc_pane(procs, 100, 6, state, _details).plain.split("\n")
    assert len(text) == 6
    assert text[-2].strip().startswith(str(table[-1].pid))  # the last row is on screen, selected
    last = table[-1].pid  # card order: card 7's processes come last
    assert text[-1] == f"PID {last} · user {USERS[last][0]} · {' '.join(USERS[last][1])}"
    assert f"{len(table)}/{len(table)}" in text[0]
    procview.move(state, table, "home", 4)
    text = procview.proc_pane(procs, 100, 6, state, _details).plain.split("\n")
    assert text[1].strip().startswith(str(table[0].pid))


def _app(control: ProcControl | None) -> TriageApp:
    prefill = [dataclasses.replace(make_tick(i, gpus=8, cores=8), procs=_procs()) for i in range(5)]
    app = TriageApp(Config(), source=TickListSource(8, 8), source_label="test", prefill=prefill, autostart=False)
    app.procs.control = control
    return app


def _control(kill: FakeKill) -> ProcControl:
    ps = FakePsutil(USERS)
    return ProcControl(ps, kill, own_pid=1, start_time=ps.start_time)


def _procs_text(app: TriageApp) -> str:
    return app.query_one("#procs").shown_plain


@pytest.mark.slow
async def test_tab_j_end_sort_and_filter_from_the_keyboard() -> None:
    app = _app(_control(FakeKill()))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab")
        await pilot.pause()
        assert app.procs.state.focused and "PID 1000 · user alice · python train_0.py --rank 0" in _procs_text(app)
        await pilot.press("down", "j")
        await pilot.pause()
        assert app.selected == 0  # ↑↓ move in the table while it has the focus, not across cards
        assert "PID 1001 · user bob" in _procs_text(app)  # two down in card order: 1000, 1008, 1001
        await pilot.press("end")
        await pilot.pause()
        assert "PID 1007 · user bob" in _procs_text(app)  # the last in card order (card 7: 200, 1007)
        await pilot.press("s")
        await pilot.pause()
        assert "GPU memory ↓" in _procs_text(app).split("\n")[0]  # 120 columns: the short form, "[GPU memory ↓ 11/13]"
        await pilot.press("slash")
        await pilot.pause()
        await pilot.press("b", "o", "b", "enter")
        await pilot.pause()
        assert app.procs.state.filter == "bob"
        rows = [ln for ln in _procs_text(app).split("\n")[1:] if ln[:8].strip().isdigit()]
        assert rows and all(int(ln[:8]) in {1001, 1003, 1005, 1007, 1009, 1011} for ln in rows)
        await pilot.press("tab")
        await pilot.pause()
        await pilot.press("down")
        assert not app.procs.state.focused and app.selected == 1  # back to the cards


@pytest.mark.slow
async def test_x_asks_naming_the_process_then_sends_sigterm() -> None:
    kill = FakeKill()
    app = _app(_control(kill))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab", "x")
        await pilot.pause()
        assert type(app.screen).__name__ == "SignalScreen"
        assert "PID 1000 · user alice · python train_0.py" in str(app.screen.query_one("#signal").render())
        assert kill.sent == [(1000, 0)]  # asking sends nothing
        await pilot.press("t")
        await pilot.pause()
        assert kill.sent[-1] == (1000, signal.SIGTERM)
        await pilot.press("x", "escape")
        await pilot.pause()
        assert kill.sent[-1] == (1000, 0)  # Esc: nothing sent


async def test_x_refuses_a_process_we_may_not_signal_and_says_why() -> None:
    kill = FakeKill()
    app = _app(_control(kill))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab", "end", "k", "x")  # 200, just before the last
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen"  # no confirmation: it could not be sent anyway
        assert any("may not signal PID 200" in str(n.message) and "root" in str(n.message) for n in app._notifications)
        assert all(sig == 0 for _, sig in kill.sent)


async def test_simulated_or_recorded_processes_are_never_signalled() -> None:
    app = _app(None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab", "x")
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen"
        assert any("not processes of this machine" in str(n.message) for n in app._notifications)
        assert "not this machine's" in _procs_text(app)


async def test_host_only_mode_shows_the_busiest_processes() -> None:
    from gpu_triage.sources.procs import NO_CARD

    class HostOnly(TickListSource):
        def busiest_processes(self) -> list[ProcSample]:
            return [ProcSample(pid=7, gpu_index=NO_CARD, name="tar", cpu_pct=12.0),
                    ProcSample(pid=5, gpu_index=NO_CARD, name="ffmpeg", cpu_pct=97.0)]

    source = HostOnly(0, 4, gpu_available=False)
    prefill = [dataclasses.replace(make_tick(i, gpus=0, cores=4), procs=[]) for i in range(3)]
    app = TriageApp(Config(), source=source, source_label="live", prefill=prefill, autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        lines = _procs_text(app).split("\n")
        assert "no GPU: host processes · by CPU ↓" in lines[0]
        assert [ln.split()[-1] for ln in lines[1:3]] == ["ffmpeg", "tar"]  # busiest first (COMMAND: the name)


def test_detail_line_says_whose_job_the_process_and_its_workers_are() -> None:
    owned = dataclasses.replace(
        _procs()[0],
        slurm_job="4242",
        pod_uid="0e886e9a-3879-45f9-b44d-86ef9df03224",
        pod_name="train-0",
        pod_namespace="ml",
        container="containerd://244a65edefdffe31685c42317c9054e71dc1193048cf9459e2a4dd35cbc1dba4",
        user="alice",
    )
    line = procview.detail_line(procview.Row(owned.pid, owned), _details, True)
    owner = "slurm job 4242 · pod ml/train-0 · containerd 244a65edefdf"
    assert line == f"PID 1000 · user alice · {owner} · python train_0.py --rank 0"
    worker = procview.detail_line(procview.Row(3000, owned), _details, True)
    assert "slurm job 4242" in worker  # a DataLoader worker is in its trainer's job
    # a recording: the recorded owner is shown, an unprintable one from a foreign file is not
    recorded = procview.detail_line(procview.Row(owned.pid, owned), _details, False)
    assert "user alice · slurm job 4242" in recorded
    hostile = dataclasses.replace(owned, slurm_job="\x1b]0;pwned\x07", pod_name=None, container=None)
    text = procview.detail_line(procview.Row(hostile.pid, hostile), _details, False)
    assert "\x1b" not in text and "pod uid 0e886e9a" in text
    # nothing known: the line reads as before
    plain = procview.detail_line(procview.Row(1002, _procs()[2]), _details, True)
    assert plain == "PID 1002 · user alice · python train_2.py --rank 2"
