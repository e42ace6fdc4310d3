"""`gpu-triage diagnose FILE`: JSON segments cover the trace end to end; bad files are one line and exit 2."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from gpu_triage.cli import main
from gpu_triage.data import H200_TRACE_2S
from gpu_triage.diagnosis.verdict import Verdict


def test_json_segments_cover_the_trace_contiguously(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(H200_TRACE_2S), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["ticks"] == 161 and obj["interval_s"] == 2.0 and obj["file"].endswith(".parquet")
    segs = obj["segments"]
    assert len(segs) >= 5
    for a, b in zip(segs, segs[1:], strict=False):
        assert a["end"] == b["start"]
        assert (a["pattern"], a["bottleneck"]) != (b["pattern"], b["bottleneck"])
    for s in segs:
        assert datetime.fromisoformat(s["start"]) < datetime.fromisoformat(s["end"])
        assert 0.0 <= s["confidence"] <= 1.0 and s["evidence"]
        assert set(s) >= {"start", "end", "pattern", "bottleneck", "gpus", "confidence", "evidence", "advice"}
    assert sum(s["ticks"] for s in segs) == 161
    found = {s["bottleneck"] for s in segs}
    assert {"launch_overhead", "stall_unexplained", "memory_idle", "data_pipeline", "storage_io"} <= found


def test_plain_text_is_one_block_per_segment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(H200_TRACE_2S)]) == 0
    out = capsys.readouterr().out
    assert "161 ticks of 2 s" in out
    assert "steady_low / launch_overhead" in out and "CUDA graphs" in out


@pytest.mark.parametrize("content", [b"", b"not parquet at all"])
def test_bad_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(content)
    assert main(["diagnose", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu-triage: error:") and "\n" not in err and "Traceback" not in err


def test_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(tmp_path / "nope.parquet"), "--json"]) == 2
    assert "nope.parquet" in capsys.readouterr().err


def test_progress_reaches_a_terminal_and_stays_off_pipes() -> None:
    import io

    from gpu_triage.commands.progress import terminal_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert terminal_progress("x", io.StringIO()) is None  # a pipe or a file: nothing written
    tty = Tty()
    show = terminal_progress("diagnosing run.parquet", tty)
    assert show is not None
    show(500, 1000)
    show(1000, 1000)
    text = tty.getvalue()
    assert "500/1000 ticks (50 %)" in text and text.endswith("1000/1000 ticks (100 %)\n")


def _raw(bottleneck: str, judged_s: float | None = None) -> Verdict:
    facts = {} if judged_s is None else {"regime_fresh": 1.0, "judged_s": judged_s, "regime_prior_run_s": 0.0}
    return Verdict("steady_low", bottleneck, [0], 0.7, [], [], facts=facts)


def test_a_late_reading_of_a_fresh_regime_does_not_relabel_the_ticks_before_it() -> None:
    """Back-dating is for the ticks a fresh regime needed before it was first judged alone; a reading of the
    same regime 20 s into it speaks for its own tick only. Real held-out autograd_hook_p16 (h200-inside-f):
    every tick from the regime's confirmation read host_step, the next-to-last one unexplained (fresh, 20 s
    judged), and its back-dating over the 6 s before it relabelled the window's last three judged ticks."""
    from gpu_triage.diagnosis.thresholds import Thresholds
    from gpu_triage.offline.timeline import smoothed_keys

    th = Thresholds()
    t = [2.0 * k for k in range(16)]
    # busy until tick 5; a regime from tick 5, judged alone from tick 8 (6 s in), fresh to the end
    raws = [_raw("none") for _ in range(8)] + [_raw("host_step", 2.0 * (k - 5)) for k in range(8, 16)]
    raws[14] = _raw("unexplained", 2.0 * 9)
    raws[15] = _raw("host_step")  # 20 s on, the regime is the whole recent stretch: judged as such, not fresh
    keys = [b for _, b in smoothed_keys(t, raws, th, 2.0)]
    assert keys[6:] == ["host_step"] * 10  # the first judged reading back-dated to the regime's start
    assert keys[:5] == ["none"] * 5
