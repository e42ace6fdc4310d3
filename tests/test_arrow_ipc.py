"""The recorder's own Arrow IPC stream writer (trace/arrow_ipc.py) against pyarrow, the reference.

pyarrow reads the bytes back (its IPC reader verifies every FlatBuffer before it reads it) and the result
must equal, value for value and type for type, the batch pyarrow's own conversion makes of the same ticks:
for generated ticks at the edges of every field, for the recorder's real ticks (simulated scenarios and the
bundled H200 recordings), and for the values pyarrow converts in its own way (NaN, infinities, floats beyond
float32, a float in an integer column, naive timestamps, empty and null lists, unicode).
"""

from __future__ import annotations

import io
import math
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from gpu_triage.data import H200_TRACE_2S
from gpu_triage.model import GpuSample, JobRank, JobSample, ProcSample, Tick
from gpu_triage.sources.spec import make_source, sim_scenarios
from gpu_triage.trace import arrow_ipc
from gpu_triage.trace.layout import TRACE_COLUMNS, Col, tick_values, trace_metadata
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.schema import TRACE_SCHEMA, schema_with_metadata, ticks_to_batch
from tests.test_trace_roundtrip import HOST, assert_round_trips, ticks_strategy


def stream_bytes(ticks: list[Tick], *, per_batch: int = 1) -> bytes:
    out = arrow_ipc.schema_message(TRACE_COLUMNS, trace_metadata(HOST, 2.0))
    for i in range(0, len(ticks), per_batch):
        out += arrow_ipc.batch_message(TRACE_COLUMNS, [tick_values(t) for t in ticks[i : i + per_batch]])
    return out + arrow_ipc.END_OF_STREAM


def read_back(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(io.BytesIO(data)) as reader:
        return reader.read_all()


def assert_same_as_pyarrow(ticks: list[Tick], *, per_batch: int = 1, nan: bool = False) -> pa.Table:
    table = read_back(stream_bytes(ticks, per_batch=per_batch))
    table.validate(full=True)  # offsets, bitmaps, UTF-8: the checks a reader may skip
    expected = pa.Table.from_batches([ticks_to_batch(ticks)])
    assert table.schema.equals(schema_with_metadata(HOST, 2.0), check_metadata=True)
    if not nan:  # Arrow's equality holds NaN unequal to itself; repr below compares it too
        assert table.combine_chunks().equals(expected.replace_schema_metadata(table.schema.metadata).combine_chunks())
    assert repr(table.to_pylist()) == repr(expected.to_pylist())
    return table


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ticks=ticks_strategy)
def test_generated_ticks_read_back_as_pyarrow_writes_them_and_round_trip_through_the_writer(
    ticks: list[Tick],
) -> None:
    assert_same_as_pyarrow(ticks)
    assert_same_as_pyarrow(ticks, per_batch=4)  # several rows a batch: offsets across rows
    assert_round_trips(ticks)  # test_trace_roundtrip.py's property, on the same draws


@pytest.mark.parametrize("scenario", sim_scenarios())
def test_every_simulated_scenario_reads_back_as_pyarrow_writes_it(scenario: str) -> None:
    source = make_source(f"sim:{scenario}", gpus=4, seed=3)
    ticks = [source.sample() for _ in range(8)]
    source.close()
    assert_same_as_pyarrow(ticks)


def test_a_real_h200_recording_reads_back_as_pyarrow_writes_it() -> None:
    ticks = open_trace(H200_TRACE_2S).ticks()[:60]
    assert any(t.procs for t in ticks) and any(g.sm_active_pct is not None for t in ticks for g in t.gpus)
    assert_same_as_pyarrow(ticks)


def test_values_pyarrow_converts_its_own_way() -> None:
    naive = datetime(2026, 3, 1, 12, 0, 0, 5)
    gpu = GpuSample(
        index=0,
        util_pct=float("nan"),
        sm_active_pct=float("inf"),
        tensor_active_pct=-float("inf"),
        power_w=1e39,  # beyond float32: infinity, as pyarrow makes it
        mem_used_bytes=3.9,  # type: ignore[arg-type]  # a float in an integer column is truncated
        temp_c=-1e-50,
    )
    proc = ProcSample(pid=7, name="python — ранг 0 🚀", gpu_index=0, worker_pids=[], workers_cpu_pct=[])
    job = JobSample(source="pulse", ranks=[JobRank(rank=0), JobRank(rank=1, samples_per_s=3.5)])
    ticks = [
        Tick(ts=naive, interval_s=2.0, gpus=[gpu], cpu_pct=[], procs=[proc], job=job),
        Tick(ts=datetime(2026, 3, 1, 15, 0, tzinfo=UTC) - timedelta(hours=1), interval_s=2.0, job=JobSample("log")),
        Tick(ts=datetime(2026, 3, 1, 16, 0, tzinfo=UTC), interval_s=2.0, gpus=[GpuSample(index=1)]),
    ]
    table = assert_same_as_pyarrow(ticks, nan=True)
    row = table.to_pylist()[0]
    assert math.isnan(row["gpus"][0]["util_pct"]) and row["gpus"][0]["power_w"] == math.inf
    assert row["gpus"][0]["mem_used_bytes"] == 3
    assert row["ts"] == naive.replace(tzinfo=UTC)


def test_a_lone_surrogate_in_a_name_is_replaced_not_fatal() -> None:
    """Process names come from /proc and may hold undecodable bytes: pyarrow refused them (the tick was
    lost); the stream writes "?" in its place."""
    tick = Tick(
        ts=datetime(2026, 3, 1, tzinfo=UTC), interval_s=2.0, procs=[ProcSample(pid=1, name="a\udcffb", gpu_index=0)]
    )
    table = read_back(stream_bytes([tick]))
    assert table.to_pylist()[0]["procs"][0]["name"] == "a?b"


def test_columns_changed_in_place_are_encoded_as_they_are_now() -> None:
    """The encoders are kept per layout by identity: a list of columns changed in place (same identity, another
    layout) is encoded by its columns of the moment, never by encoders kept for what it held before."""
    row = tick_values(Tick(ts=datetime(2026, 3, 1, tzinfo=UTC), interval_s=2.0))
    gpus = next(i for i, c in enumerate(TRACE_COLUMNS) if c.name == "gpus")
    columns = [TRACE_COLUMNS[1]]
    first = arrow_ipc.batch_message(columns, [(row[1],)])
    assert first == arrow_ipc.batch_message((TRACE_COLUMNS[1],), [(row[1],)])
    columns[0] = TRACE_COLUMNS[gpus]  # a list of structs where a float was
    assert arrow_ipc.batch_message(columns, [(row[gpus],)]) == arrow_ipc.batch_message((TRACE_COLUMNS[gpus],),
                                                                                        [(row[gpus],)])


def test_an_unsigned_column_refuses_a_negative_value() -> None:
    tick = Tick(ts=datetime(2026, 3, 1, tzinfo=UTC), interval_s=2.0, host_mem_used_bytes=-1)
    with pytest.raises(OverflowError):
        arrow_ipc.batch_message(TRACE_COLUMNS, [tick_values(tick)])


def test_the_stream_survives_being_cut_after_any_batch(tmp_path: Path) -> None:
    """What a kill -9 leaves: the schema and whole batches, no end-of-stream marker."""
    ticks = open_trace(H200_TRACE_2S).ticks()[:5]
    path = tmp_path / "cut.arrows"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    writer = arrow_ipc.StreamWriter(fd, TRACE_COLUMNS, trace_metadata(HOST, 2.0))
    for t in ticks:
        writer.write_rows([tick_values(t)])
    os.close(fd)
    with pa.ipc.open_stream(path) as reader:
        assert reader.read_all().to_pylist() == pa.Table.from_batches([ticks_to_batch(ticks)]).to_pylist()


def test_the_layout_is_the_schema_pyarrow_reads() -> None:
    data = arrow_ipc.schema_message(TRACE_COLUMNS, {b"k": b"v"}) + arrow_ipc.END_OF_STREAM
    with pa.ipc.open_stream(io.BytesIO(data)) as reader:
        schema = reader.schema
    assert schema.equals(TRACE_SCHEMA.with_metadata({b"k": b"v"}), check_metadata=True)
    assert all(f.nullable for f in schema)


def test_a_kind_it_cannot_write_is_refused() -> None:
    with pytest.raises(ValueError, match="no Arrow type"):
        arrow_ipc.schema_message([Col("x", "f16")], {})
