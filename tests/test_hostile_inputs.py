"""Hostile input found by a demanding user or a malicious file, each once a traceback, a hang or lost data:
now one line naming what and where with exit status 2, or the bad part left out and the rest kept.

Only the outside is faked: the files, the programs and the FIFOs the commands are given."""

from __future__ import annotations

import functools
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from fake_nvml import NVML_ERROR_DRIVER_NOT_LOADED, FakeNvml
from gpu_triage.cli import main


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gpu-triage: error:")]
    assert len(lines) == 1, err
    return lines[0]


def _main_guarded(argv: list[str]) -> int:
    """``main(argv)`` in a thread, so that a hang (opening a FIFO waits for its other end) fails the test
    instead of stalling the suite."""
    import threading

    rcs: list[int] = []
    worker = threading.Thread(target=lambda: rcs.append(main(argv)), daemon=True)
    worker.start()
    worker.join(timeout=120)  # a hang guard, not a speed target
    assert not worker.is_alive(), f"gpu-triage {' '.join(argv)} hung"
    return rcs[0]


# -- the doctor's --python ---------------------------------------------------------------------------


def test_doctor_python_that_prints_non_utf8_bytes_is_a_skipped_check_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    wrapper = tmp_path / "python"
    wrapper.write_bytes(b"#!/bin/sh\nprintf '\\377\\376 not json\\n'\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)

    rc = main(["doctor", "--json", "--python", str(wrapper)])

    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert rc == 1  # the checks ran (no driver: gpu.driver fails), not a crash
    assert "the torch probe printed something unexpected" in out.out


# -- config files ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 5000 + "]" * 5000 + "\n",  # tomllib recursed until RecursionError
        "[sampling]\ninterval_s = 1" + "0" * 5000 + "\n",  # Python's 4,300-digit limit: ValueError
    ],
    ids=["nested-arrays", "huge-integer"],
)
def test_config_beyond_tomllib_limits_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)

    rc = main(["--config", str(cfg), "diagnose", str(tmp_path / "run.parquet")])

    assert rc == 2
    line = _error_line(capsys)
    assert str(cfg) in line and "not valid TOML" in line


@pytest.mark.parametrize("value", ["0", "0.0", "5e-324", "0.5"])
@pytest.mark.parametrize("key", ["lone_cores_per_core", "few_workers_per_core"])
def test_a_threshold_the_core_count_is_divided_by_must_be_at_least_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[diagnosis]\n{key} = {value}\n")

    rc = main(["--config", str(cfg), "diagnose", str(tmp_path / "run.parquet")])

    assert rc == 2
    line = _error_line(capsys)
    assert f"diagnosis.{key}" in line and "1 or more" in line


def test_a_threshold_of_one_core_per_core_is_accepted() -> None:
    from gpu_triage.config import parse_config

    cfg = parse_config({"diagnosis": {"lone_cores_per_core": 1, "few_workers_per_core": 1.0}})

    assert cfg.thresholds.lone_cores_per_core == 1.0
    assert cfg.thresholds.few_workers_per_core == 1.0


# -- the job's pulse files and log ---------------------------------------------------------------------


def _pulse_file(d: Path, name: str, body: bytes) -> None:
    """A pulse record as a damaged or foreign writer could leave it: a valid CRC over any JSON body."""
    import zlib

    d.mkdir(exist_ok=True)
    head = b"%08x %04d " % (zlib.crc32(body), len(body))
    (d / name).write_bytes((head + body).ljust(511) + b"\n")


def _record_with_pulse(tmp_path: Path, pulse_dir: Path, ticks: int = 3) -> list:
    """Ticks of a simulated server with the pulse directory's job merged in, through the real recorder."""
    import threading

    from gpu_triage.sources.job import JobMonitor, WithJob
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.trace.reader import open_trace
    from gpu_triage.trace.writer import TraceWriter

    src = WithJob(SimulatedSource("healthy", gpus=2, cores=4, seed=1, interval_s=2.0),
                  JobMonitor(pulse_directory=str(pulse_dir)), 2.0)
    got: list = []
    worker = threading.Thread(target=lambda: got.extend(src.sample() for _ in range(ticks)), daemon=True)
    worker.start()
    worker.join(timeout=60)  # a hang guard, not a speed target: blocked on a FIFO it never returns
    assert not worker.is_alive(), "sampling the job side hung"
    out = tmp_path / "run.parquet"
    writer = TraceWriter(out, src.host_info(), 2.0)
    for tick in got:
        writer.append(tick)
    writer.close()
    return open_trace(out).ticks()


@pytest.mark.parametrize(
    "body",
    [
        b'{"t": 1.0, "last_step": 1.0, "steps": 5, "rank": 0, "local_rank": -1, "world_size": 1}',  # LOCAL_RANK=-1
        b'{"t": 1.0, "steps": 5, "rank": 99999999999999999999, "world_size": 5000000000}',
        b'{"t": 1' + b"0" * 400 + b', "steps": 1, "rank": 0}',  # float() of it: OverflowError
        b'{"t": NaN, "last_step": Infinity, "steps": 5, "rank": -1}',
    ],
    ids=["local-rank-minus-1", "ids-past-u32", "400-digit-time", "nan-and-inf"],
)
def test_a_hostile_pulse_file_costs_no_tick_of_the_recording(tmp_path: Path, body: bytes) -> None:
    d = tmp_path / "pulse"
    _pulse_file(d, f"pulse-{os.getpid()}.json", body)

    ticks = _record_with_pulse(tmp_path, d)

    assert len(ticks) == 3 and all(len(t.gpus) == 2 for t in ticks)
    for t in ticks:  # what the pulse could not say is unknown, never a made-up 0
        for r in t.job.ranks if t.job is not None else []:
            assert r.local_rank is None or r.local_rank >= 0
            assert r.since_progress_s is None or r.since_progress_s > 0


@pytest.mark.parametrize("pid", ["-1", "0", "99999999999999999999999"])
def test_a_pulse_file_named_for_no_process_is_ignored(tmp_path: Path, pid: str) -> None:
    d = tmp_path / "pulse"
    _pulse_file(d, f"pulse-{pid}.json", b'{"t": 1.0, "steps": 5, "rank": 0}')

    ticks = _record_with_pulse(tmp_path, d)

    assert len(ticks) == 3 and all(t.job is None for t in ticks)


def test_a_fifo_in_the_pulse_directory_does_not_freeze_the_sampler(tmp_path: Path) -> None:
    d = tmp_path / "pulse"
    d.mkdir()
    os.mkfifo(d / f"pulse-{os.getpid()}.json")

    ticks = _record_with_pulse(tmp_path, d)

    assert len(ticks) == 3 and all(t.job is None for t in ticks)


def test_job_log_that_is_a_fifo_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)

    rc = _main_guarded(["record", "-o", str(tmp_path / "run.parquet"), "--source", "sim:healthy", "--fast",
                        "--duration", "4", "--job-log", str(fifo)])

    assert rc == 2
    line = _error_line(capsys)
    assert "--job-log" in line and "not a regular file" in line
    assert not (tmp_path / "run.parquet").exists()


def test_a_job_log_replaced_by_a_fifo_while_followed_is_not_opened(tmp_path: Path) -> None:
    from gpu_triage.sources.logfollower import LogFollower

    log = tmp_path / "train.log"
    log.write_text("step 1\n")
    follower = LogFollower(log)
    assert follower.poll() == ["step 1"]
    log.unlink()
    os.mkfifo(log)  # rotated into a FIFO: opening it for reading would wait for a writer forever

    assert follower.poll() == []  # returns: the FIFO is neither opened nor read
    log.unlink()
    log.write_text("step 2\n")
    assert follower.poll() == ["step 2"]  # and the log is followed again once it is a file


# -- recordings another tool (or damage) shaped differently --------------------------------------------


@functools.cache
def _recorded() -> bytes:
    """A minute of the simulated server recorded by ``record``, made once for the module's readers."""
    with tempfile.TemporaryDirectory() as where:
        out = Path(where) / "sim.parquet"
        assert main(["record", "-o", str(out), "--source", "sim:data_pipeline", "--gpus", "2", "--fast",
                     "--duration", "60"]) == 0
        return out.read_bytes()


def _sim_recording(tmp_path: Path, name: str = "before.parquet") -> Path:
    out = tmp_path / name
    out.write_bytes(_recorded())
    return out


def _rewrite(src: Path, dst: Path, change) -> Path:
    import pyarrow.parquet as pq

    pq.write_table(change(pq.read_table(src)), dst)
    return dst


def _without_field(column: str, field: str):
    import pyarrow as pa

    def change(table):
        col = table.column(column).combine_chunks()
        values = col.values
        keep = [values.type.field(i).name for i in range(values.type.num_fields)]
        keep.remove(field)
        struct = pa.StructArray.from_arrays([values.field(f) for f in keep], names=keep)
        return table.set_column(table.schema.get_field_index(column), column,
                                pa.ListArray.from_arrays(col.offsets, struct))

    return change


def _all_null(column: str):
    import pyarrow as pa

    return lambda table: table.set_column(table.schema.get_field_index(column), column, pa.nulls(table.num_rows))


@pytest.mark.parametrize(
    ("change", "na_key"),
    [
        (_without_field("gpus", "util_pct"), "util_mean_pct"),
        (_without_field("disks", "busy_pct"), "disk_busy_mean_pct"),
        (_all_null("gpus"), "util_mean_pct"),
        (_all_null("disks"), "disk_busy_mean_pct"),
        (_all_null("cpu_pct"), "cpu_busy_mean_pct"),
    ],
    ids=["card-without-util", "disk-without-busy", "gpus-null-typed", "disks-null-typed", "cpu-null-typed"],
)
def test_compare_reads_what_diagnose_reads_and_shows_the_missing_figure_as_na(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change, na_key: str
) -> None:
    import json

    before = _sim_recording(tmp_path)
    after = _rewrite(before, tmp_path / "after.parquet", change)
    capsys.readouterr()

    rc = main(["compare", str(before), str(after), "--json"])

    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert rc == 0
    result = json.loads(out.out)
    figure = result["host"].get(na_key) or result["overall"][na_key]
    assert figure["before"] is not None  # the before side has it
    assert figure["after"] is None and figure["change"] is None  # the after side's is unknown: null, never 0


# -- a fleet's dataset with one foreign or damaged file among good ones --------------------------------


def _summary_json(spec: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    """`diagnose DIR --summary --json`, in a thread so that a hang fails the test instead of stalling it."""
    import json
    import threading

    capsys.readouterr()
    rcs: list[int] = []
    worker = threading.Thread(target=lambda: rcs.append(main(["diagnose", str(spec), "--summary", "--json"])),
                              daemon=True)
    worker.start()
    worker.join(timeout=120)  # a hang guard, not a speed target (the case below took ~20 ms once fixed)
    assert not worker.is_alive(), "the summary hung"
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert rcs == [0], out.err
    return json.loads(out.out)


def _fleet_of_one(tmp_path: Path) -> tuple[Path, Path]:
    """A good recording, and a dataset root whose host=a partition holds a copy of it."""
    good = _sim_recording(tmp_path, "good.parquet")
    root = tmp_path / "fleet"
    (_partition(root, "a") / "good.parquet").write_bytes(good.read_bytes())
    return good, root


def _partition(root: Path, host: str) -> Path:
    d = root / f"host={host}" / "date=2026-12-01"
    d.mkdir(parents=True)
    return d


def test_summary_of_a_dataset_whose_files_disagree_on_a_column_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa

    good, root = _fleet_of_one(tmp_path)

    def util_as_text(table):  # another tool wrote GPU-Util as strings: one scan of both files raised
        col = table.column("gpus").combine_chunks()
        v = col.values
        names = [v.type.field(i).name for i in range(v.type.num_fields)]
        arrays = [pa.array([str(x) for x in v.field(n).to_pylist()]) if n == "util_pct" else v.field(n)
                  for n in names]
        struct = pa.StructArray.from_arrays(arrays, names=names)
        return table.set_column(table.schema.get_field_index("gpus"), "gpus",
                                pa.ListArray.from_arrays(col.offsets, struct))

    _rewrite(good, _partition(root, "b") / "text.parquet", util_as_text)

    result = _summary_json(root, capsys)

    assert set(result["hosts"]) == {"a", "b"}
    assert all(h["worst_windows"] for h in result["hosts"].values())


def test_summary_with_a_tick_in_year_9999_finishes_and_ignores_that_tick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import datetime as dt

    import pyarrow as pa

    good, root = _fleet_of_one(tmp_path)

    def far_future(table):
        i = table.schema.get_field_index("ts")
        ts = table.column("ts").to_pylist()
        ts[-1] = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
        return table.set_column(i, "ts", pa.array(ts, type=table.schema.field(i).type))

    _rewrite(good, _partition(root, "b") / "future.parquet", far_future)

    result = _summary_json(root, capsys)

    windows = [w["start"] for h in result["hosts"].values() for w in h["worst_windows"]]
    assert windows and not any(w.startswith("9999") for w in windows)


@pytest.mark.parametrize(
    "hostname",
    [b"5", b'"' + b"x" * 5_000_000 + b'"', b'"\\u001b]0;owned\\u0007\\u001b[31mRED\\nline2"'],
    ids=["a-number", "5-MB", "escape-codes"],
)
def test_summary_reads_a_recording_whose_host_name_is_not_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hostname: bytes
) -> None:
    good = _sim_recording(tmp_path, "good.parquet")
    root = tmp_path / "fleet"
    root.mkdir()
    (root / "good.parquet").write_bytes(good.read_bytes())

    def bad_host(table):
        meta = dict(table.schema.metadata)
        meta[b"gpu_triage.host"] = b'{"hostname": ' + hostname + b"}"
        return table.replace_schema_metadata(meta)

    _rewrite(good, root / "foreign.parquet", bad_host)

    result = _summary_json(root, capsys)

    assert all(isinstance(h, str) and len(h) < 256 and h.isprintable() for h in result["hosts"])


@pytest.mark.parametrize("duration", ["1e15", "3e9"])
def test_fast_recording_that_would_start_before_1970_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], duration: str
) -> None:
    out = tmp_path / "run.parquet"

    rc = main(["record", "-o", str(out), "--source", "sim:healthy", "--fast", "--duration", duration,
               "--interval", "3600"])

    assert rc == 2
    line = _error_line(capsys)
    assert "--duration" in line and "1970" in line
    assert not out.exists() and not list(tmp_path.iterdir())


# -- --log-file ----------------------------------------------------------------------------------------


def test_log_file_that_is_a_fifo_nothing_reads_is_one_line_not_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "gpu-triage.log"
    os.mkfifo(fifo)

    rc = _main_guarded(["--log-file", str(fifo), "diagnose", str(tmp_path / "run.parquet")])

    assert rc == 2
    line = _error_line(capsys)
    assert "--log-file" in line and "FIFO" in line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a disk that is always full)")
def test_log_file_on_a_full_disk_is_one_warning_not_a_traceback_per_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = _sim_recording(tmp_path)
    capsys.readouterr()

    rc = main(["--log-file", "/dev/full", "--log-level", "debug", "diagnose", str(recording)])

    err = capsys.readouterr().err
    assert rc == 0  # the log is lost, not the diagnosis
    assert "Traceback" not in err and "Logging error" not in err
    assert err.count("--log-file /dev/full: cannot write") == 1


# -- file names that are not UTF-8 -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "-o", "{name}", "--source", "sim:healthy", "--fast", "--duration", "4"],
        ["recover", "{name}"],
        ["diagnose", "{name}"],
        ["compare", "{name}", "{name}"],
    ],
    ids=["record", "recover", "diagnose", "compare"],
)
def test_a_file_name_that_is_not_utf8_is_one_line_before_anything_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    name = os.fsdecode(bytes(tmp_path) + b"/run\xff.parquet")  # a Latin-1 name, as Python sees it

    rc = main([a.replace("{name}", name) for a in argv])

    assert rc == 2
    line = _error_line(capsys)
    assert "not valid UTF-8" in line and "rename" in line
    assert not list(tmp_path.iterdir())  # nothing recorded that could then be neither converted nor recovered


def test_a_recording_directory_with_a_nul_byte_is_a_config_error(tmp_path: Path) -> None:
    from gpu_triage.config import load_config
    from gpu_triage.errors import UserError

    cfg = tmp_path / "config.toml"
    cfg.write_text('[recording]\ndirectory = "rec\\u0000ordings"\n')

    with pytest.raises(UserError, match="recording.directory"):  # not "REC failed: embedded null byte" at `r`
        load_config(str(cfg))


# -- where the output goes -------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a disk that is always full)")
@pytest.mark.parametrize(
    "argv", [["diagnose", "{run}"], ["diagnose", "{run}", "--json"], ["compare", "{run}", "{run}"]]
)
def test_output_to_a_full_disk_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    run = _sim_recording(tmp_path)
    capsys.readouterr()
    full = open("/dev/full", "w", buffering=1)  # noqa: SIM115 - closed below; each line written as printed
    monkeypatch.setattr(sys, "stdout", full)

    try:
        rc = main([a.replace("{run}", str(run)) for a in argv])
    finally:
        monkeypatch.undo()
        try:
            full.close()
        except OSError:
            pass

    assert rc == 1
    line = _error_line(capsys)
    assert "writing the output failed" in line and "No space left" in line


def test_an_output_error_we_did_not_foresee_is_one_line_and_its_traceback_goes_to_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _sim_recording(tmp_path)
    (tmp_path / "ro").write_text("")
    capsys.readouterr()
    read_only = os.fdopen(os.open(tmp_path / "ro", os.O_RDONLY), "w", buffering=1)  # writes fail with EBADF
    monkeypatch.setattr(sys, "stdout", read_only)
    log = tmp_path / "gpu-triage.log"

    try:
        rc = main(["--log-file", str(log), "diagnose", str(run)])
    finally:
        monkeypatch.undo()
        try:
            read_only.close()
        except OSError:
            pass

    assert rc == 1
    line = _error_line(capsys)
    assert "Bad file descriptor" in line and "--log-file PATH keeps the details" in line
    assert "writing the output failed" not in line  # not called a full disk
    assert "Traceback" in log.read_text()  # the details a bug report needs


def test_with_stderr_closed_the_work_is_still_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _sim_recording(tmp_path)
    capsys.readouterr()
    monkeypatch.setattr(sys, "stderr", None)  # started with `2>&-`: Python sets sys.stderr to None

    rc = main(["diagnose", str(run), "--progress"])

    monkeypatch.undo()
    assert rc == 0
    assert "30 ticks of 2 s" in capsys.readouterr().out  # the diagnosis was printed


def test_a_glob_over_a_dataset_that_links_back_to_itself_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, root = _fleet_of_one(tmp_path)
    (root / "latest").symlink_to(root)  # `latest -> .`: glob.glob's ** walked it until the path was too long
    (root / "host=a" / "up").symlink_to(root)  # and a second loop made that exponential: a hang

    result = _summary_json(Path(f"{root}/**"), capsys)

    assert result["files"] == 1 and set(result["hosts"]) == {"a"}
