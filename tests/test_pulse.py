"""pulse: the two lines a training script adds. Stdlib only, never raises into training, publishes files."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_triage import pulse


@pytest.fixture
def pulse_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "pulse"
    monkeypatch.setenv("GPU_TRIAGE_PULSE_DIR", str(d))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(pulse, "_PULSE", None)
    return d


def _published(d: Path) -> dict:
    files = list(d.glob("pulse-*.json"))
    assert len(files) == 1
    rec = pulse.decode_record(files[0].read_bytes())
    assert rec is not None
    return rec


@pytest.mark.slow
def test_import_pulls_in_nothing_heavy() -> None:
    code = (
        "import sys; from gpu_triage import pulse; "
        "heavy = ('numpy', 'textual', 'pyarrow', 'polars', 'torch', 'psutil', 'pynvml'); "
        "heavy = [m for m in heavy if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(pulse.__file__).parents[1]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == ""


def test_watch_yields_batches_unchanged_and_counts_steps_and_samples(pulse_dir: Path) -> None:
    batches = [[1, 2, 3]] * 5
    seen = list(pulse.watch(iter(batches), batch_size=32))
    assert seen == batches
    rec = _published(pulse_dir)
    assert rec["steps"] == 5 and rec["samples"] == 160
    assert (rec["rank"], rec["local_rank"], rec["world_size"]) == (1, 1, 2)
    assert rec["pid"] == os.getpid()
    assert rec["timed_steps"] == 5
    assert 0 <= rec["wait_s"] <= rec["step_s"]


class _SlowLoader:
    """Each __next__ burns `wait` of CPU time; the loop body burns `work` (measured, not slept)."""

    def __init__(self, n: int, wait_iters: int) -> None:
        self.n, self.wait_iters = n, wait_iters

    def __iter__(self):
        for i in range(self.n):
            sum(range(self.wait_iters))
            yield i


def test_data_wait_share_follows_where_time_goes(pulse_dir: Path) -> None:
    for _ in pulse.watch(_SlowLoader(20, 200_000), batch_size=1):
        pass  # the step itself does nothing: almost all of it is waiting
    starved = _published(pulse_dir)
    assert starved["wait_s"] / starved["step_s"] > 0.9

    pulse._PULSE = None
    for f in pulse_dir.glob("*"):
        f.unlink()
    for _ in pulse.watch(_SlowLoader(20, 0), batch_size=1):
        sum(range(200_000))  # the step computes; the loader is instant
    fed = _published(pulse_dir)
    assert fed["wait_s"] / fed["step_s"] < 0.1


def test_batch_size_inferred_from_first_dimension(pulse_dir: Path) -> None:
    class Arr:
        def __init__(self, n: int) -> None:
            self.shape = (n, 3)

    for _ in pulse.watch([(Arr(8), Arr(8)), {"x": Arr(4)}, "opaque"]):
        pass
    rec = _published(pulse_dir)
    assert rec["steps"] == 3
    assert rec["samples"] is None  # one step of unknown size: samples are not guessed


def test_step_counts_without_data_wait(pulse_dir: Path) -> None:
    for _ in range(4):
        pulse.step(16)
    pulse._get().publish()
    rec = _published(pulse_dir)
    assert rec["steps"] == 4 and rec["samples"] == 64 and rec["timed_steps"] == 0


def test_loader_exceptions_pass_through(pulse_dir: Path) -> None:
    def broken():
        yield 1
        raise ValueError("corrupt sample")

    with pytest.raises(ValueError, match="corrupt sample"):
        for _ in pulse.watch(broken()):
            pass


def test_unwritable_dir_is_counted_never_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GPU_TRIAGE_PULSE_DIR", str(blocker / "sub"))
    monkeypatch.setattr(pulse, "_PULSE", None)
    monkeypatch.setattr(pulse, "PUBLISH_EVERY_S", 0.0)  # publish on every step: every one fails
    caplog.set_level("DEBUG", logger="gpu_triage.pulse")
    out = list(pulse.watch(range(10), batch_size=2))
    pulse.step(3)
    assert out == list(range(10))
    s = pulse.stats()
    assert s["steps"] == 11 and s["samples"] == 23
    assert s["errors"] >= 11
    assert len([r for r in caplog.records if "publishing failed" in r.getMessage()]) == 1


@pytest.mark.slow
def test_file_removed_at_exit_and_written_atomically(tmp_path: Path) -> None:
    d = tmp_path / "p"
    code = (
        "from gpu_triage import pulse\n"
        "import os, sys\n"
        "for _ in pulse.watch(range(3), batch_size=1): pass\n"
        "names = sorted(os.listdir(os.environ['GPU_TRIAGE_PULSE_DIR']))\n"
        "print(names)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(pulse.__file__).parents[1]), GPU_TRIAGE_PULSE_DIR=str(d))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    names = ast.literal_eval(out.stdout)
    assert len(names) == 1 and names[0].startswith("pulse-") and names[0].endswith(".json")  # no .tmp left
    assert list(d.iterdir()) == []  # gone once the process ended


def test_default_dir_prefers_xdg_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_TRIAGE_PULSE_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert pulse.pulse_dir() == str(tmp_path / "gpu-triage")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert pulse.pulse_dir().endswith(f"gpu-triage-{os.getuid()}")


def test_torn_or_foreign_record_is_rejected() -> None:
    good = pulse.encode_record({"steps": 12345, "samples": 99})
    assert len(good) == pulse.RECORD_BYTES
    assert pulse.decode_record(good) == {"steps": 12345, "samples": 99}
    newer = pulse.encode_record({"steps": 12399, "samples": 11})
    torn = newer[:30] + good[30:]  # a reader caught the rewrite half done
    assert pulse.decode_record(torn) is None
    assert pulse.decode_record(b"") is None
    assert pulse.decode_record(b"\x00" * 512) is None
    assert pulse.decode_record(b"hello world, not a record at all") is None


def test_step_with_a_known_data_wait_reports_its_share(pulse_dir: Path) -> None:
    """A loop with no input pipeline says so (gpu-triage baseline): its steps are timed call to call and their
    data-wait share is a measured 0 %, which the diagnosis may use; without data_wait_s nothing is timed."""
    from gpu_triage.sources.pulsereader import PulseReader

    reader = PulseReader(str(pulse_dir))
    pulse.step(8, data_wait_s=0.0)  # the first call only starts the clock
    pulse._get().publish()
    reader.sample(0.0, 1.0)
    for _ in range(5):
        pulse.step(8, data_wait_s=0.0)
    pulse._get().publish()
    rec = _published(pulse_dir)
    assert rec["steps"] == 6 and rec["timed_steps"] == 5 and rec["wait_s"] == 0.0 and rec["step_s"] > 0
    (rank,) = reader.sample(rec["t"], 1.0)
    assert rank.data_wait_pct == 0.0 and rank.step_time_s is not None and rank.step_time_s > 0
