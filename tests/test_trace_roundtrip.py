"""Ticks written by TraceWriter read back by open_trace equal the ticks produced: through the final Parquet
and through the crash-safe stream alone, with None fields, empty lists and unicode names (generated ones: the
strategy and the check are here, the test that draws them is test_arrow_ipc.py's, which checks each draw against
pyarrow too)."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from gpu_triage.data import H200_TRACE_05S, H200_TRACE_2S
from gpu_triage.model import (
    THREAD_CPU_PCT,
    DiskSample,
    GpuInfo,
    GpuSample,
    HostInfo,
    JobRank,
    JobSample,
    NetSample,
    ProcSample,
    StackSample,
    ThreadSample,
    Tick,
    trace_fields,
)
from gpu_triage.safetext import clean
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.schema import FIELD_RANGES, TRACE_SCHEMA
from gpu_triage.trace.writer import TraceWriter, stream_path_for

# Values of each trace type at its full range (what the Arrow width holds), from the model's field list,
# narrowed to what the field can physically be (schema.FIELD_RANGES): the reader reads anything outside
# as null (tested in test_trace_hostile.py); inside, every value must round-trip exactly.
VALUES = {
    "u16": st.integers(0, 2**16 - 1),
    "u32": st.integers(0, 2**32 - 1),
    "u64": st.integers(0, 2**64 - 1),
    "f32": st.floats(width=32, allow_nan=False),
    "f64": st.floats(allow_nan=False),
    # names as the sources give them: cleaned where they enter (gpu_triage.safetext); a recording holding
    # control characters is read back cleaned (test_a_recorded_name_with_escapes_is_read_back_cleaned)
    "str": st.text(max_size=12).map(clean),
}


def in_range(trace_type: str, rng: tuple[float, float] | None) -> st.SearchStrategy:
    if rng is None:
        return VALUES[trace_type]
    lo, hi = rng
    if trace_type[0] == "u":
        return st.integers(int(lo), min(int(hi), 2 ** int(trace_type[1:]) - 1))
    return st.floats(min_value=lo, max_value=hi, width=32 if trace_type == "f32" else 64)


def samples(kind: type, column: str) -> st.SearchStrategy:
    """Any sample of ``kind``: every trace field, required ones always set, optional ones sometimes None."""
    fields = {}
    for f in trace_fields(kind):
        rng = FIELD_RANGES.get(column, {}).get(f.name)
        if f.name == "thread_list":  # trace v4: a stack sample's threads, a list of structs of their own
            fields[f.name] = st.lists(thread_samples, max_size=3)
        elif f.is_list:
            fields[f.name] = st.lists(in_range(f.trace_type[5:-1], rng), max_size=4)
        elif f.required:
            fields[f.name] = in_range(f.trace_type, rng)
        else:
            fields[f.name] = st.none() | in_range(f.trace_type, rng)
    return st.builds(kind, **fields)


def top(name: str, trace_type: str, *, nullable: bool = True) -> st.SearchStrategy:
    values = in_range(trace_type, FIELD_RANGES[""][name])
    return st.none() | values if nullable else values


thread_samples = st.builds(
    ThreadSample,
    tid=VALUES["u32"],
    state=st.sampled_from(["active", "idle"]),
    phase=VALUES["str"],
    name=st.none() | VALUES["str"],
    holds_gil=st.none() | st.integers(0, 1),
    cpu_pct=st.none() | st.floats(*THREAD_CPU_PCT, width=32),
    frames=st.none() | VALUES["str"],
)
gpu_samples = samples(GpuSample, "gpus")
disk_samples = samples(DiskSample, "disks")
proc_samples = samples(ProcSample, "procs")
net_samples = samples(NetSample, "nets")
# trace v2: the job column, its ranks a list of structs of their own
job_rank_samples = samples(JobRank, "job.ranks")
job_samples = st.builds(
    JobSample,
    **{
        f.name: st.lists(job_rank_samples, max_size=3)
        if f.name == "ranks"
        else in_range(f.trace_type, FIELD_RANGES["job"].get(f.name))
        if f.required
        else st.none() | in_range(f.trace_type, FIELD_RANGES["job"].get(f.name))
        for f in trace_fields(JobSample)
    },
)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
ticks_strategy = st.lists(
    st.builds(
        Tick,
        ts=st.integers(0, 10**12).map(lambda us: EPOCH + timedelta(microseconds=us)),
        interval_s=top("interval_s", "f64", nullable=False),
        gpus=st.lists(gpu_samples, max_size=3),
        cpu_pct=st.lists(top("cpu_pct", "f32", nullable=False), max_size=6),
        iowait_pct=top("iowait_pct", "f32"),
        host_mem_used_bytes=top("host_mem_used_bytes", "u64"),
        host_mem_total_bytes=top("host_mem_total_bytes", "u64"),
        disks=st.lists(disk_samples, max_size=2),
        procs=st.lists(proc_samples, max_size=2),
        job=st.none() | job_samples,
        host_swap_used_bytes=top("host_swap_used_bytes", "u64"),
        host_swap_total_bytes=top("host_swap_total_bytes", "u64"),
        nets=st.lists(net_samples, max_size=2),
        stacks=st.lists(samples(StackSample, "stacks"), max_size=2),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda t: t.ts,
).map(lambda ticks: sorted(ticks, key=lambda t: t.ts))  # a reader sorts by time and drops repeated ones
HOST = HostInfo(
    hostname="nœud-7",
    driver_version="580.159.04",
    cuda_driver_version="13.0",
    cpu_count=32,
    gpus=[GpuInfo(index=0, name="NVIDIA H200", uuid="GPU-1", mem_total_bytes=150754820096)],
    topology=[["X"]],
    extra={"env": {"NCCL_DEBUG": "INFO"}, "tool_version": "0.1.0"},
)


def assert_round_trips(ticks: list[Tick]) -> None:
    """``ticks`` written by TraceWriter read back equal, through the stream alone and through the Parquet.

    Generated ticks (``ticks_strategy``) are checked by test_arrow_ipc.py's generated-ticks test, which runs this
    and its own check on the same draws: drawing them is most of the cost, so each draw serves both."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "run.parquet"
        writer = TraceWriter(target, HOST, 2.0)
        for t in ticks:
            writer.append(t)

        # While recording, the stream alone already holds every tick (what a kill -9 leaves).
        during = open_trace(target)
        assert during.recovered and during.notice
        assert during.ticks() == ticks

        path = writer.close()
        assert path == target and not stream_path_for(target).exists()
        trace = open_trace(path)
        assert not trace.recovered
        assert trace.n == len(ticks)
        assert trace.ticks() == ticks
        assert [trace.tick(i) for i in range(trace.n)] == ticks
        assert list(trace.iter_ticks(chunk=2)) == ticks
        assert trace.host == HOST
        assert trace.interval_s == 2.0
        assert list(trace.timestamps) == [t.ts.timestamp() for t in ticks]


def test_written_file_has_the_v3_schema_and_metadata(tmp_path: Path) -> None:
    source = open_trace(H200_TRACE_2S)
    writer = TraceWriter(tmp_path / "copy.parquet", source.host, source.interval_s)
    for t in source.ticks(0, 20):
        writer.append(t)
    path = writer.close()
    f = pq.ParquetFile(path)
    assert f.schema_arrow.remove_metadata().equals(TRACE_SCHEMA)
    # the bundled recordings are version 1: the v3 schema is theirs plus v2's job, swap, nets, the cards'
    # health and each process's SM share and owner, and v3's stack samples and verdict
    v2_columns = ("job", "host_swap_used_bytes", "host_swap_total_bytes", "nets", "stacks", "verdict")
    v2_fields = {
        "gpus": ("clock_event_reasons", "ecc_corrected", "ecc_uncorrected", "xid_count", "xid_last", "energy_mj"),
        "procs": ("sm_pct", "user", "slurm_job", "pod_uid", "pod_name", "pod_namespace", "container"),
    }
    v1 = pa.schema([f for f in TRACE_SCHEMA if f.name not in v2_columns])
    for column, added in v2_fields.items():
        struct = v1.field(column).type.value_type
        narrowed = pa.struct([f for f in struct if f.name not in added])
        v1 = v1.set(v1.get_field_index(column), pa.field(column, pa.list_(narrowed)))
    assert pq.ParquetFile(H200_TRACE_2S).schema_arrow.remove_metadata().equals(v1)
    meta = f.schema_arrow.metadata
    assert meta[b"gpu_triage.schema"] == b"4"
    assert float(meta[b"gpu_triage.interval_s"]) == 2.0
    assert b'"hostname": "h200-lab"' in meta[b"gpu_triage.host"]
    assert f.metadata.row_group(0).column(0).compression == "ZSTD"


def test_bundled_real_traces_read_back() -> None:
    for path, interval in ((H200_TRACE_2S, 2.0), (H200_TRACE_05S, 0.5)):
        trace = open_trace(path)
        assert trace.interval_s == interval
        assert trace.host.driver_version == "580.159.04"
        assert trace.n == pq.ParquetFile(path).metadata.num_rows
        first, last = trace.tick(0), trace.tick(-1)
        assert first.gpus[0].index == 0 and first.gpus[0].nvlink_tx_bytes_per_s is None  # no NVLink: null
        assert len(first.cpu_pct) == 16
        assert last.ts > first.ts
        assert (trace.timestamps[1:] > trace.timestamps[:-1]).all()
        assert trace.ticks(trace.n - 3, trace.n + 5) == [trace.tick(trace.n - 3), trace.tick(trace.n - 2), last]
        assert trace.index_at(trace.timestamps[10] + 0.01) == 10


def test_unknown_columns_and_fields_are_ignored_missing_optional_ones_are_null(tmp_path: Path) -> None:
    table = pq.read_table(H200_TRACE_2S)
    # A newer writer: an extra column and an extra field in each GPU struct.
    gpus = table.column("gpus").combine_chunks()
    structs = gpus.values
    newer_struct = pa.StructArray.from_arrays(
        [structs.field(i) for i in range(structs.type.num_fields)] + [pa.array([7.5] * len(structs), pa.float32())],
        names=[structs.type.field(i).name for i in range(structs.type.num_fields)] + ["future_metric"],
    )
    newer_gpus = pa.ListArray.from_arrays(gpus.offsets, newer_struct)
    newer = (
        table.set_column(table.column_names.index("gpus"), "gpus", newer_gpus)
        .append_column("fan_pct", pa.array([50.0] * table.num_rows))
        # An older writer: no iowait, no disks, no procs.
        .drop_columns(["iowait_pct", "disks", "procs"])
    )
    path = tmp_path / "other-writer.parquet"
    pq.write_table(newer, path)
    trace = open_trace(path)
    original = open_trace(H200_TRACE_2S)
    assert trace.n == original.n
    got, want = trace.tick(5), original.tick(5)
    assert got.gpus == want.gpus
    assert got.cpu_pct == want.cpu_pct
    assert got.iowait_pct is None and got.disks == [] and got.procs == []


def test_only_ts_is_required(tmp_path: Path) -> None:
    ts = [EPOCH + timedelta(seconds=2 * i) for i in range(4)]
    path = tmp_path / "bare.parquet"
    pq.write_table(pa.table({"ts": pa.array(ts, pa.timestamp("us"))}), path)  # naive: read as UTC
    trace = open_trace(path)
    assert trace.n == 4
    assert trace.interval_s == 2.0  # from the timestamps when nothing else says
    assert trace.tick(3) == Tick(ts=ts[3], interval_s=None)


def test_a_recorded_name_with_escapes_is_read_back_cleaned(tmp_path: Path) -> None:
    """A recording is outside input (anyone may hand one over): its names reach replay, diagnose and
    compare without a control character, whatever the file holds."""
    from datetime import UTC, datetime

    target = tmp_path / "run.parquet"
    writer = TraceWriter(target, HOST, 2.0)
    evil = "\x1b]2;PWN\x07\x1b[2J"
    writer.append(Tick(ts=datetime(2026, 1, 1, tzinfo=UTC), interval_s=2.0,
                       procs=[ProcSample(pid=5, gpu_index=0, name=evil)], nets=[NetSample(name="e" + evil)]))
    during = open_trace(target).tick(0)  # the recorder's stream, while it records
    after = open_trace(writer.close()).tick(0)
    for tick in (during, after):
        assert tick.procs[0].name == "␛]2;PWN␇␛[2J" and tick.nets[0].name == "e␛]2;PWN␇␛[2J"
