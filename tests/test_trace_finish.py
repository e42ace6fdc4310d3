"""The recorder's Parquet made in a child process (trace/finish.py): the same file as in-process, and when the
child fails or is interrupted the stream stays whole, the reason is said in one line and no temporary file
is left behind. The child is the real one (our interpreter running gpu_triage.trace.finish)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import psutil
import pyarrow.parquet as pq
import pytest

from gpu_triage.data import H200_TRACE_2S
from gpu_triage.errors import UserError
from gpu_triage.model import Tick
from gpu_triage.trace import finish
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter, stream_path_for

TICKS: list[Tick] = open_trace(H200_TRACE_2S).ticks()[:30]
HOST = open_trace(H200_TRACE_2S).host


def _recorded(target: Path, *, in_child: bool) -> TraceWriter:
    writer = TraceWriter(target, HOST, 2.0, convert_in_child=in_child)
    for t in TICKS:
        writer.append(t)
    return writer


def _leftovers(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*tmp*"))


def test_the_child_writes_the_same_parquet_as_the_recorder_itself(tmp_path: Path) -> None:
    own = _recorded(tmp_path / "own.parquet", in_child=False).close()
    child = _recorded(tmp_path / "child.parquet", in_child=True).close()
    assert not stream_path_for(child).exists() and not _leftovers(tmp_path)
    assert pq.read_table(child).equals(pq.read_table(own))
    assert pq.read_schema(child).metadata == pq.read_schema(own).metadata
    assert open_trace(child).ticks() == TICKS


def test_a_failing_child_keeps_the_stream_and_says_why(tmp_path: Path) -> None:
    target = tmp_path / "run.parquet"
    writer = _recorded(target, in_child=True)
    (target / "in-the-way").mkdir(parents=True)  # a directory took the target's name meanwhile
    with pytest.raises(UserError) as failed:
        writer.close()
    stream = stream_path_for(target)
    said = str(failed.value)
    assert said.startswith(f"writing {target} failed (") and "Is a directory" in said
    assert f"the 30 ticks are kept in {stream}: `gpu-triage recover {stream}`" in said
    assert "\n" not in said and not _leftovers(tmp_path)
    assert open_trace(stream).ticks() == TICKS  # the stream alone is the whole recording


class _Interrupted(Exception):
    pass


def test_an_interrupted_wait_stops_the_child_and_keeps_the_stream(tmp_path: Path) -> None:
    """A signal's exception in the recorder while it waits (record's second Ctrl-C): the child is
    terminated, removes its temporary file, and the stream stays for `recover`."""
    target = tmp_path / "run.parquet"
    writer = _recorded(target, in_child=True)

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # the child is still starting: it imports pyarrow
        with pytest.raises(_Interrupted):
            writer.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not target.exists() and not _leftovers(tmp_path)
    assert open_trace(stream_path_for(target)).ticks() == TICKS
    assert not [p for p in psutil.Process().children() if "gpu_triage.trace.finish" in " ".join(p.cmdline())]


def test_the_converter_refuses_wrong_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert finish.main(["only-one"]) == 2
    assert "usage: python -m gpu_triage.trace.finish STREAM TARGET" in capsys.readouterr().err


def test_a_second_sigterm_to_a_recorder_converting_in_its_child(tmp_path: Path) -> None:
    """End to end, real signals: the recorder converts in its child after the first SIGTERM; a second one
    stops that, says where the ticks are, and exits 143; `recover` then finishes the file."""
    target = tmp_path / "run.parquet"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "record", "-o", str(target), "--source", "sim:healthy",
         "--gpus", "2", "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        stream = stream_path_for(target)
        while (not stream.exists() or stream.stat().st_size < 20_000) and time.monotonic() < deadline:
            time.sleep(0.05)
        recorder.send_signal(signal.SIGTERM)
        converter = None
        while converter is None and time.monotonic() < deadline and recorder.poll() is None:
            found = [p for p in psutil.Process(recorder.pid).children() if "gpu_triage.trace.finish" in p.cmdline()]
            converter = found[0] if found else None
        assert converter is not None, "the recorder did not start its converter"
        recorder.send_signal(signal.SIGTERM)
        _out, err = recorder.communicate(timeout=60)
    finally:
        if recorder.poll() is None:
            recorder.kill()
    assert recorder.returncode == 143
    assert f"stopped by SIGTERM while writing {target}" in err and f"gpu-triage recover {stream}" in err
    assert "Traceback" not in err
    assert not converter.is_running() or converter.status() == psutil.STATUS_ZOMBIE
    assert not target.exists() and not _leftovers(tmp_path)
    recovered = subprocess.run(
        [sys.executable, "-m", "gpu_triage", "recover", str(stream)], capture_output=True, text=True, timeout=60
    )
    assert recovered.returncode == 0, recovered.stderr
    assert open_trace(target).n >= 2 and not stream.exists()
