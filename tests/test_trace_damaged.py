"""Damaged or foreign files give one UserError naming the file, never another exception or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_triage.cli import main
from gpu_triage.data import H200_TRACE_2S
from gpu_triage.errors import UserError
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter, stream_path_for

REAL = H200_TRACE_2S.read_bytes()
REFERENCE = open_trace(H200_TRACE_2S)


def _stream_bytes() -> bytes:
    """The stream a recorder leaves after 12 ticks of the real trace (written for real, then not closed)."""
    with tempfile.TemporaryDirectory() as tmp:
        w = TraceWriter(Path(tmp) / "r.parquet", REFERENCE.host, REFERENCE.interval_s)
        for t in REFERENCE.ticks(0, 12):
            w.append(t)
        w.abort()
        return stream_path_for(Path(tmp) / "r.parquet").read_bytes()


STREAM = _stream_bytes()
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _open_bytes(data: bytes, name: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            return open_trace(path), None
        except UserError as err:
            assert name in str(err)
            assert "\n" not in str(err)
            return None, err


@SETTINGS
@given(data=st.binary(max_size=2000))
def test_random_bytes(data: bytes) -> None:
    trace, err = _open_bytes(data, "random.parquet")
    assert trace is None and err is not None


@SETTINGS
@given(data=st.binary(max_size=200))
def test_random_bytes_after_a_parquet_or_stream_header(data: bytes) -> None:
    for head in (b"PAR1", STREAM[:8]):
        trace, err = _open_bytes(head + data, "headed.parquet")
        assert trace is None and err is not None


@SETTINGS
@given(cut=st.integers(0, len(REAL) - 1))
def test_truncated_parquet(cut: int) -> None:
    trace, err = _open_bytes(REAL[:cut], "cut.parquet")
    assert trace is None and err is not None  # the footer is at the end: any cut loses it


@SETTINGS
@given(cut=st.integers(0, len(STREAM) - 1))
def test_truncated_stream_keeps_every_complete_tick(cut: int) -> None:
    trace, err = _open_bytes(STREAM[:cut], "cut.parquet.partial.arrows")
    if trace is None:
        return  # cut inside the schema or before the first tick ended: nothing to read, said clearly
    assert 1 <= trace.n <= 12
    assert trace.ticks() == REFERENCE.ticks(0, trace.n)


def test_wrong_schema_empty_and_other_versions(tmp_path: Path) -> None:
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), other)
    with pytest.raises(UserError, match=r"other\.parquet.*no 'ts' column"):
        open_trace(other)

    empty_rows = tmp_path / "empty-rows.parquet"
    pq.write_table(REFERENCE.table.slice(0, 0), empty_rows)
    with pytest.raises(UserError, match=r"empty-rows\.parquet.*0 rows"):
        open_trace(empty_rows)

    zero = tmp_path / "zero.parquet"
    zero.write_bytes(b"")
    with pytest.raises(UserError, match=r"zero\.parquet is empty"):
        open_trace(zero)

    future = tmp_path / "future.parquet"
    meta = dict(REFERENCE.table.schema.metadata)
    meta[b"gpu_triage.schema"] = b"5"
    pq.write_table(REFERENCE.table.replace_schema_metadata(meta), future)
    with pytest.raises(UserError, match=r"future\.parquet uses trace schema '5'"):
        open_trace(future)

    bad_type = tmp_path / "bad-type.parquet"
    pq.write_table(pa.table({"ts": [datetime(2026, 1, 1, tzinfo=UTC)], "gpus": [[1, 2]]}), bad_type)
    with pytest.raises(UserError, match=r"bad-type\.parquet.*'gpus'"):
        open_trace(bad_type)

    with pytest.raises(UserError, match="no such file"):
        open_trace(tmp_path / "missing.parquet")
    with pytest.raises(UserError, match="is a directory"):
        open_trace(tmp_path)


@pytest.mark.parametrize(
    "argv_tail",
    [
        ["compare", "{missing}", "{missing}"],
        ["compare", "{garbage}", "{real}"],
        ["recover", "{missing}"],
        ["recover", "{real}"],
        ["record", "-o", "{out}", "--source", "nonsense"],
        ["record", "-o", "{out}", "--source", "sim:nope"],
        ["record", "-o", "{nodir}", "--source", "sim:healthy", "--fast", "--duration", "4"],
        ["record", "-o", "{out}", "--source", "live", "--fast"],
    ],
)
def test_cli_bad_input_is_one_line_exit_2(argv_tail: list[str], tmp_path: Path, capsys) -> None:
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(os.urandom(300))
    names = {
        "missing": str(tmp_path / "missing.parquet"),
        "garbage": str(garbage),
        "real": str(H200_TRACE_2S),
        "out": str(tmp_path / "out.parquet"),
        "nodir": str(tmp_path / "no" / "such" / "dir" / "out.parquet"),
    }
    argv = [a.format(**names) for a in argv_tail]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-triage: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_cli_bad_source_lists_what_is_allowed(tmp_path: Path, capsys) -> None:
    assert main(["record", "-o", str(tmp_path / "x.parquet"), "--source", "gpu0"]) == 2
    err = capsys.readouterr().err
    assert "live" in err and "sim:SCENARIO" in err and "data_pipeline" in err


@pytest.mark.slow
def test_cli_subprocess_damaged_file_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "half.parquet"
    bad.write_bytes(REAL[: len(REAL) // 2])
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_triage", "compare", str(bad), str(H200_TRACE_2S)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "half.parquet" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_read_only_target_is_a_clear_error(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        target_dir = tmp_path / "ro"
        target_dir.mkdir()
        target_dir.chmod(0o555)
    elif os.access("/sys", os.F_OK):
        target_dir = Path("/sys")  # root ignores mode bits; sysfs refuses new files even to root
    else:
        pytest.skip("no read-only directory available to this user")
    with pytest.raises(UserError) as info:
        TraceWriter(target_dir / "run.parquet", REFERENCE.host, 2.0)
    message = str(info.value)
    assert "run.parquet" in message and ("permission denied" in message or "read-only" in message)
    assert not (target_dir / "run.parquet.partial.arrows").exists()


def test_existing_target_or_leftover_stream_is_not_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "run.parquet"
    target.write_bytes(REAL)
    with pytest.raises(UserError, match="already exists"):
        TraceWriter(target, REFERENCE.host, 2.0)
    assert target.read_bytes() == REAL
    other = tmp_path / "other.parquet"
    stream_path_for(other).write_bytes(STREAM)
    with pytest.raises(UserError, match="gpu-triage recover"):
        TraceWriter(other, REFERENCE.host, 2.0)
    assert stream_path_for(other).read_bytes() == STREAM
