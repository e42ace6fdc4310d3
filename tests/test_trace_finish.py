"""The recorder's Parquet made in a child process (trace/finish.py): the same file as in-process, and when the
child fails or is interrupted the stream stays whole, the reason is said in one line and no temporary file
is left behind. The child is the real one (our interpreter running gpu_triage.trace.finish)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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


def _is_converter(process: psutil.Process) -> bool:
    try:
        return "gpu_triage.trace.finish" in " ".join(process.cmdline())
    except psutil.Error:  # it ended meanwhile
        return False


class _Watcher(threading.Thread):
    """Waits for this process's converter (or, with ``tmp_in``, for the temporary file it writes there)
    and sends it ``sig``: what a systemd stop or the OOM killer does while the recorder waits."""

    def __init__(self, sig: signal.Signals, tmp_in: Path | None = None) -> None:
        super().__init__(daemon=True)
        self.sig, self.tmp_in, self.sent_to = sig, tmp_in, None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.sent_to is None:
            pids = []
            if self.tmp_in is None or _leftovers(self.tmp_in):  # the temporary name is random: its writer is
                pids = [p.pid for p in psutil.Process().children() if _is_converter(p)]  # the converter
            if pids:
                os.kill(pids[0], self.sig)
                self.sent_to = pids[0]
            time.sleep(0.002)


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
    assert not [p for p in psutil.Process().children() if _is_converter(p)]


@pytest.mark.slow
def test_a_stop_signal_pending_while_the_child_starts_stops_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """record's second SIGTERM can arrive while the stop signals are blocked for the child's start (the
    recorder under load: the full suite's end-to-end test caught it). Its exception then comes from the
    unblocking, after the child exists: the child must be stopped as in the wait, not left converting."""
    from gpu_triage.recording.session import close_despite_signals
    from gpu_triage.trace import writer as writer_mod

    target = tmp_path / "run.parquet"
    writer = _recorded(target, in_child=True)
    real_popen = subprocess.Popen
    started: list[int] = []

    def popen_then_signalled(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        child = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(child.pid)
        # to the main thread, which blocks it now: pending until the recorder unblocks the stop signals
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
        return child

    monkeypatch.setattr(writer_mod.subprocess, "Popen", popen_then_signalled)
    try:
        with pytest.raises(UserError) as err:
            close_despite_signals(writer)
        assert err.value.exit_code == 128 + signal.SIGTERM
        assert started and not psutil.pid_exists(started[0])  # stopped and reaped, not left converting
        assert not target.exists() and not _leftovers(tmp_path)
        assert open_trace(stream_path_for(target)).ticks() == TICKS
    finally:
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_converter_refuses_wrong_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    for wrong in (["only-one"], ["stream", "target"], ["stream", "target", "not-a-pid"]):
        assert finish.main(wrong) == 2
        assert "usage: python -m gpu_triage.trace.finish STREAM TARGET RECORDER_PID" in capsys.readouterr().err


def _converting_recorder(target: Path) -> tuple[subprocess.Popen[str], psutil.Process]:
    """A real `record` process that has recorded a few ticks and been sent SIGTERM, caught while its
    converter child runs (the recorder is killed if it never starts one)."""
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gpu_triage", "record", "-o", str(target), "--source", "sim:healthy",
         "--gpus", "2", "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    stream = stream_path_for(target)
    while (not stream.exists() or stream.stat().st_size < 20_000) and time.monotonic() < deadline:
        time.sleep(0.05)
    recorder.send_signal(signal.SIGTERM)
    while time.monotonic() < deadline and recorder.poll() is None:
        found = [p for p in psutil.Process(recorder.pid).children() if _is_converter(p)]
        if found:
            return recorder, found[0]
    recorder.kill()
    recorder.communicate()
    raise AssertionError("the recorder did not start its converter")


@pytest.mark.slow
def test_a_second_sigterm_to_a_recorder_converting_in_its_child(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """End to end, real signals: the recorder converts in its child after the first SIGTERM; a second one
    stops that, says where the ticks are, and exits 143; `recover` then finishes the file."""
    target = tmp_path / "run.parquet"
    stream = stream_path_for(target)
    recorder, converter = _converting_recorder(target)
    try:
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
    from gpu_triage.cli import main

    capsys.readouterr()
    assert main(["recover", str(stream)]) == 0, capsys.readouterr().err  # in this process: the signals were the
    # recorder's, and recover needs no process of its own to finish the stream
    assert open_trace(target).n >= 2 and not stream.exists()


def test_a_json_py_in_the_working_directory_does_not_break_the_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child starts with -P: the user's json.py (or queue.py) beside the recording stays theirs."""
    (tmp_path / "json.py").write_text("raise ImportError('the user project json.py')\n")
    monkeypatch.chdir(tmp_path)
    written = _recorded(tmp_path / "run.parquet", in_child=True).close()
    assert open_trace(written).ticks() == TICKS and not stream_path_for(written).exists()


def test_the_converter_ignores_a_stop_signal_sent_to_the_whole_unit(tmp_path: Path) -> None:
    """systemd and Slurm signal every process of the unit: the recorder decides, the file is finished."""
    writer = _recorded(tmp_path / "run.parquet", in_child=True)
    watcher = _Watcher(signal.SIGTERM)
    written = writer.close()
    watcher.join(5)
    assert watcher.sent_to is not None, "the converter was never seen"
    assert open_trace(written).ticks() == TICKS
    assert not stream_path_for(written).exists() and not _leftovers(tmp_path)


@pytest.mark.slow
def test_a_converter_killed_outright_leaves_no_temporary_file(tmp_path: Path) -> None:
    """SIGKILL (the OOM killer's choice: the child holds the table) gives the child no chance to clean up:
    the recorder removes the temporary file it was writing, and keeps the stream."""
    target = tmp_path / "run.parquet"
    writer = TraceWriter(target, HOST, 2.0, convert_in_child=True)
    for i in range(2000):  # the Parquet takes ~0.1 s to write (hardly more for 8,000: the ticks repeat)
        writer.append(TICKS[i % len(TICKS)])
    watcher = _Watcher(signal.SIGKILL, tmp_in=tmp_path)
    with pytest.raises(UserError, match="the converter was stopped by SIGKILL"):
        writer.close()
    assert watcher.sent_to is not None
    assert not target.exists() and not _leftovers(tmp_path)
    assert open_trace(stream_path_for(target)).n > 0


def test_without_its_interpreter_the_recorder_converts_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A venv rebuilt under a days-long recording: the child cannot start, the Parquet is made here."""
    writer = _recorded(tmp_path / "run.parquet", in_child=True)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "gone" / "python3"))
    written = writer.close()
    assert open_trace(written).ticks() == TICKS and not stream_path_for(written).exists()


@pytest.mark.slow
def test_a_recorder_killed_while_converting_still_leaves_one_whole_file(tmp_path: Path) -> None:
    """The recorder SIGKILLed after its stop began: its converter finishes the Parquet and, seeing its
    parent gone, removes the stream (every tick of it is in the Parquet), so `recover` has nothing to refuse."""
    target = tmp_path / "run.parquet"
    stream = stream_path_for(target)
    recorder, converter = _converting_recorder(target)
    try:
        recorder.kill()
        recorder.communicate(timeout=30)
        converter.wait(60)
    finally:
        if recorder.poll() is None:
            recorder.kill()
    assert open_trace(target).n >= 2 and not stream.exists() and not _leftovers(tmp_path)
