"""The job's progress per tick: pulse files from the training's ranks, a followed log, merged into ticks."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_triage import pulse
from gpu_triage.model import HostInfo, Tick
from gpu_triage.sources.base import SourceStatus
from gpu_triage.sources.job import JobMonitor, LogTracker, WithJob
from gpu_triage.sources.pulsereader import PulseReader


def _write(d: Path, pid: int, **rec: object) -> None:
    d.mkdir(exist_ok=True)
    (d / f"pulse-{pid}.json").write_bytes(pulse.encode_record(rec))


def _rec(rank: int, t: float, steps: int, samples: int, wait_s: float, step_s: float) -> dict:
    return {"rank": rank, "local_rank": rank, "world_size": 2, "t": t, "last_step": t, "steps": steps,
            "samples": samples, "wait_s": wait_s, "step_s": step_s, "timed_steps": steps}


def test_two_ranks_rates_wait_share_and_stop(tmp_path: Path) -> None:
    d = tmp_path / "p"
    a, b = os.getpid(), os.getppid()  # two live processes stand for two ranks
    _write(d, a, **_rec(0, 100.0, 10, 640, 0.4, 1.0))
    _write(d, b, **_rec(1, 100.0, 10, 640, 0.05, 1.0))
    reader = PulseReader(str(d))
    first = reader.sample(now=100.1, interval_s=2.0)
    assert [r.rank for r in first] == [0, 1] and first[0].samples_per_s is None  # one reading: no rate yet
    # 2 s later: 20 more steps of 64 samples per rank; rank 0 waited 82 % of its steps for data
    _write(d, a, **_rec(0, 102.0, 30, 1920, 0.4 + 0.82 * 2.0, 3.0))
    _write(d, b, **_rec(1, 102.0, 30, 1920, 0.05 + 0.04 * 2.0, 3.0))
    ranks = reader.sample(now=102.1, interval_s=2.0)
    assert ranks[0].samples_per_s == pytest.approx(640.0) and ranks[0].steps_per_s == pytest.approx(10.0)
    assert ranks[0].step_time_s == pytest.approx(0.1)
    assert ranks[0].data_wait_pct == pytest.approx(82.0) and ranks[1].data_wait_pct == pytest.approx(4.0)
    assert ranks[0].since_progress_s == pytest.approx(0.1) and ranks[0].pid == a
    # nothing new for 30 s: no stale rate, but how long it has been
    stuck = reader.sample(now=132.0, interval_s=2.0)
    assert stuck[0].samples_per_s == 0.0 and stuck[0].steps_per_s == 0.0
    assert stuck[0].since_progress_s == pytest.approx(30.0)

    mon = JobMonitor(pulse_directory=str(d))
    mon.sample(now=132.0)
    _write(d, a, **_rec(0, 134.0, 50, 3200, 2.04, 5.0))
    _write(d, b, **_rec(1, 134.0, 50, 3200, 0.21, 5.0))
    job = mon.sample(now=134.0)
    assert job is not None and job.source == "pulse" and len(job.ranks) == 2
    assert job.samples_per_s == pytest.approx(2 * 1280 / 32)  # summed over the ranks
    assert job.data_wait_pct == pytest.approx(max(r.data_wait_pct for r in job.ranks))


def test_dead_processes_and_damaged_files_are_ignored(tmp_path: Path) -> None:
    d = tmp_path / "p"
    _write(d, 2**22 + 12345, **_rec(0, 1.0, 1, 1, 0, 1))  # no such pid
    (d / "pulse-notapid.json").write_bytes(b"x")
    (d / f"pulse-{os.getpid()}.json").write_bytes(b"\x00" * 512)
    assert PulseReader(str(d)).sample(now=2.0, interval_s=2.0) == []
    assert PulseReader(str(tmp_path / "missing")).sample(now=2.0, interval_s=2.0) == []


def test_real_pulse_from_this_process_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "p"
    monkeypatch.setenv("GPU_TRIAGE_PULSE_DIR", str(d))
    monkeypatch.setattr(pulse, "_PULSE", None)
    monkeypatch.setattr(pulse, "PUBLISH_EVERY_S", 0.0)
    for _ in pulse.watch(range(5), batch_size=8):
        pass
    ranks = PulseReader(str(d)).sample(now=pulse.stats()["t"], interval_s=2.0)
    assert len(ranks) == 1 and ranks[0].pid == os.getpid()


def test_log_tracker_counts_steps_into_samples_with_batch_size(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    tr = LogTracker(log, batch_size=32)
    assert tr.sample(now=0.0, interval_s=2.0) is None
    with open(log, "ab") as fh:
        fh.write(b"\r 10%| | 100/1000 [00:10<01:30, 9.50it/s]")
    job = tr.sample(now=10.0, interval_s=2.0)
    assert job is not None and job.source == "log:tqdm"
    assert job.steps_per_s == 9.5 and job.samples_per_s == 9.5 * 32  # first reading: the printed rate
    with open(log, "ab") as fh:
        fh.write(b"\r 12%| | 120/1000 [00:12<01:28, 9.40it/s]")
    job = tr.sample(now=12.0, interval_s=2.0)
    assert job is not None and job.steps_per_s == pytest.approx(10.0)  # the counter: 20 steps in 2 s
    assert job.samples_per_s == pytest.approx(320.0) and job.steps == 120
    job = tr.sample(now=40.0, interval_s=2.0)  # no new line for 28 s
    assert job is not None and job.samples_per_s == 0.0 and job.since_progress_s == pytest.approx(28.0)


def test_log_tracker_imagenet_data_wait_and_unrecognised_note(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("Epoch: [0][ 10/5005]\tTime  0.400 ( 0.401)\tData  0.328 ( 0.089)\tLoss 6.9 (6.9)\n")
    job = LogTracker(log, batch_size=256).sample(now=1.0, interval_s=2.0)
    assert job is not None and job.data_wait_pct == pytest.approx(82.0) and job.samples_per_s == 640.0
    other = tmp_path / "other.log"
    other.write_text("hello\nworld\n")
    mon = JobMonitor(log_path=other, use_pulse=False)
    assert mon.sample(now=1.0) is None
    note = mon.note()
    assert note is not None and "2 line(s)" in note and "tqdm" in note and "imagenet" in note


class _Inner:
    name = "fake"

    def __init__(self) -> None:
        self.closed = False

    def host_info(self) -> HostInfo:
        return HostInfo(hostname="h")

    def sample(self) -> Tick:
        return Tick(ts=datetime.now(UTC), interval_s=2.0)

    def status(self) -> SourceStatus:
        return SourceStatus(messages=["inner says"])

    def close(self) -> None:
        self.closed = True


def test_with_job_merges_into_ticks_and_reports_a_vanished_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("Epoch 0:  45%|████▌     | 450/1000 [00:10<00:12, 44.12it/s, v_num=0]\n")
    told: list[str] = []
    inner = _Inner()
    src = WithJob(inner, JobMonitor(log_path=log, batch_size=4, use_pulse=False), 2.0, on_message=told.append)
    tick = src.sample()
    assert tick.job is not None and tick.job.source == "log:lightning" and tick.job.samples_per_s == 44.12 * 4
    log.unlink()
    src.sample()
    assert told == [f"job log {log} has vanished: waiting for it to come back"]
    assert src.status().messages == ["inner says", told[0]]
    src.close()
    assert inner.closed


def test_formats_tried_are_listed_once_when_nothing_matches(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"compiling module {i}\n" for i in range(25)))
    src = WithJob(_Inner(), JobMonitor(log_path=log, use_pulse=False), 2.0)
    assert src.sample().job is None
    src.sample()
    notes = [m for m in src.status().messages if "no progress line recognised" in m]
    assert len(notes) == 1 and "tried imagenet, megatron, deepspeed, hf_trainer, lightning, tqdm" in notes[0]


def test_record_with_job_log_writes_job_columns(tmp_path: Path) -> None:
    from gpu_triage.cli import main
    from gpu_triage.trace.reader import open_trace

    log = tmp_path / "train.log"
    log.write_text("Epoch: [0][ 10/5005]\tTime  0.400 ( 0.401)\tData  0.300 ( 0.089)\tLoss 6.9 (6.9)\n")
    out = tmp_path / "run.parquet"
    rc = main(["record", "-o", str(out), "--source", "sim:healthy", "--gpus", "2", "--fast", "--duration", "10",
               "--job-log", str(log), "--batch-size", "64"])
    assert rc == 0
    trace = open_trace(out)
    jobs = [t.job for t in trace.ticks()]
    assert len(jobs) == 5 and all(j is not None and j.source == "log:imagenet" for j in jobs)
    assert jobs[0].samples_per_s == pytest.approx(160.0) and jobs[0].data_wait_pct == pytest.approx(75.0)
    assert trace.table.schema.metadata[b"gpu_triage.schema"] == b"4"


def test_unreadable_job_log_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_triage.cli import main

    rc = main(["record", "-o", str(tmp_path / "x.parquet"), "--source", "sim:healthy", "--fast", "--duration", "4",
               "--job-log", str(tmp_path / "nodir" / "train.log")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "--job-log" in err and "nodir" in err and "Traceback" not in err
    assert not (tmp_path / "x.parquet").exists()


def test_config_job_table(tmp_path: Path) -> None:
    from gpu_triage.config import parse_config
    from gpu_triage.errors import UserError

    cfg = parse_config({"job": {"batch_size": 256, "log_regex": r"step (?P<step>\d+)"}})
    assert cfg.job_batch_size == 256 and cfg.job_log_regex == r"step (?P<step>\d+)"
    with pytest.raises(UserError, match=r"job\.batch_size is invalid"):
        parse_config({"job": {"batch_size": 0}})
    with pytest.raises(UserError, match=r"job\.log_regex is invalid: unknown group"):
        parse_config({"job": {"log_regex": r"(?P<speed>\d+)"}})
    with pytest.raises(UserError, match=r"job\.log_regex is invalid"):
        parse_config({"job": {"log_regex": "(unclosed"}})


def test_newest_reading_wins_and_a_loss_dict_keeps_the_rate(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    lines = [f" {i % 100:2d}%| | {i}/100000 [00:10<00:10, 50.00it/s]" for i in range(1, 100_001)]
    log.write_text("\n".join(lines) + "\n{'loss': 0.4321, 'learning_rate': 1e-05, 'epoch': 0.3}\n")
    tr = LogTracker(log, batch_size=8)
    tr.follower.tail_start = tr.follower.budget = 1 << 40  # read it all: 100,000 lines printed since the last tick
    job = tr.sample(now=5.0, interval_s=2.0)
    assert job is not None and job.source == "log:tqdm" and job.steps == 100_000
    assert job.steps_per_s == 50.0 and job.samples_per_s == 400.0 and job.loss == 0.4321
    assert tr.unmatched == 0  # only the newest lines were looked at


def test_a_1_gb_line_costs_a_skip_not_a_gigabyte(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    tr = LogTracker(log, batch_size=2)
    tr.sample(now=0.0, interval_s=2.0)
    with open(log, "r+b") as fh:  # 1 GiB without a line end (sparse: no disk used), then a progress line
        fh.truncate(1 << 30)
        fh.seek(1 << 30)
        fh.write(b"\r 5%| | 5/100 [00:01<00:19, 5.00it/s]\n")
    job = tr.sample(now=2.0, interval_s=2.0)
    assert job is not None and job.steps_per_s == 5.0
    assert tr.follower.skipped_bytes > (1 << 30) - (1 << 20)
    assert len(tr.follower._partial) == 0


def test_the_example_config_job_keys_work_when_uncommented() -> None:
    import tomllib

    from gpu_triage.config import parse_config

    text = (Path(__file__).resolve().parents[1] / "config.example.toml").read_text()
    job = text[text.index("[job]"):]
    uncommented = "\n".join(line[2:] if line.startswith("# batch_size") or line.startswith("# log_regex") else line
                            for line in job.splitlines())
    cfg = parse_config(tomllib.loads(uncommented))
    assert cfg.job_batch_size == 256 and cfg.job_log_regex is not None
    from gpu_triage.sources.joblog import compile_user_regex, parse_line

    r = parse_line("step 120 loss 0.5 0.250 s/step", compile_user_regex(cfg.job_log_regex))
    assert r is not None and r.step == 120 and r.step_time_s == 0.25


def test_a_failing_job_side_never_costs_the_cards_tick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, os.getpid(), **_rec(0, 1.0, 1, 1, 0.0, 1.0))

    def listdir(path: object) -> list[str]:  # the OS answers something no one expected
        raise RuntimeError("unexpected answer")

    monkeypatch.setattr(os, "listdir", listdir)
    src = WithJob(_Inner(), JobMonitor(pulse_directory=str(tmp_path)), 2.0)
    ticks = [src.sample() for _ in range(3)]
    assert all(t.job is None for t in ticks) and src.failures == 3
    notes = [m for m in src.status().messages if "could not be read" in m]
    assert notes == [
        "the job's progress could not be read (RuntimeError: unexpected answer); the cards are still recorded"
    ]


@pytest.mark.parametrize(
    "argv",
    [["--job-log", "t.log", "--batch-size", "64"], ["live", "--job-log", "t.log", "--batch-size", "64"],
     ["--job-log", "t.log", "live", "--batch-size", "64"]],
)
def test_job_options_parse_at_the_top_level_and_on_live(argv: list[str]) -> None:
    from gpu_triage.cli import build_parser

    args = build_parser().parse_args(argv)
    assert (args.job_log, args.batch_size) == ("t.log", 64)


def test_batch_size_must_be_a_positive_whole_number(capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_triage.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["record", "-o", "x.parquet", "--batch-size", "0"])
    assert "give the samples per step, 1 to 1,000,000,000" in capsys.readouterr().err


@pytest.mark.slow
def test_two_jobs_without_rank_are_two_series_on_the_exporter_page(tmp_path: Path) -> None:
    """Two plain `python train.py` of one user (no RANK) were both rank 0: one series twice on the page, one
    of them silently dropped by Prometheus."""
    import subprocess

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpu_triage.config import Config
    from gpu_triage.export.collector import TriageCollector
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.model import GpuSample

    d = tmp_path / "p"
    d.mkdir(mode=0o700)
    other = subprocess.Popen(["sleep", "60"])  # noqa: S607 - a second live process of this user
    try:
        mon = JobMonitor(pulse_directory=str(d))
        for t, steps in ((100.0, 10), (102.0, 30)):
            for pid in (os.getpid(), other.pid):
                rec = {**_rec(0, t, steps, steps * 64, 0.1, 1.0), "rank": None, "local_rank": None}
                _write(d, pid, **rec)
            job = mon.sample(now=t + 0.1)
        assert job is not None and sorted(r.rank for r in job.ranks) == [0, 1]
        monitor = Monitor(HostInfo(hostname="h"), Config(), "fake")
        monitor.ingest(Tick(ts=datetime.now(UTC), interval_s=2.0, gpus=[GpuSample(0, util_pct=50.0)], job=job))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(TriageCollector(lambda: monitor.snapshot))
        page = generate_latest(registry).decode()
        samples = [(s.name, tuple(sorted(s.labels.items()))) for fam in text_string_to_metric_families(page)
                   for s in fam.samples if s.name.startswith("gpu_triage_job_rank_")]
        assert samples and len(samples) == len(set(samples))  # no series twice
    finally:
        other.kill()
        other.wait()
