"""`gpu-triage baseline`: one rank then N (gloo on CPU, as CI runs it), samples/s for each, the scaling
efficiency from those numbers, under 50 % flagged with the doctor named, and a recording `compare` reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gpu_triage.checkup.baseline import BaselineReport, render, scaling_efficiency
from gpu_triage.cli import main
from gpu_triage.trace.reader import open_trace
from torch_needed import need_torch


def run(world: int, sps: float) -> dict:
    return {"world_size": world, "samples_per_s": sps, "step_ms": 10.0, "batch_per_rank": 64, "steps": 100}


def test_scaling_efficiency_is_n_cards_against_n_times_one() -> None:
    assert scaling_efficiency(run(1, 1000.0), run(4, 3600.0)) == pytest.approx(0.9)
    assert scaling_efficiency(run(1, 1000.0), None) is None
    assert scaling_efficiency(None, run(2, 10.0)) is None


@pytest.mark.parametrize(("sps_n", "flagged"), [(1900.0, False), (1000.0, False), (999.0, True)])
def test_under_half_of_n_times_one_is_flagged_and_points_to_the_doctor(sps_n: float, flagged: bool) -> None:
    report = BaselineReport("cuda", 2, "small", False, 20.0, runs=[run(1, 1000.0), run(2, sps_n)])
    assert report.flagged is flagged
    text = render(report)
    assert ("gpu-triage doctor" in text) is flagged
    assert f"scaling efficiency: {sps_n / 2000:.0%}" in text


def test_one_card_only_has_no_efficiency() -> None:
    report = BaselineReport("cuda", 1, "small", False, 20.0, runs=[run(1, 1000.0)])
    assert report.efficiency is None and not report.flagged
    assert "scaling" not in render(report)


def _children() -> set[tuple[int, float]]:
    """This process's live descendants, each as (pid, start time): a reused pid is another process."""
    found = set()
    for c in psutil.Process().children(recursive=True):
        try:
            found.add((c.pid, c.create_time()))
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
def test_a_real_cpu_baseline_on_one_and_two_ranks_with_a_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    need_torch()
    monkeypatch.setenv("GPU_TRIAGE_PULSE_DIR", str(tmp_path / "pulse"))  # this test's ranks only
    rec = tmp_path / "baseline.parquet"
    # half a second timed per run: two or more of the recorder's ticks fall in each, enough for the ranks' pulse
    # to give a rate; the figures asserted are exact whatever the length
    argv = ["baseline", "--device", "cpu", "--gpus", "2", "--seconds", "0.5", "--json"]
    # an xdist worker runs other files' tests too: a child one of them left behind is not this run's rank
    before = _children()
    code = main([*argv, "--record", str(rec), "--interval", "0.1"])
    out = json.loads(capsys.readouterr().out)
    assert code == (1 if out["flagged"] else 0)
    assert [r["world_size"] for r in out["runs"]] == [1, 2]
    one, two = out["runs"]
    assert two["backend"] == "gloo" and one["backend"] is None
    for r in out["runs"]:
        assert r["steps"] > 0 and r["elapsed_s"] >= 0.5 and r["model_size"] == "tiny"
        assert r["samples_per_s"] == pytest.approx(r["world_size"] * 64 * r["steps"] / r["elapsed_s"])
    assert out["scaling_efficiency"] == pytest.approx(two["samples_per_s"] / (2 * one["samples_per_s"]))
    assert out["flagged"] is (out["scaling_efficiency"] < 0.5)
    assert _children() - before == set()  # every rank ended
    # the recording: the ordinary trace, with the check-up's settings and the results beside it
    trace = open_trace(rec)
    assert trace.host.extra["checkup"]["step"] == "baseline"
    # the ranks' own pulse is in the recording: the job's samples/s on the cards' time axis
    jobs = [j for j in trace.table.column("job").to_pylist() if j and j["samples_per_s"]]
    assert jobs and {j["source"] for j in jobs} == {"pulse"}
    assert json.loads(Path(f"{rec}.baseline.json").read_text())["runs"] == out["runs"]
    assert main(["compare", str(rec), str(rec)]) == 0


def test_cuda_without_a_card_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    torch = need_torch()
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA card")
    assert main(["baseline", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device cpu" in err


@pytest.mark.parametrize("device", [[], ["--device", "cpu"]], ids=["any", "cpu"])
def test_without_torch_it_says_how_to_install_it(
    device: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # an environment without PyTorch
    assert main(["baseline", *device]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs PyTorch" in err and "gpu-triage[torch]" in err


def test_a_broken_torch_on_cpu_is_the_ranks_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --device cpu only the ranks import torch: one that will not import is their error, said in one
    line (exit 2), not a traceback and not a hang."""
    need_torch()  # installed here; the ranks meet a broken one ahead of it on their path
    (tmp_path / "torch.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    assert main(["baseline", "--device", "cpu", "--seconds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "rank 0 exited with status 1" in err and "ImportError: libtorch_cpu.so: cannot open" in err


@pytest.mark.slow
def test_help_does_not_import_torch() -> None:
    probe = (
        "import sys\nfrom gpu_triage.cli import main\n"
        "for command in ('baseline', 'loader'):\n"
        "    try:\n        main([command, '--help'])\n    except SystemExit:\n        pass\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


def _poll(cond: Callable[[], object], what: str, bound_s: float = 120.0) -> None:
    """Until ``cond()``, checked every 50 ms (it reads /proc): a child importing torch on a loaded box takes
    seconds of wall; ``bound_s`` is "never"."""
    deadline = time.monotonic() + bound_s
    while not cond():
        assert time.monotonic() < deadline, f"waited {bound_s:g} s in vain for {what}"
        time.sleep(0.05)


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # gone: whatever it had mapped, it maps nothing now
        return ""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_stopping_or_killing_the_baseline_leaves_no_rank_behind(sig: str, tmp_path: Path) -> None:
    need_torch()
    pulses = tmp_path / "pulse"
    env = dict(os.environ, GPU_TRIAGE_PULSE_DIR=str(pulses))  # this test's rank only
    cmd = [sys.executable, "-m", "gpu_triage", "baseline", "--device", "cpu", "--gpus", "2", "--seconds", "60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ranks: list[psutil.Process] = []

        def started() -> bool:
            if proc.poll() is not None:  # it ended before starting a rank: say why, do not wait in vain
                raise AssertionError(f"baseline exited {proc.returncode}: {proc.communicate()[1][-2000:]}")
            ranks[:] = psutil.Process(proc.pid).children()
            return bool(ranks)

        _poll(started, "the first rank")
        rank = ranks[0]
        if sig == "SIGKILL":
            # torch's libraries mapped: the rank is importing torch, so its own set-up before that (tied to its
            # parent's death, SIGTERM handled) is done; what a kill -9 then does to it is the kernel's
            _poll(lambda: "libtorch" in _maps(rank.pid), "the rank importing torch")
        else:
            # its pulse file: the rank is stepping, so a stop has a measurement to end and report
            _poll(lambda: (pulses / f"pulse-{rank.pid}.json").exists(), "the rank stepping")
        # with --device cpu the command itself never imports torch (seconds of CPU): its ranks do
        assert "libtorch" not in _maps(proc.pid)
        os.kill(proc.pid, getattr(signal, sig))
        out, _err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    _gone, alive = psutil.wait_procs(ranks, timeout=10)
    assert alive == []
    if sig == "SIGTERM":  # a stop signal is a clean stop, with what was measured said
        assert proc.returncode == 130 and "stopped (Ctrl-C or a stop signal)" in out
        assert "  1 CPU rank: " in out and ", interrupted)" in out
