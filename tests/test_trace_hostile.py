"""Issue #9, the recording layer and the command line: hostile but realistic input never loses recorded
data, never hangs, never ends in a traceback, and never lets an impossible number through to diagnosis.

Each test reproduced its defect on the code before the fix (recover removing a live stream; 200 random
bytes losing a whole stream; a FIFO hanging diagnose; a 250-character name, `-o ""` and `--seed -5`
ending in tracebacks; GPU-Util inf diagnosed "mean inf %"; ticks out of order giving negative durations;
a metadata interval of 1e-9 s; a second SIGTERM exiting silently).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_triage.cli import main
from gpu_triage.data import H200_TRACE_2S
from gpu_triage.errors import UserError
from gpu_triage.model import Tick
from gpu_triage.trace import writer as writer_module
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.schema import FIELD_RANGES, GPU_ARROW_FIELDS
from gpu_triage.trace.writer import TraceWriter, stream_path_for
from recorder_proc import start_recorder, wait_for_ticks

REFERENCE = open_trace(H200_TRACE_2S)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("gpu-triage: error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


# --- 1. a live recorder's lock --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_live_stream_is_locked_recover_refuses_it_readers_leave_it_alone(tmp_path: Path, capsys) -> None:
    target = tmp_path / "live.parquet"
    stream = stream_path_for(target)
    proc = start_recorder(target, 0.1)
    try:
        seen = wait_for_ticks(proc, target, 3)

        for name in (stream, target):  # the stream's path or the recording's: both refused
            assert main(["recover", str(name)]) == 2
            err = _one_line_error(capsys)
            assert f"being recorded by pid {proc.pid}" in err
        assert stream.exists() and not target.exists()

        # A second recorder on the same path names the first; it does not advise recover.
        assert main(["record", "-o", str(target), "--source", "sim:healthy", "--fast", "--duration", "4"]) == 2
        err = _one_line_error(capsys)
        assert f"being recorded by pid {proc.pid}" in err and "recover" not in err

        # diagnose reads the live stream as it stands, read-only.
        assert main(["diagnose", str(target), "--json"]) == 0
        capsys.readouterr()
        assert stream.exists() and not target.exists()
        assert proc.poll() is None  # the recorder never noticed

        later = wait_for_ticks(proc, target, seen + 3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert not stream.exists()
    assert open_trace(target).n >= later  # no tick lost to the attempts above


@pytest.mark.slow
def test_the_lock_of_a_killed_recorder_is_stale(tmp_path: Path, capsys) -> None:
    target = tmp_path / "killed.parquet"
    proc = start_recorder(target, 0.1)
    try:
        n = wait_for_ticks(proc, target, 3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    # The pid is still written in the stream, but the kernel dropped the lock: a leftover, said as such.
    assert main(["record", "-o", str(target), "--source", "sim:healthy", "--fast", "--duration", "4"]) == 2
    err = _one_line_error(capsys)
    assert "interrupted recording" in err and "gpu-triage recover" in err and "being recorded" not in err
    assert main(["recover", str(target)]) == 0
    assert "recovered" in capsys.readouterr().out
    assert open_trace(target).n >= n and not stream_path_for(target).exists()
    assert b"recorder_pid" not in b"".join(pq.ParquetFile(target).schema_arrow.metadata)  # a stream's business


# --- 2. a damaged stream ----------------------------------------------------------------------------------


def _stream(ticks: int = 30) -> tuple[bytes, list[int]]:
    """A real recorder's stream of ``ticks`` ticks, and the byte where each batch ends."""
    with tempfile.TemporaryDirectory() as tmp:
        w = TraceWriter(Path(tmp) / "r.parquet", REFERENCE.host, REFERENCE.interval_s)
        for t in REFERENCE.ticks(0, ticks):
            w.append(t)
        w.abort()
        path = stream_path_for(Path(tmp) / "r.parquet")
        ends = []
        with pa.OSFile(str(path), "rb") as source:
            reader = pa.ipc.open_stream(source)
            schema_end = source.tell()
            for _ in reader:
                ends.append(source.tell())
        return path.read_bytes(), [schema_end, *ends]


STREAM, ENDS = _stream()


def test_two_hundred_bytes_in_the_middle_keep_the_thirteen_batches_before(tmp_path: Path, capsys) -> None:
    data = bytearray(STREAM)
    at = ENDS[13] + 8  # inside the 14th batch's header
    data[at : at + 200] = b"\xa5" * 200
    stream = tmp_path / "run.parquet.partial.arrows"
    stream.write_bytes(bytes(data))

    assert main(["recover", str(stream)]) == 0
    out = capsys.readouterr().out
    assert f"kept 13 batches (13 ticks, 0:26); stream damaged at byte {ENDS[13]}: the rest" in out
    recovered = open_trace(tmp_path / "run.parquet")
    assert recovered.ticks() == REFERENCE.ticks(0, 13)
    assert stream.read_bytes() == bytes(data)  # the damaged stream is left for the user to judge

    # readers say the same, once, and read the same 13 ticks
    trace = open_trace(stream)
    assert trace.n == 13 and trace.damaged_at == ENDS[13]
    assert trace.notice is not None and trace.notice.count("damaged at byte") == 1


@SETTINGS
@given(
    offset=st.integers(ENDS[0], len(STREAM) - 1),
    junk=st.binary(min_size=1, max_size=200),
)
def test_damage_anywhere_after_the_schema_keeps_every_batch_before_it(offset: int, junk: bytes) -> None:
    data = bytearray(STREAM)
    data[offset : offset + len(junk)] = junk
    whole_before = sum(1 for end in ENDS[1:] if end <= offset)
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "r.parquet.partial.arrows"
        stream.write_bytes(bytes(data))
        try:
            trace = open_trace(stream)
        except UserError as err:  # nothing whole before the damage: said in one line, naming the byte
            assert whole_before == 0 and "\n" not in str(err), err
            return
        ticks = trace.ticks()
        for tick in REFERENCE.ticks(0, whole_before):
            assert tick in ticks  # every batch before the damage is kept
        assert all(b > a for a, b in zip(trace.timestamps, trace.timestamps[1:], strict=False))
        for tick in ticks:
            _assert_in_range(tick)


# --- 3. not a regular file ------------------------------------------------------------------------------


@contextmanager
def _no_hang(seconds: int = 30) -> Iterator[None]:
    def hung(_signum: int, _frame: object) -> None:
        raise AssertionError("blocked: a FIFO was opened for reading")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("command", ["diagnose", "replay", "recover", "compare-before", "compare-after"])
def test_a_fifo_a_directory_or_a_device_is_refused_without_opening_it(command: str, tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    adir = tmp_path / "adir.parquet"
    adir.mkdir()
    for bad, kind in ((fifo, "is a FIFO"), (adir, "is a directory"), (Path("/dev/null"), "is a character device")):
        argv = {
            "compare-before": ["compare", str(bad), str(H200_TRACE_2S)],
            "compare-after": ["compare", str(H200_TRACE_2S), str(bad)],
        }.get(command, [command, str(bad)])
        with _no_hang():
            assert main(argv) == 2
        assert kind in _one_line_error(capsys)


# --- 4. names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["record", "-o", "{d}/" + "r" * 250, "--source", "live"], "longer than 255"),
        (["record", "-o", "{d}/" + "r" * 248 + ".parquet", "--source", "live"], "longer than 255"),  # 256
        (["record", "-o", "{d}/" + "r" * 235 + ".parquet", "--source", "live"], "of at most 240 bytes"),  # +stream
        (["record", "-o", "", "--source", "live"], "file name is empty"),
        (["recover", ""], "file name is empty"),
        (["recover", "{d}/" + "s" * 258], "longer than 255"),
        (["recover", "{d}/x.parquet", "-o", ""], "file name is empty"),
        (["diagnose", "{d}/" + "s" * 258], "longer than 255"),
        (["diagnose", ""], "file name is empty"),
        (["replay", "{d}/" + "s" * 258], "longer than 255"),
        (["replay", ""], "file name is empty"),
        (["compare", "{d}/" + "s" * 258, "{real}"], "longer than 255"),
        (["compare", "{real}", ""], "file name is empty"),
    ],
)
def test_bad_names_are_one_line_before_anything_starts(argv: list[str], said: str, tmp_path: Path, capsys) -> None:
    stream_path_for(tmp_path / "x.parquet").write_bytes(STREAM)  # for `recover x -o ""`
    args = [a.format(d=tmp_path, real=H200_TRACE_2S) for a in argv]
    assert main(args) == 2
    captured_err = _one_line_error(capsys)
    assert said in captured_err
    # record: refused before the source was opened (a live source would have said something first)
    assert capsys.readouterr().out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet.partial.arrows"]


@pytest.mark.parametrize("command", [["record", "-o", "{d}/s.parquet", "--source", "sim:healthy"], ["demo", "healthy"]])
def test_a_negative_seed_is_an_argument_error(command: list[str], tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main([a.format(d=tmp_path) for a in command] + ["--seed", "-5"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith("argument --seed: -5: give a seed from 0 to 2**64 - 1")
    assert "Traceback" not in err and not (tmp_path / "s.parquet").exists()


# --- 5. impossible values -------------------------------------------------------------------------------


def _assert_in_range(tick: Tick) -> None:
    for group, rows in (("gpus", tick.gpus), ("disks", tick.disks), ("procs", tick.procs)):
        for row in rows:
            for name, (lo, hi) in FIELD_RANGES[group].items():
                value = getattr(row, name)
                for v in value if isinstance(value, list) else [value]:
                    assert v is None or lo <= v <= hi, (group, name, v)
    for name, (lo, hi) in FIELD_RANGES[""].items():
        value = getattr(tick, name)
        for v in value if isinstance(value, list) else [value]:
            assert v is None or lo <= v <= hi, (name, v)


F32 = {name for name, typ in GPU_ARROW_FIELDS if typ == pa.float32()}
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([-36.0, 1e6, 101.0, -1e-9])
ANY_BYTES = st.integers(0, 2**64 - 1)
# what an unsigned field can hold at all (counters: ECC errors, XID events and codes)
ANY_UINT = {pa.uint64(): ANY_BYTES, pa.uint32(): st.integers(0, 2**32 - 1)}
GPU_TYPES = dict(GPU_ARROW_FIELDS)


def _as_f32(v: float) -> float:
    """What a float32 column holds of ``v`` (1e300 -> inf)."""
    with np.errstate(over="ignore"):
        return float(np.float32(v))


def _bad(name: str, group: str, v: object) -> bool:
    lo, hi = FIELD_RANGES[group][name]
    return v is not None and not (isinstance(v, (int, float)) and lo <= v <= hi)  # NaN fails both


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_values_outside_a_fields_range_never_reach_a_reader(data: st.DataObject) -> None:
    base = REFERENCE.ticks(0, 6)
    gpu_fields = {
        name: data.draw(st.lists(ANY_UINT.get(GPU_TYPES[name], ANY_FLOAT), min_size=6, max_size=6))
        for name in FIELD_RANGES["gpus"]
    }
    ticks, bad = [], 0
    for i, tick in enumerate(base):
        values = {name: column[i] for name, column in gpu_fields.items()}
        for name, v in values.items():
            # float32 fields hold what they can: 1e300 becomes inf (still out), -5e-324 becomes -0.0 (in)
            stored = _as_f32(v) if name in F32 else v
            bad += _bad(name, "gpus", stored)
        iowait = data.draw(ANY_FLOAT)
        bad += _bad("iowait_pct", "", _as_f32(iowait))
        ticks.append(replace(tick, gpus=[replace(tick.gpus[0], **values)], iowait_pct=iowait))
    with tempfile.TemporaryDirectory() as tmp:
        writer = TraceWriter(Path(tmp) / "wild.parquet", REFERENCE.host, 2.0)
        for t in ticks:
            writer.append(t)
        trace = open_trace(writer.close())
        for t in trace.ticks():
            _assert_in_range(t)
        assert sum(trace.out_of_range.values()) == bad
        if bad:
            assert trace.notice is not None and trace.notice.count(f"{bad} values out of range ignored") == 1
        else:
            assert trace.notice is None


def test_impossible_gpu_util_is_not_diagnosed(tmp_path: Path, capsys) -> None:
    table = REFERENCE.table.slice(0, 60)
    gpus = table.column("gpus").combine_chunks()
    structs = gpus.values
    util = [math.inf, 1e6, -36.0][0:1] * 20 + [1e6] * 20 + [-36.0] * (len(structs) - 40)
    i = structs.type.get_field_index("util_pct")
    children = [pa.array(util, pa.float32()) if j == i else structs.field(j) for j in range(structs.type.num_fields)]
    wild = pa.ListArray.from_arrays(gpus.offsets, pa.StructArray.from_arrays(children, fields=list(structs.type)))
    path = tmp_path / "wild.parquet"
    pq.write_table(table.set_column(table.column_names.index("gpus"), "gpus", wild), path)

    assert main(["diagnose", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert f"{len(structs)} values out of range ignored" in captured.err
    parsed = json.loads(captured.out)
    parsed.pop("file")  # the path holds pytest's numbered tmp dir ("pytest-360" contains "-36")
    report = json.dumps(parsed)
    assert "Infinity" not in report and "1000000" not in report and "-36" not in report


def test_negative_bytes_from_another_writer_are_null(tmp_path: Path) -> None:
    table = REFERENCE.table.slice(0, 10)
    used = pa.array([-5] * 5 + [10**9] * 5, pa.int64())
    path = tmp_path / "signed.parquet"
    pq.write_table(table.set_column(table.column_names.index("host_mem_used_bytes"), "host_mem_used_bytes", used), path)
    trace = open_trace(path)
    assert [t.host_mem_used_bytes for t in trace.ticks()] == [None] * 5 + [10**9] * 5
    assert trace.out_of_range == {"host_mem_used_bytes": 5}


# --- 6. time order and the interval ---------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(order=st.permutations(range(12)), repeats=st.lists(st.integers(0, 11), max_size=5))
def test_ticks_in_any_order_read_sorted_without_repeated_timestamps(order: list[int], repeats: list[int]) -> None:
    base = REFERENCE.ticks(0, 12)
    written = [base[i] for i in order] + [base[i] for i in repeats]
    with tempfile.TemporaryDirectory() as tmp:
        writer = TraceWriter(Path(tmp) / "shuffled.parquet", REFERENCE.host, 2.0)
        for t in written:
            writer.append(t)
        trace = open_trace(writer.close())
    assert trace.ticks() == base  # sorted, each timestamp once (the first written)
    assert (trace.timestamps[1:] > trace.timestamps[:-1]).all()
    assert trace.duplicates_dropped == len(repeats)
    stamps = [t.ts for t in written]
    assert trace.reordered == any(b < a for a, b in zip(stamps, stamps[1:], strict=False))
    if repeats:
        assert f"{len(repeats)} ticks repeating an earlier tick's timestamp dropped" in (trace.notice or "")


@pytest.mark.parametrize("claimed", [b"1e-06", b"1e-09", b"0", b"-2", b"nan", b"inf", b"1e30", b"86401", b"abc"])
def test_an_absurd_metadata_interval_gives_way_to_the_timestamps(claimed: bytes, tmp_path: Path, capsys) -> None:
    table = REFERENCE.table.slice(0, 40)
    meta = {**table.schema.metadata, b"gpu_triage.interval_s": claimed}
    path = tmp_path / "claims.parquet"
    pq.write_table(table.replace_schema_metadata(meta), path)
    trace = open_trace(path)
    assert trace.interval_s == 2.0
    assert trace.notice is not None and trace.notice.count("is not a plausible tick interval: using 2 s") == 1
    assert main(["diagnose", str(path)]) == 0
    assert capsys.readouterr().err.count("plausible tick interval") == 1


def test_an_impossible_per_tick_interval_is_null(tmp_path: Path) -> None:
    table = REFERENCE.table.slice(0, 4)
    intervals = pa.array([math.inf, 1e30, -1.0, 2.0])
    path = tmp_path / "iv.parquet"
    pq.write_table(table.set_column(table.column_names.index("interval_s"), "interval_s", intervals), path)
    assert [t.interval_s for t in open_trace(path).ticks()] == [None, None, None, 2.0]


# --- 7. smaller -------------------------------------------------------------------------------------------


def test_a_second_sigterm_during_the_conversion_says_the_stream_is_kept(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = writer_module.write_parquet_atomic

    def signalled_write(table: pa.Table, target: Path) -> Path:
        os.kill(os.getpid(), signal.SIGTERM)  # the second stop, while the Parquet is being written
        return real_write(table, target)

    monkeypatch.setattr(writer_module, "write_parquet_atomic", signalled_write)
    target = tmp_path / "run.parquet"
    assert main(["record", "-o", str(target), "--source", "sim:healthy", "--fast", "--duration", "20"]) == 143
    err = capsys.readouterr().err.splitlines()[-1]  # after the simulated source's "not this machine" line
    assert err.startswith("gpu-triage: error: ")
    stream = stream_path_for(target)
    assert f"stopped by SIGTERM while writing {target}: the 10 ticks are kept in {stream}" in err
    assert f"gpu-triage recover {stream}" in err
    assert not target.exists() and not list(tmp_path.glob(".*tmp*"))
    monkeypatch.undo()
    assert main(["recover", str(stream)]) == 0
    assert open_trace(target).n == 10


def test_config_given_a_directory_a_fifo_or_a_long_name_says_so(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    cases = ((tmp_path, "is a directory"), (fifo, "is not a regular file"), (tmp_path / ("c" * 300), "cannot read"))
    for path, said in cases:
        with _no_hang():
            assert main(["--config", str(path), "diagnose", str(H200_TRACE_2S)]) == 2
        assert said in _one_line_error(capsys)
    monkeypatch.setenv("GPU_TRIAGE_CONFIG", str(tmp_path))
    assert main(["diagnose", str(H200_TRACE_2S)]) == 2
    assert "is a directory" in _one_line_error(capsys)


@pytest.mark.slow
@pytest.mark.parametrize("fast", [True, False])
def test_duration_records_duration_over_interval_ticks(fast: bool, tmp_path: Path, capsys) -> None:
    target = tmp_path / "d.parquet"
    args = ["record", "-o", str(target), "--source", "sim:healthy", "--gpus", "1"]
    args += ["--fast", "--duration", "10", "--interval", "2"] if fast else ["--duration", "1", "--interval", "0.2"]
    assert main(args) == 0
    assert "recorded 5 ticks" in capsys.readouterr().out
    trace = open_trace(target)
    assert trace.n == 5
    assert trace.duration_s == pytest.approx(4 * trace.interval_s, abs=0.05 if not fast else 1e-9)


def test_help_says_what_duration_counts(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["record", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "--duration 10 at 2 s: 5 ticks, at 2, 4, 6, 8, 10 s" in text


def test_every_range_names_a_numeric_trace_field() -> None:
    from gpu_triage.model import DiskSample, GpuSample, NetSample, ProcSample, trace_fields
    from gpu_triage.trace.schema import TRACE_SCHEMA

    for column, kind in (("gpus", GpuSample), ("disks", DiskSample), ("procs", ProcSample), ("nets", NetSample)):
        numeric = {f.name for f in trace_fields(kind) if f.trace_type[0] in "uf" or f.trace_type.startswith("list[f")}
        assert set(FIELD_RANGES[column]) <= numeric, column
    assert set(FIELD_RANGES[""]) <= set(TRACE_SCHEMA.names)
    for ranges in FIELD_RANGES.values():
        for lo, hi in ranges.values():
            assert 0 <= lo < hi < math.inf
