"""`gpu-triage snapshot`: one non-interactive reading (every card, the host, the processes, the verdict over a
short window), as text and as JSON, and one that says so on a host without a GPU."""

from __future__ import annotations

import json

import pytest

from gpu_triage.cli import build_parser, main
from tests import fake_nvml


def test_snapshot_of_a_simulated_server_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--json", "--source", "sim:data_pipeline", "--gpus", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2, 3]
    assert all(g["util_pct"] is not None and "util_window_mean_pct" in g for g in data["gpus"])
    assert data["ticks"] == 7 and data["window_s"] == pytest.approx(6.0)
    assert len(data["cpu"]["cores_pct"]) == 32 and data["host"]["hostname"] == "sim-h200x4"
    assert {p["gpu_index"] for p in data["processes"]} == {0, 1, 2, 3}
    # two figures, two names (issue 33): the card's SM activity (GPM), the process's GPU-Util sample
    assert all("sm_active_pct" in g for g in data["gpus"])
    assert all("gpu_util_pct" in p and "sm_pct" not in p for p in data["processes"])
    v = data["verdict"]
    assert v["bottleneck"] == "data_pipeline" and not v["collecting"] and 0 < v["confidence"] <= 1
    assert v["evidence"] and v["advice"]
    hr = v["headroom"]  # what fixing it is worth (issue 37)
    assert hr["kind"] in ("bound", "lost") and hr["basis"]


def test_snapshot_text_says_what_fixing_it_is_worth(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--source", "sim:data_pipeline", "--gpus", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, ln in enumerate(out) if ln.startswith("VERDICT "))
    assert out[at + 1].startswith("  = worth fixing: up to ") or out[at + 1].startswith("  = lost: ")


def test_snapshot_as_text_names_every_card_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--source", "sim:healthy", "--gpus", "2", "--seconds", "8", "--interval", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sim-h200x2 · sim:healthy · 2 GPUs · 5 ticks over 8 s at 2 s")
    head = out.index("GPU  UTIL SMACT        MEM  POWER  TEMP    CLOCK  FLAGS")
    assert [ln.split()[0] for ln in out[head + 1 : head + 3]] == ["0", "1"]
    assert any(ln.startswith("VERDICT ") and "confidence" in ln for ln in out)
    procs = out.index("PROCESSES") + 1
    assert "GPU%" in out[procs].split() and "SM%" not in out[procs].split()


def test_snapshot_without_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_triage.commands import snapshot
    from gpu_triage.sources import live

    def no_driver(spec: str, **_: object) -> live.LiveSource:
        return live.LiveSource(nvml_module=fake_nvml.FakeNvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))

    monkeypatch.setattr(snapshot, "make_source", no_driver)
    assert main(["snapshot", "--seconds", "0.2", "--interval", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "no NVIDIA GPU/driver: host only" in out and "(no GPU)" in out and "confidence" not in out
    assert main(["snapshot", "--json", "--seconds", "0.2", "--interval", "0.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_available"] is False and data["gpus"] == [] and data["verdict"]["confidence"] is None
    assert data["processes_are"] == "busiest on the host (no GPU)"


def test_snapshot_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--source", "sim:nope"]) == 2
    assert main(["snapshot", "--seconds", "1", "--interval", "5", "--source", "sim:healthy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(ln.startswith("gpu-triage: error:") for ln in err)


def test_snapshot_help() -> None:
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    text = sub.choices["snapshot"].format_help()
    for flag in ("--json", "--seconds", "--interval", "--source", "--gpus"):
        assert flag in text
    assert "snapshot" in build_parser().format_help()


def test_snapshot_names_each_process_s_user_owner_command_rss_and_time(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real process of this machine on a (fake) card: its user, its command line (hostile bytes made visible),
    host RSS and run time, in the text's own columns."""
    import getpass
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--lr", "3e-4", "\x1b[2Jx"])
    try:
        card = fake_nvml.FakeCard(processes=[fake_nvml.FakeProcess(pid=child.pid, usedGpuMemory=5 << 30)])
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.FakeNvml([card]))  # the outside: one card's driver
        assert main(["snapshot", "--seconds", "0.2", "--interval", "0.1", "--no-stacks"]) == 0
        out = capsys.readouterr().out.split("\n")
        head = out[out.index("PROCESSES") + 1]
        assert head.split()[:3] == ["PID", "USER", "OWNER"] and head.rstrip().endswith("RSS     TIME WORKERS"
                                                                                        " WORKERS' CPU% COMMAND")
        row = next(ln for ln in out if ln.split()[:1] == [str(child.pid)])
        me = getpass.getuser()
        assert row.split()[1] == me[:8] and "\x1b" not in row and "--lr 3e-4 ␛[2Jx" in row
        assert row.split()[2] == "-"  # read, and in no Slurm job, pod or container
        assert main(["snapshot", "--json", "--seconds", "0.2", "--interval", "0.1", "--no-stacks"]) == 0
        proc = next(p for p in json.loads(capsys.readouterr().out)["processes"] if p["pid"] == child.pid)
        assert proc["user"] == me and proc["owner"] == {"kind": "user", "id": me}
        assert proc["command"].endswith("--lr 3e-4 ␛[2Jx") and proc["rss_bytes"] > 1 << 20
        assert 0 <= proc["elapsed_s"] < 600
    finally:
        child.kill()
        child.wait()


def test_simulated_processes_have_no_command_rss_or_time(capsys: pytest.CaptureFixture[str]) -> None:
    """Not this machine's processes: n/a (null), never this machine's figures for their pids."""
    assert main(["snapshot", "--json", "--source", "sim:data_pipeline", "--gpus", "2"]) == 0
    procs = json.loads(capsys.readouterr().out)["processes"]
    assert procs and all(p["command"] is None and p["rss_bytes"] is None and p["elapsed_s"] is None for p in procs)
    assert main(["snapshot", "--source", "sim:data_pipeline", "--gpus", "2"]) == 0
    out = capsys.readouterr().out.split("\n")
    rows = out[out.index("PROCESSES") + 2 : out.index("PROCESSES") + 4]
    assert all("n/a      n/a" in ln and ln.split()[1] == "sim" and ln.endswith("python3") for ln in rows)
