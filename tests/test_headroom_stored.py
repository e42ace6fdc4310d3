"""The headroom stored with each tick's verdict (trace v4's `verdict.headroom_*`): `record` writes what the
engine said, files written before the fields read as null, a reader takes nothing out of range and cleans the
words, and `diagnose` / `replay` show the recording's own word where it differs from the one computed now."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.offline.judge import judge
from gpu_triage.recording.headless import record_source
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.trace.batches import iter_batches
from gpu_triage.trace.reader import open_trace
from gpu_triage.verdicts.judge import stored_headroom

DATA = Path(__file__).parent / "data"
SCHEDULE = [("healthy", 120.0), ("data_pipeline", 300.0)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = SimulatedSource(gpus=2, cores=8, seed=3, start=datetime(2026, 1, 5, 9, tzinfo=UTC), schedule=SCHEDULE)
    path, _ = record_source(src, tmp_path_factory.mktemp("rec") / "run.parquet", 2.0, duration_s=420, fast=True,
                            describe_machine=False, out=None, config=Config())
    return path


def _rewrite_verdicts(src: Path, dst: Path, **fields: object) -> None:
    """``src`` with every stored verdict's headroom fields set to ``fields`` (another version's, a crafted one)."""
    table = pq.read_table(src)
    rows = table.column("verdict").to_pylist()
    for r in rows:
        if r is not None:
            r.update(fields)
    col = pa.array(rows, type=table.schema.field("verdict").type)
    pq.write_table(table.set_column(table.schema.get_field_index("verdict"), "verdict", col), dst)


def test_record_stores_the_headroom_diagnose_recomputes(recorded: Path) -> None:
    config = Config()
    stored = pq.read_table(recorded, columns=["verdict"]).column("verdict").to_pylist()
    jd = judge(iter_batches(recorded), config.thresholds, config.window_s, stride=1)
    assert len(stored) == len(jd.raws)
    kinds = set()
    for v, raw in zip(stored, jd.raws, strict=True):
        hr = raw.headroom
        if hr is None:  # collecting: no verdict yet, no headroom
            assert v["headroom_kind"] is None and raw.pattern == "collecting"
            continue
        assert v["headroom_kind"] == hr.kind and v["headroom_basis"] == hr.basis
        assert v["headroom_assumes"] == hr.assumes and v["headroom_unit"] == hr.unit
        assert (v["headroom_factor"] is None) == (hr.factor is None)
        if hr.factor is not None:
            assert v["headroom_factor"] == pytest.approx(hr.factor, rel=1e-6)  # float32
        kinds.add(hr.kind)
    assert {"bound", "none"} <= kinds  # the starved loader's bound, the healthy stretch's nothing
    # what diagnose read back at each point is what was stored: the reader's round trip
    assert [None if h is None else h.kind for h in jd.stored] == [v["headroom_kind"] for v in stored]


def test_files_written_before_the_fields_read_the_headroom_as_null() -> None:
    # v3 and v4 files with stored verdicts but no headroom fields; a v1 file with no verdicts at all
    for name in ("h200-inside-e-2s.parquet", "h200-inside-g-2s.parquet", "h200x2-cuda0-1s.parquet"):
        tf = open_trace(DATA / name)
        ticks = tf.ticks(0, tf.n)
        assert all(t.verdict is None or t.verdict.headroom_kind is None for t in ticks), name
        assert all(stored_headroom(t.verdict) is None for t in ticks), name
    assert any(t.verdict is not None for t in open_trace(DATA / "h200-inside-g-2s.parquet").ticks(0, 10))


def test_diagnose_json_carries_the_recorded_headroom_null_where_the_file_has_none(capsys) -> None:
    assert main(["diagnose", str(DATA / "h200-inside-g-2s.parquet"), "--json"]) == 0
    segs = [s for s in json.loads(capsys.readouterr().out)["segments"] if "recorded_headroom" in s]
    assert segs and all(s["recorded_headroom"] is None for s in segs)


def test_diagnose_of_a_recording_with_its_headroom_says_nothing_twice(recorded: Path, capsys) -> None:
    assert main(["diagnose", str(recorded), "--json"]) == 0
    segs = json.loads(capsys.readouterr().out)["segments"]
    starved = [s for s in segs if s["bottleneck"] == "data_pipeline"]
    assert starved and all(s["recorded_headroom"]["factor"] == pytest.approx(s["headroom"]["factor"], rel=1e-6)
                           for s in starved)
    assert main(["diagnose", str(recorded)]) == 0
    assert "recorded then" not in capsys.readouterr().out  # the same word once


def test_diagnose_shows_the_recording_s_own_word_where_it_differs(recorded: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "judged-then.parquet"
    _rewrite_verdicts(recorded, other, headroom_kind="bound", headroom_factor=9.0, headroom_unit="samples/s",
                      headroom_basis="judged by another version \x1b]52;c;ZXZpbA==\x07", headroom_assumes="x" * 300)
    assert main(["diagnose", str(other)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "recorded then" in x)
    assert "up to 9.0x samples/s (judged by another version" in line
    assert "\x1b" not in out and "\x07" not in out  # a recording's words are cleaned before the terminal
    assert main(["diagnose", str(other), "--json"]) == 0
    got = [s["recorded_headroom"] for s in json.loads(capsys.readouterr().out)["segments"]]
    assert all(r is not None and r["factor"] == 9.0 and len(r["assumes"]) <= 256 for r in got)


@pytest.mark.parametrize("factor", [0.5, float("inf"), float("nan")])
def test_a_bound_no_speed_up_can_be_is_not_read(recorded: Path, tmp_path: Path, capsys, factor: float) -> None:
    other = tmp_path / "crafted.parquet"
    _rewrite_verdicts(recorded, other, headroom_kind="bound", headroom_factor=factor)
    assert main(["diagnose", str(other), "--json"]) == 0
    assert all(s["recorded_headroom"] is None for s in json.loads(capsys.readouterr().out)["segments"])


def test_an_unknown_kind_is_not_read(recorded: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "crafted.parquet"
    _rewrite_verdicts(recorded, other, headroom_kind="guess", headroom_factor=3.0)
    assert main(["diagnose", str(other), "--json"]) == 0
    assert all(s["recorded_headroom"] is None for s in json.loads(capsys.readouterr().out)["segments"])


async def test_replay_says_the_recorded_headroom_where_it_differs(recorded: Path, tmp_path: Path) -> None:
    import argparse

    from gpu_triage.ui.run import build_app

    def replay(path: Path):  # noqa: ANN202 - the app
        app = build_app("replay", argparse.Namespace(file=str(path), speed=1.0, record=None), Config())
        app.replay.playing = False
        return app

    other = tmp_path / "judged-then.parquet"
    _rewrite_verdicts(recorded, other, headroom_kind="bound", headroom_factor=9.0, headroom_unit="samples/s",
                      headroom_basis="judged by another version", headroom_assumes="nothing")
    for path, want in ((recorded, False), (other, True)):
        app = replay(path)
        async with app.run_test(size=(160, 50)) as pilot:
            app.action_seek("end")  # the starved loader: a bound computed now
            await pilot.pause()
            diag = " ".join(app.query_one("#diag").shown_plain.split())
        assert "worth fixing: up to" in diag, diag
        assert ("recorded then: worth fixing: up to 9.0x samples/s (judged by another version" in diag) == want, diag
