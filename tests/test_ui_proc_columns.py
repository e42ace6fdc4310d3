"""The process table triages a shared box: COMMAND (the command line, cleaned and shortened), USER and OWNER
(the Slurm job, pod or container), host RSS and run TIME, at 80, 120 and 200 columns, columns dropped whole by
rank at narrow widths."""

from __future__ import annotations

import dataclasses
import re
import time
from types import SimpleNamespace

import pytest

from gpu_triage import proc_columns
from gpu_triage.config import Config
from gpu_triage.model import ProcSample
from gpu_triage.proc_control import ProcControl
from gpu_triage.ui import app_procs, procview
from gpu_triage.ui.app import TriageApp
from tests.test_proc_control import FakeKill, FakePsutil
from tests.ui_ticks import TickListSource, make_tick
from tests.waits import wait_for

HOSTILE = "\x1b]0;pwned\x07\x1b[2J"
ARGV = {
    1000: ("alice", ["/opt/conda/bin/python3", "/home/alice/run/train.py", "--lr", "3e-4", "--epochs", "90"]),
    1001: ("bob", ["/usr/bin/python3.11", "-m", "torch.distributed.run", "--nproc-per-node", "8", "pretrain.py"]),
    1002: ("carol", ["/usr/bin/python3", f"evil{HOSTILE}.py", "訓練" * 30, "x" * 5000]),
}
OWNERS = {1000: {"slurm_job": "4242", "user": "alice"}, 1001: {"pod_uid": "0e88", "pod_name": "train-0",
                                                               "pod_namespace": "ml", "user": "bob"},
          1002: {"user": "carol"}}
GIB = 1 << 30


def _procs() -> list[ProcSample]:
    return [ProcSample(pid=pid, gpu_index=k, name="python3", gpu_mem_bytes=(20 + k) * GIB, cpu_pct=99.0, sm_pct=60.0,
                       workers=2, workers_cpu_pct=[50.0, 40.0], worker_pids=[2000 + 2 * k, 2001 + 2 * k],
                       **OWNERS[pid])  # type: ignore[arg-type]
            for k, pid in enumerate(sorted(ARGV))]


def _control(created: float) -> ProcControl:
    ps = FakePsutil(ARGV)
    ps.created = {pid: created for pid in ARGV}
    ps.rss = {1000: int(1.5 * GIB), 1001: 700 << 20, 1002: 3 * GIB}
    return ProcControl(ps, FakeKill(), own_pid=1, start_time=ps.start_time)


def _app(control: ProcControl | None, procs: list[ProcSample]) -> TriageApp:
    prefill = [dataclasses.replace(make_tick(i, gpus=8, cores=8), procs=procs) for i in range(5)]
    app = TriageApp(Config(), source=TickListSource(8, 8), source_label="test", prefill=prefill, autostart=False)
    app.procs.control = control
    return app


def _table(app: TriageApp) -> tuple[str, dict[int, str]]:
    lines = app.query_one("#procs").shown_plain.split("\n")
    return lines[0], {int(ln.split()[0]): ln for ln in lines[1:] if ln.split() and ln.split()[0].isdigit()}


def _cell(head: str, row: str, name: str) -> str:
    """The value under a heading: a right-aligned column ends where its heading ends, a left one starts there."""
    col = next(c for c in proc_columns.GPU_COLUMNS if c.name == name)
    at = head.index(name)
    return (row[at : at + col.width] if col.left else row[at + len(name) - col.width : at + len(name)]).strip()


WIDE = ["PID", "USER", "OWNER", "GPU", "GPU MEM", "GPU%", "CPU%", "RSS", "TIME", "WORKERS", "WORKERS' CPU%"]


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 120, 200])
async def test_live_table_shows_command_owner_rss_and_time(width: int) -> None:
    app = _app(_control(time.time() - 3723), _procs())
    async with app.run_test(size=(width, 40)) as pilot:
        await pilot.pause()
        head, rows = _table(app)
    names = [n for n in WIDE if n in head]
    assert "COMMAND" in head and names[:2] == ["PID", "USER"]
    if width >= 120:
        assert names == WIDE
    else:  # 80: a shared box (three owners) keeps OWNER before the workers' figures
        assert {"GPU", "GPU MEM", "CPU%", "OWNER"} <= set(names) and "WORKERS' CPU%" not in names
    alice, bob = rows[1000], rows[1001]
    assert "python3 train.py --lr" in alice and "/opt/conda" not in alice  # not just "python3"
    assert "python3.11 -m torch.dist" in bob
    assert _cell(head, alice, "USER") == "alice"
    assert _cell(head, alice, "OWNER") == "job 4242" and _cell(head, bob, "OWNER") == "pod ml/train-0"
    assert _cell(head, rows[1002], "OWNER") == "-"  # read, and in no job
    if "RSS" in names:
        assert [_cell(head, rows[p], "RSS") for p in (1000, 1001, 1002)] == ["1.5G", "700M", "3.0G"]
    if "TIME" in names:
        assert re.fullmatch(r"1:0[2-9]:\d\d", _cell(head, alice, "TIME"))  # 1:02:03 when it was read
    for name in names:  # a heading never stands without its values, nor values without their heading
        assert all(_cell(head, row, name) for row in rows.values()), name


async def test_a_paused_table_keeps_the_run_times_of_its_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paused, a resize lays the table out again: its run times stay those of the frozen tick, not the clock's."""
    now = [time.time()]
    monkeypatch.setattr(app_procs, "time", SimpleNamespace(time=lambda: now[0]))  # the wall clock: outside
    app = _app(_control(now[0] - 3723), _procs())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("p")
        head, rows = _table(app)
        assert _cell(head, rows[1000], "TIME") == "1:02:03"
        now[0] += 3600  # an hour later
        await pilot.resize_terminal(160, 40)
        # carol's 5,000-character command line is cut at the edge: it shows more of it at 160 columns
        await wait_for(pilot, lambda: _table(app)[1][1002] != rows[1002], "the table laid out for 160 columns")
        head, rows = _table(app)
        assert _cell(head, rows[1000], "TIME") == "1:02:03"
        await pilot.press("p")
        app.ingest(make_tick(5, gpus=8, cores=8))
        await pilot.pause()
        head, rows = _table(app)
        assert _cell(head, rows[1000], "TIME") == "2:02:03"


@pytest.mark.slow
async def test_a_hostile_command_line_stays_in_its_column() -> None:
    """Escape sequences drawn as pictures, a wide script and a 5,000-character argument cut at the edge: the
    columns before COMMAND stay where their headings are."""
    app = _app(_control(time.time() - 60), _procs())
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        head, rows = _table(app)
        screen = app.query_one("#procs").shown_plain
    evil = rows[1002]
    assert "\x1b" not in screen and "\x07" not in screen and "␛]0;pwned␇" in evil
    assert evil.startswith(rows[1000][: head.index("COMMAND")].replace("1000", "1002")[:7])
    assert _cell(head, evil, "USER") == "carol" and _cell(head, evil, "RSS") == "3.0G"
    assert proc_columns.cells(evil) <= 120 and evil.rstrip().endswith("…")


def test_replay_shows_what_the_recording_holds() -> None:
    """Not this machine's processes: the recorded name under COMMAND, the recorded owner; RSS and TIME are
    not recorded, so n/a (never this machine's figures for a pid that is someone else here)."""
    procs = _procs()
    control = _control(time.time() - 3723)
    here = procview.Local(control.rss, time.time())
    lines = procview.proc_pane(procs, 200, 6, procview.ProcState(), control.details, local=False,
                               here=here).plain.split("\n")
    head, rows = lines[0], {int(ln.split()[0]): ln for ln in lines[1:]}
    for pid, row in rows.items():
        assert _cell(head, row, "RSS") == "n/a" and _cell(head, row, "TIME") == "n/a"
        assert row.rstrip().endswith("python3") and _cell(head, row, "USER") == OWNERS[pid]["user"]
    assert _cell(head, rows[1000], "OWNER") == "job 4242"
    old = [dataclasses.replace(p, user=None, slurm_job=None, pod_uid=None, pod_name=None, pod_namespace=None)
           for p in procs]  # a recording made before owners were read
    lines = procview.proc_pane(old, 200, 6, procview.ProcState(), control.details, local=False).plain.split("\n")
    assert all(_cell(lines[0], ln, "OWNER") == "n/a" for ln in lines[1:])


def test_workers_cpu_heading_and_values_go_together() -> None:
    """At every width "WORKERS' CPU%" and its values ("50 40 %") are shown together or not at all."""
    from tests.test_ui_procs import _details
    from tests.test_ui_procs import _procs as many

    for width in range(60, 201, 10):
        lines = procview.proc_pane(many(), width, 6, procview.ProcState(), _details).plain.split("\n")
        shown = "WORKERS' CPU%" in lines[0]
        assert all(("50 40 %" in ln) == shown for ln in lines[1:] if ln.split()[0].isdigit()), (width, lines)
        assert all(len(ln) <= width for ln in lines)


def test_short_command_and_elapsed() -> None:
    short = proc_columns.short_command
    assert short(["/usr/bin/python3", "/a/b/train.py", "--lr", "0.1"]) == "python3 train.py --lr 0.1"
    assert short(["torchrun", "--nproc-per-node=8", "/x/y.py"]) == "torchrun --nproc-per-node=8 /x/y.py"
    assert proc_columns.short_command(["python", "a b.py", "x\ny"]) == "python a b.py x␊y"
    assert proc_columns.short_command([]) is None
    assert [proc_columns.elapsed(s) for s in (None, 7, 247, 11047, 360000 + 3 * 3600)] == [
        "n/a", "0:07", "4:07", "3:04:07", "4d 07h"]


def test_workers_not_counted_read_n_a_in_both_workers_columns() -> None:
    """Workers not counted (a recording without them) are n/a in WORKERS and WORKERS' CPU% alike; "-" says they
    were counted and there are none."""
    unknown = proc_columns.values(ProcSample(7, 0, workers=None), "u", None, None)
    none = proc_columns.values(ProcSample(7, 0, workers=0), "u", None, None)
    assert unknown["WORKERS"] == unknown[proc_columns.WORKERS_CPU] == "n/a"
    assert none["WORKERS"] == "0" and none[proc_columns.WORKERS_CPU] == "-"


async def test_host_memory_is_read_once_a_tick_not_at_every_frame() -> None:
    """RSS is asked of psutil once per process and tick: moving the selection redraws the table, not the reads."""
    control = _control(time.time() - 60)
    ps = control._psutil
    reads: list[int] = []
    process = ps.Process

    def counting(pid: int) -> object:
        p = process(pid)
        memory_info = p.memory_info

        def counted() -> object:
            reads.append(pid)
            return memory_info()

        p.memory_info = counted
        return p

    ps.Process = counting
    app = _app(control, _procs())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        first = len(reads)
        await pilot.press("tab")
        for key in ("j", "j", "k", "j"):
            await pilot.press(key)
        await pilot.pause()
    assert 0 < first == len(reads) <= len(ARGV)
