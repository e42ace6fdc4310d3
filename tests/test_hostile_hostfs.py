"""What root runs and what it opens on a shared server (issue 35, defects 1-5), each as the hostile pass did it:
a py-spy planted where an empty PATH entry or another user's directory leads, a log file planted as a link,
a py-spy that floods its output, a recording crafted to expand, and a FIFO swapped in under a recording's name.

Nothing of ours is faked: the planted py-spy is a real executable script run as a subprocess, the recordings
are real Parquet files written with pyarrow, the FIFO a real one and the swap a real renameat2.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from gpu_triage.sources.inside import InsideSampler
from gpu_triage.sources.stacks import ACCESS_PROBLEMS, StackReader, find_pyspy

# -- 1. the py-spy root runs ---------------------------------------------------------------------------------


def _plant_pyspy(folder: Path, proof: Path) -> Path:
    """A py-spy another user left: it proves it ran by writing ``proof`` (as whoever ran it)."""
    fake = folder / "py-spy"
    fake.write_text(f"#!/bin/sh\necho ran > {proof}\necho '[]'\n")
    fake.chmod(0o755)
    return fake


@pytest.fixture
def no_pyspy_beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This interpreter as if installed without the stacks extra (no py-spy beside it), PATH searched alone."""
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    monkeypatch.setattr(sys, "executable", str(bare / "python"))
    monkeypatch.delenv("GPU_TRIAGE_PYSPY", raising=False)
    return bare


def test_an_empty_path_entry_never_runs_the_py_spy_of_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pyspy_beside: Path) -> None:
    """``PATH=/usr/bin:`` (a hand-made sudo or cron environment): the empty entry is the current directory,
    here one anybody may write to, holding a py-spy another user planted. Root standing there ran it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    proof = tmp_path / "proof"
    _plant_pyspy(shared, proof)
    monkeypatch.chdir(shared)
    monkeypatch.setenv("PATH", f"{no_pyspy_beside}:")
    reader = StackReader()
    dump = reader.dump(os.getpid())
    assert not proof.exists(), "the planted py-spy ran"
    assert reader.pyspy is None and dump.error == "no_pyspy" and reader.refused is None
    assert find_pyspy() is None


@pytest.mark.parametrize("where", ["PATH", "GPU_TRIAGE_PYSPY"])
def test_a_py_spy_in_a_directory_others_can_write_is_refused_naming_it_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pyspy_beside: Path, caplog: pytest.LogCaptureFixture,
        where: str) -> None:
    shared = tmp_path / "opt-shared-bin"
    shared.mkdir()
    shared.chmod(0o777)  # a group-writable tools directory, or a 0777 one
    proof = tmp_path / "proof"
    fake = _plant_pyspy(shared, proof)
    if where == "PATH":
        monkeypatch.setenv("PATH", f"{shared}:/usr/bin")
    else:
        monkeypatch.setenv("GPU_TRIAGE_PYSPY", str(fake))
    clock = [0.0]
    sampler = InsideSampler(clock=lambda: clock[0])
    sampler.want([(os.getpid(), [])])
    for _ in range(3):  # three rounds, each due
        clock[0] += 10.0
        sampler.step()
    assert not proof.exists(), "the py-spy others could replace ran"
    refusals = [r.getMessage() for r in caplog.records if str(fake) in r.getMessage()]
    assert len(refusals) == 1, refusals  # one line, once, naming the path
    assert "writable by group or others" in refusals[0] and "\n" not in refusals[0]
    notice = sampler.notice()
    assert notice is not None and notice.startswith("no stacks: ") and str(fake) in notice
    report = sampler.reports()[os.getpid()]
    assert report.error == "pyspy_refused" and report.sentence() == "no stacks: pyspy_refused"
    assert "not run" in ACCESS_PROBLEMS["pyspy_refused"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a file owned by another uid is made with chown")
def test_a_py_spy_another_user_owns_is_refused_even_in_roots_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pyspy_beside: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    folder.chmod(0o755)
    proof = tmp_path / "proof"
    fake = _plant_pyspy(folder, proof)
    os.chown(fake, 65534, 65534)  # nobody's: that user may rewrite it at any time
    monkeypatch.setenv("PATH", str(folder))
    reader = StackReader()
    assert reader.dump(os.getpid()).error == "pyspy_refused" and not proof.exists()
    assert reader.refused is not None and "belongs to uid 65534" in reader.refused


def test_a_relative_gpu_triage_pyspy_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                no_pyspy_beside: Path) -> None:
    proof = tmp_path / "proof"
    _plant_pyspy(tmp_path, proof)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPU_TRIAGE_PYSPY", "py-spy")
    reader = StackReader()
    assert reader.dump(os.getpid()).error == "pyspy_refused" and not proof.exists()
    assert reader.refused is not None and "relative path" in reader.refused


def test_a_py_spy_only_root_can_write_is_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   no_pyspy_beside: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    folder.chmod(0o755)
    proof = tmp_path / "proof"
    fake = _plant_pyspy(folder, proof)
    monkeypatch.setenv("PATH", f"/nonexistent:{folder}")
    reader = StackReader()  # pytest's directory is under /tmp: sticky, so others cannot replace what is ours
    assert reader.pyspy == str(fake.resolve())
    assert reader.dump(os.getpid()).error is None and proof.read_text().strip() == "ran"


# -- 3. py-spy's output, read with a cap, and a round with a time box -----------------------------------------

FLOODER = """\
import sys, time
name = "f" * 4000
frame = '{"name": "%s", "filename": "%s.py", "line": 1},' % (name, name)
out = sys.stdout.buffer
out.write(b'[{"os_thread_id": 1, "frames": [')
for _ in range(41 * 401):  # the hostile pass: 41 threads of 401 frames named with 4,000 characters, 65 MB
    out.write(frame.encode())
out.flush()
time.sleep(60)
"""

DRIPPER = """\
import sys, time
for _ in range(600):  # a byte every 0.1 s: never done, never silent
    sys.stdout.write("[")
    sys.stdout.flush()
    time.sleep(0.1)
"""

ROUND = """\
import json, resource, sys, time
from gpu_triage.sources import inside
from gpu_triage.sources.inside import InsideSampler
from gpu_triage.sources.stacks import StackReader
fake, round_s, pids = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]
if round_s:
    inside.ROUND_S = float(round_s)
reader = StackReader(fake)
sampler = InsideSampler(reader)
sampler.want([(p, []) for p in pids])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.monotonic()
sampler.step()
took = time.monotonic() - t0
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before, "took_s": took, "bytes_read": getattr(reader, "bytes_read", None),
                  "errors": sorted({r.error or "" for r in sampler.reports().values()})}))
"""


def _round(tmp_path: Path, script: str, n: int, round_s: float | None = None) -> dict:
    """One round of the inside sampler over ``n`` real processes, with ``script`` as py-spy, in a process of its
    own (its peak RSS is then this round's); ``round_s`` replaces the round's time box (inside.ROUND_S)."""
    import json
    import subprocess

    fake = tmp_path / "py-spy"
    fake.write_text(f"#!{sys.executable} -IS\n{script}")  # -IS: no site, a plain fake py-spy starts quicker
    fake.chmod(0o755)
    jobs = [subprocess.Popen(["sleep", "120"]) for _ in range(n)]
    try:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "app")}
        done = subprocess.run([sys.executable, "-c", ROUND, str(fake), "" if round_s is None else str(round_s),
                               *(str(j.pid) for j in jobs)], env=env,
                              capture_output=True, text=True, timeout=120, check=True)
    finally:
        for j in jobs:
            j.kill()
            j.wait()
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_py_spy_that_floods_is_stopped_at_the_cap_and_memory_stays_bounded(tmp_path: Path) -> None:
    """41 threads x 401 frames of 4,000-character names: 2.3 GB of RSS per snapshot when the output was buffered
    whole. Read as it comes, py-spy is stopped once 4 MiB are in."""
    from gpu_triage.sources.stacks import MAX_OUTPUT

    got = _round(tmp_path, FLOODER, 4)
    assert got["grew_kib"] < 48 * 1024, got  # one dump's 4 MiB at most, not 65 MB a dump (223 MB for the round)
    assert got["errors"] == ["too_big"], got
    assert got["bytes_read"] <= 4 * (MAX_OUTPUT + (64 << 10)), got


@pytest.mark.slow
def test_a_round_of_py_spys_that_never_finish_is_time_boxed_as_a_whole(tmp_path: Path) -> None:
    """16 processes whose py-spy each drips output until its own deadline: 48 s for one round (minutes for a
    snapshot) when only each dump had a deadline. The round has one: 1 s here, the first dump's own deadline
    being 3 s (stacks.DUMP_TIMEOUT_S), so the round box is what stops it."""
    from gpu_triage.sources.stacks import DUMP_TIMEOUT_S

    got = _round(tmp_path, DRIPPER, 16, round_s=1.0)
    assert got["took_s"] < DUMP_TIMEOUT_S, got  # the round's 1 s and a loaded box's slack, not 3 s per dump
    assert got["errors"] == ["timeout"], got


# -- 2. --log-file ---------------------------------------------------------------------------------------------


def _log_to(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from gpu_triage.cli import main
    from gpu_triage.logs import configure_logging

    try:
        rc = main(["--log-file", str(path), "diagnose", str(path.parent / "missing.parquet")])
    finally:
        configure_logging(None, screen=False)  # the next test's logging as it was
    return rc, capsys.readouterr().err


@pytest.fixture
def shared_and_private(tmp_path: Path) -> tuple[Path, Path]:
    """A directory every user may write to without the sticky bit (a shared group directory, or 0777), where
    /tmp's protected_symlinks does not apply, and a root-only directory beside it."""
    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    shared.chmod(0o777)
    private.mkdir()
    private.chmod(0o700)
    return shared, private


def test_a_log_file_planted_as_a_link_is_refused_not_created_through(
        shared_and_private: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    shared, private = shared_and_private
    (shared / "gpu-triage.log").symlink_to(private / "made-by-root")
    rc, err = _log_to(shared / "gpu-triage.log", capsys)
    assert not (private / "made-by-root").exists(), "root created a file through the planted link"
    assert rc == 2 and err.count("\n") == 1 and "symbolic link" in err and "Traceback" not in err


def test_a_log_file_planted_as_a_link_to_an_existing_file_is_not_appended_to(
        shared_and_private: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    shared, private = shared_and_private
    target = private / "shadow"
    target.write_text("root:*:1:0:99999:7:::\n")
    (shared / "gpu-triage.log").symlink_to(target)
    rc, err = _log_to(shared / "gpu-triage.log", capsys)
    assert target.read_text() == "root:*:1:0:99999:7:::\n" and rc == 2 and "symbolic link" in err


def test_a_log_file_hard_linked_to_another_file_is_refused(
        shared_and_private: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    shared, private = shared_and_private
    target = private / "passwd"
    target.write_text("root:x:0:0::/root:/bin/sh\n")
    os.link(target, shared / "gpu-triage.log")  # where protected_hardlinks is off, any user can make this
    rc, err = _log_to(shared / "gpu-triage.log", capsys)
    assert target.read_text() == "root:x:0:0::/root:/bin/sh\n" and rc == 2 and "hard links" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a file owned by another uid is made with chown")
def test_a_log_file_another_user_owns_is_refused(shared_and_private: tuple[Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shared, _ = shared_and_private
    log = shared / "gpu-triage.log"
    log.write_text("")
    os.chown(log, 65534, 65534)
    rc, err = _log_to(log, capsys)
    assert rc == 2 and "belongs to uid 65534" in err and log.read_text() == ""


def test_a_new_log_file_is_made_readable_by_its_owner_only(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "gpu-triage.log"
    rc, _ = _log_to(log, capsys)
    assert rc == 2 and "missing.parquet" in log.read_text()  # the command's own error, logged
    assert stat.S_IMODE(log.stat().st_mode) & 0o077 == 0
    rc, _ = _log_to(log, capsys)  # appended to, as before
    assert log.read_text().count("missing.parquet") == 2


# -- 5. a FIFO swapped in under a recording's name --------------------------------------------------------------

DATA = Path(__file__).parent / "data"


def _gpu_triage(capsys: pytest.CaptureFixture[str], *args: str, unblock: tuple[Path, ...] = (),
                timeout: float = 60.0) -> tuple[int, str, str]:
    """The CLI in this process, on a thread of its own: a hang is then a failure here after ``timeout``, not a
    test run that never ends (the FIFOs in ``unblock`` are then opened for writing, which frees the thread)."""
    import threading

    from gpu_triage.cli import main

    capsys.readouterr()
    rc: list[int] = []
    runner = threading.Thread(target=lambda: rc.append(main(list(args))), daemon=True)
    runner.start()
    runner.join(timeout)
    if runner.is_alive():
        for fifo in unblock:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass  # not a FIFO now, or no reader on it: nothing of ours to free there
        pytest.fail(f"gpu-triage {' '.join(args)} still running after {timeout:g} s")
    captured = capsys.readouterr()
    assert rc, f"gpu-triage {' '.join(args)} raised: {captured.err[-2000:]}"
    return rc[0], captured.out, captured.err


@pytest.mark.slow
def test_a_fifo_swapped_in_after_the_check_never_holds_diagnose(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """In a directory everyone may write to, another user exchanges the recording with a FIFO, atomically and
    over and over (renameat2 RENAME_EXCHANGE), while root diagnoses it: root was left blocked in a FIFO's open
    (the owners' scan), the name having been looked at first and opened again later."""
    import ctypes
    import shutil
    import threading

    libc = ctypes.CDLL(None, use_errno=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    run, fifo = shared / "run.parquet", shared / "swap"
    shutil.copy(DATA / "h200-inside-f-2s.parquet", run)  # the shortest recording with stacks and processes
    os.mkfifo(fifo)
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        a, b = os.fsencode(run), os.fsencode(fifo)
        while not stop.is_set():
            if libc.renameat2(-100, a, -100, b, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
                raise OSError(ctypes.get_errno(), "renameat2")
            swaps[0] += 1

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        outcomes = [_gpu_triage(capsys, "diagnose", str(run), unblock=(run, fifo)) for _ in range(6)]
    finally:
        stop.set()
        swapper.join(timeout=10)
    assert swaps[0] > 1000  # the name really changed under every run
    for rc, out, err in outcomes:  # each run finished (a hang fails in _gpu_triage)
        if rc == 0:
            assert "Traceback" not in err and out.strip()
        else:  # it met the FIFO: one line saying so
            assert rc == 2 and err.count("\n") == 1 and "FIFO" in err and "Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("command", [["diagnose"], ["replay"], ["compare", str(DATA / "h200-gen-2s.parquet")],
                                     ["recover"]], ids=["diagnose", "replay", "compare", "recover"])
def test_a_fifo_given_as_a_recording_is_one_line_at_once(tmp_path: Path, command: list[str],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "run.parquet"
    os.mkfifo(fifo)
    rc, _, err = _gpu_triage(capsys, *command[:1], str(fifo), *command[1:], unblock=(fifo,), timeout=30)
    assert rc == 2 and err.count("\n") == 1 and "FIFO" in err, err


@pytest.mark.slow
def test_fleet_exporters_file_that_is_a_fifo_is_one_line_not_a_hang(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "exporters.txt"
    os.mkfifo(fifo)
    rc, _, err = _gpu_triage(capsys, "fleet", "--exporters-file", str(fifo), "--once", unblock=(fifo,), timeout=30)
    assert rc == 2 and err.count("\n") == 1 and "FIFO" in err and "exporters-file" in err, err


def test_a_recording_planted_as_a_link_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_triage.cli import main

    link = tmp_path / "run.parquet"
    link.symlink_to(DATA / "h200-gen-2s.parquet")
    assert main(["diagnose", str(link)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "symbolic link" in err


# -- 4. a recording crafted to expand ---------------------------------------------------------------------------

REAL = DATA / "h200-inside-a-2s-stacks.parquet"  # a real H200 recording with its job's stacks (trace v3)

PEAK = """\
import json, sys
from gpu_triage.cli import main
from gpu_triage.trace.reader import open_trace
path = sys.argv[1]
rc = main(["diagnose", path])  # diagnose FILE
frames = None
if rc == 0:  # replay reads every tick through tick_from_row, as the dashboard's feed does
    ticks = open_trace(path).ticks()
    frames = max((len(s.frames or "") for t in ticks for s in t.stacks), default=0)
    escapes = sum((s.frames or "").count("\\x1b") for t in ticks for s in t.stacks)
    frames = [frames, escapes]
# VmHWM, not ru_maxrss: the high-water mark of this program's own memory since exec, not the (larger) size of the
# test process it was forked from, so one baseline serves every hostile file
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"rc": rc, "peak_kib": peak, "frames": frames}))
"""


def _peak(path: Path) -> tuple[dict, str]:
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "app")}
    done = subprocess.run([sys.executable, "-c", PEAK, str(path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def real_peak() -> dict:
    """The real recording's own peak, the yardstick of both tests below: measured once."""
    base, _ = _peak(REAL)
    assert base["rc"] == 0
    return base


def _with_stacks(stacks, rows: int | None = None):
    """The real recording with its ``stacks`` column replaced (its other columns repeated to ``rows`` ticks)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(REAL)
    if rows is not None:
        idx = pa.array([i % table.num_rows for i in range(rows)], pa.int64())
        table = table.take(idx)
        start = table.column("ts")[0].value
        table = table.set_column(0, "ts", pc.cast(pa.array([start + i * 2_000_000 for i in range(rows)], pa.int64()),
                                                 table.schema.field("ts").type))
    return table.set_column(table.column_names.index("stacks"), "stacks", stacks(table))


@pytest.mark.slow
def test_a_20_mb_string_of_escapes_in_the_stacks_is_cut_before_it_is_cleaned(tmp_path: Path, real_peak: dict) -> None:
    """20 MB of ESC in one sample's frames, a few KB compressed: 2 GB of RSS in diagnose and in replay when each
    character was cleaned into a picture; cut to the contract's 300 characters first, it costs what it weighs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def hostile(table: pa.Table) -> pa.ChunkedArray:
        rows = table.column("stacks").to_pylist()
        rows[10] = [{"pid": 4242, "role": "main", "phase": "python", "frames": "\x1b[2J" * (5 << 20)}]
        return pa.chunked_array([pa.array(rows, table.schema.field("stacks").type)])

    bad = tmp_path / "escapes.parquet"
    pq.write_table(_with_stacks(hostile), bad, compression="zstd")
    assert bad.stat().st_size < 1 << 20
    base = real_peak
    got, err = _peak(bad)
    assert got["rc"] == 0, err
    assert got["peak_kib"] - base["peak_kib"] < 150 * 1024, (got, base)  # 20 MB cut to 300 characters, not 2 GB
    longest, escapes = got["frames"]
    assert longest <= 300 and escapes == 0  # cut to the contract, and cleaned


@pytest.mark.slow
def test_2000_ticks_of_5000_stack_samples_are_refused_from_the_footer(tmp_path: Path, real_peak: dict) -> None:
    """Ten million stack samples for 2,000 ticks, a few KB compressed: 1.76 GB of RSS once each was a Python
    object. The footer says how many entries the column holds: more than 256 a tick is refused, undecoded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    n, each = 2000, 5000

    def hostile(table: pa.Table) -> pa.Array:
        typ = table.schema.field("stacks").type
        # each sample {"pid": 7}, its other fields null (one null array a type, shared): as many entries as whole
        # samples, for half the CPU of taking one whole sample ten million times and writing its strings
        fields = list(typ.value_type)
        nulls = {t: pa.nulls(n * each, t) for t in {f.type for f in fields}}
        values = pa.StructArray.from_arrays(
            [pa.array(np.full(n * each, 7, np.uint32)) if f.name == "pid" else nulls[f.type] for f in fields],
            fields=fields)
        return pa.ListArray.from_arrays(pa.array(np.arange(0, n * each + 1, each, dtype=np.int32)), values).cast(typ)

    bad = tmp_path / "many.parquet"
    # no column statistics: the refusal reads only the footer's entry counts, and writing none saves CPU
    pq.write_table(_with_stacks(hostile, rows=n), bad, compression="zstd", write_statistics=False)
    base = real_peak
    got, err = _peak(bad)
    assert got["peak_kib"] - base["peak_kib"] < 150 * 1024, (got, base)
    assert got["rc"] == 2 and err.count("\n") == 1 and "'stacks'" in err and "10,000,000" in err, err


def test_the_doctor_names_a_refused_py_spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           no_pyspy_beside: Path) -> None:
    from gpu_triage.doctor.facts import Facts, SoftwareFacts
    from gpu_triage.doctor.host_checks import check_stacks
    from gpu_triage.sources.stacks import stack_access

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    fake = _plant_pyspy(shared, tmp_path / "proof")
    monkeypatch.setenv("PATH", str(shared))
    found = check_stacks(Facts(software=SoftwareFacts(stacks=stack_access())))
    assert found.status == "warn" and str(fake) in found.summary and "writable by group or others" in found.summary
