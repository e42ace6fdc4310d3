"""--job-log: the formats people's training prints, and following a file the way tail -F does."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpu_triage.sources.joblog import compile_user_regex, parse_line
from gpu_triage.sources.logfollower import LogFollower

DATA = Path(__file__).parent / "data" / "joblogs"


# -- formats ------------------------------------------------------------------------------------------
def test_tqdm_rates_in_both_directions_and_with_units() -> None:
    r = parse_line("  3%|▎         | 10/313 [00:01<00:30,  9.87it/s]")
    assert r is not None and r.fmt == "tqdm"
    assert (r.step, r.total, r.steps_per_s, r.samples_per_s) == (10, 313, 9.87, None)
    r = parse_line("train:  40%|████      | 40/100 [00:49<01:13,  1.23s/it, loss=0.512]")
    assert r is not None and r.step_time_s == 1.23 and r.loss == 0.512
    assert r.steps_per_s == pytest.approx(1 / 1.23)
    r = parse_line("100%|██████████| 5000/5000 [00:10<00:00, 1.52kimg/s]")
    assert r is not None and r.samples_per_s == 1520.0 and r.steps_per_s is None
    r = parse_line("train: 1234it [00:10, 123.40it/s, loss=1.5]")  # no total: a loop bounded by time
    assert r is not None and (r.step, r.total, r.steps_per_s, r.loss) == (1234, None, 123.4, 1.5)
    r = parse_line(" 12%|█▏        | 120/1000 [00:03<?, ?it/s]")
    assert r is None  # no rate yet: nothing to read


def test_lightning_bars() -> None:
    r = parse_line("Epoch 0:  45%|████▌     | 450/1000 [00:10<00:12, 44.12it/s, v_num=0, train_loss=0.123]")
    assert r is not None and r.fmt == "lightning"
    assert (r.step, r.total, r.steps_per_s, r.loss) == (450, 1000, 44.12, 0.123)
    r = parse_line("Epoch 1/9  ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 450/1000 0:00:10 • 0:00:12 44.12it/s v_num: 0 loss: 0.1")
    assert r is not None and r.fmt == "lightning" and r.steps_per_s == 44.12 and r.step == 450


def test_hf_trainer_dicts() -> None:
    r = parse_line("{'loss': 0.6931, 'grad_norm': 1.25, 'learning_rate': 4.5e-05, 'epoch': 0.5}")
    assert r is not None and r.fmt == "hf_trainer" and r.loss == 0.6931 and r.epoch == 0.5
    assert r.samples_per_s is None
    r = parse_line("{'train_runtime': 10.21, 'train_samples_per_second': 98.04, 'train_steps_per_second': 12.25, "
                   "'train_loss': 0.52, 'epoch': 1.0}")
    assert r is not None and r.samples_per_s == 98.04 and r.steps_per_s == 12.25 and r.loss == 0.52
    assert parse_line("{'unrelated': 1}") is None


def test_imagenet_example_gives_step_time_and_data_wait() -> None:
    r = parse_line("Epoch: [0][ 10/5005]\tTime  0.312 ( 0.401)\tData  0.002 ( 0.089)\tLoss 6.9078e+00 (6.9100e+00)"
                   "\tAcc@1   0.00 (  0.10)\tAcc@5   0.39 (  0.49)")
    assert r is not None and r.fmt == "imagenet"
    assert (r.step, r.total, r.step_time_s, r.data_time_s, r.loss, r.epoch) == (10, 5005, 0.312, 0.002, 6.9078, 0.0)


def test_megatron_and_deepspeed_iteration_lines() -> None:
    r = parse_line(" iteration       10/    1000 | consumed samples:          640 | elapsed time per iteration (ms): "
                   "312.5 | learning rate: 1.500E-04 | global batch size:    64 | lm loss: 7.123456E+00 | "
                   "loss scale: 65536.0 | grad norm: 2.345 |")
    assert r is not None and r.fmt == "megatron"
    assert r.step == 10 and r.step_time_s == 0.3125 and r.batch == 64 and r.samples_per_s == pytest.approx(204.8)
    assert r.loss == pytest.approx(7.123456)
    r = parse_line("[2026-11-30 10:00:00,000] [INFO] [timer.py:260:stop] epoch=0/micro_step=20/global_step=20, "
                   "RunningAvgSamplesPerSec=123.4, CurrSamplesPerSec=125.1, MemAllocated=1.2GB, MaxMemAllocated=3.4GB")
    assert r is not None and r.fmt == "deepspeed" and r.samples_per_s == 125.1 and r.step == 20


def test_user_regex_named_groups() -> None:
    rx = compile_user_regex(r"step (?P<step>\d+) took (?P<step_time_s>[\d.]+)s")
    r = parse_line("[rank0] step 42 took 0.250s", rx)
    assert r is not None and r.fmt == "user regex" and r.step == 42 and r.steps_per_s == 4.0
    with pytest.raises(ValueError, match="unknown group"):
        compile_user_regex(r"(?P<speed>\d+)")
    with pytest.raises(ValueError, match="needs one of"):
        compile_user_regex(r"(?P<loss>[\d.]+)")


@pytest.mark.parametrize("line", ["", "hello", "loss went down", "\x1b[2K", "{'loss': [}", "Epoch: [x][1/2]"])
def test_ordinary_lines_are_not_progress(line: str) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize("path", sorted(DATA.glob("*.log")), ids=lambda p: p.name)
def test_real_logs_from_the_gpu_machine_are_recognised(path: Path) -> None:
    follower = LogFollower(path, tail_start=1 << 40)  # whole file
    lines = follower.poll()
    readings = [r for r in (parse_line(x) for x in lines) if r is not None]
    assert readings, f"no progress line recognised in {path.name}"
    assert any(r.samples_per_s or r.steps_per_s or r.step_time_s for r in readings)


# -- following ----------------------------------------------------------------------------------------
def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def test_follows_appends_and_carriage_return_updates(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    f = LogFollower(log)
    assert f.poll() == []
    _append(log, b"starting\n\r  1%| | 1/100 [00:01<01:40, 1.00it/s]\r  2%| | 2/100 [00:02<01:38, 1.00it/s]")
    assert f.poll() == ["starting", "  1%| | 1/100 [00:01<01:40, 1.00it/s]"]
    assert f.partial() == "  2%| | 2/100 [00:02<01:38, 1.00it/s]"  # drawn, waiting for its next redraw
    _append(log, b"\r  3%| | 3/100 [00:03<01:37, 1.00it/s]\n")
    assert f.poll() == ["  2%| | 2/100 [00:02<01:38, 1.00it/s]", "  3%| | 3/100 [00:03<01:37, 1.00it/s]"]


def test_file_that_appears_later_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    f = LogFollower(log)
    f.check_start()  # not there yet, but its directory is: fine
    assert f.poll() == [] and f.missing
    log.write_bytes(b"one\n")
    assert f.poll() == ["one"] and not f.missing
    _append(log, b"two\n")
    log.rename(tmp_path / "train.log.1")  # logrotate: the old file moves away...
    assert f.poll() == ["two"] and f.missing  # ...its last lines are still read
    log.write_bytes(b"three\n")  # ...and a new one starts
    assert f.poll() == ["three"]
    log.write_bytes(b"4\n")  # truncated in place (copytruncate, `> log`): read again from the top
    assert f.poll() == ["4"]


def test_long_line_and_binary_are_skipped_with_bounded_memory(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    f = LogFollower(log, max_line=1000, chunk=4096, budget=1 << 20)
    _append(log, b"before\n" + b"x" * 50_000)
    assert f.poll() == ["before"]
    assert len(f._partial) <= 1000  # the long line is not kept
    _append(log, b"y" * 50_000 + b"\nafter\n" + b"\x00\x01\x02binary\x00\n" + bytes(range(128, 256)) + b"\nend\n")
    assert f.poll() == ["after", "end"]
    assert f.long_lines == 1 and f.binary_lines == 2


def test_a_writer_far_ahead_is_skipped_to_the_tail(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    f = LogFollower(log, chunk=4096, budget=64 * 1024, tail_start=4096)
    f.poll()
    _append(log, b"".join(b"line %07d\n" % i for i in range(100_000)))  # 1.3 MB at once
    lines = f.poll()
    assert lines[-1] == "line 0099999"  # the newest line is read...
    assert len(lines) < 1000 and f.skipped_bytes > 1_000_000  # ...without reading everything before it


def test_existing_log_starts_near_its_end(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"".join(b"old %06d\n" % i for i in range(50_000)))
    f = LogFollower(log, tail_start=1000)
    lines = f.poll()
    assert lines[-1] == "old 049999" and 50 < len(lines) < 120
    assert all(x.startswith("old ") and len(x) == 10 for x in lines)  # no torn first line


def test_check_start_refuses_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="is a directory"):
        LogFollower(tmp_path).check_start()
    with pytest.raises(FileNotFoundError, match="neither the file nor its directory"):
        LogFollower(tmp_path / "no" / "train.log").check_start()
    locked = tmp_path / "locked.log"
    locked.write_text("x")
    locked.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(PermissionError):
            LogFollower(locked).check_start()


# -- time linear in the line ------------------------------------------------------------------------------
# Inputs on which a backtracking form of a built-in pattern takes time quadratic in their length (the
# first: a tqdm pattern restarting inside a run of digits, seconds for 8192 of them). Linear: 8 times the line, about
# 8 times the work; quadratic: 64 times. The time is measured as the least of several runs (the machine
# is shared) and compared between two lengths, never against a fixed figure.
HOSTILE_LINES = {
    "digits": lambda n: "1" * n,
    "digits after a rich bar": lambda n: "1/1 1 • " + "1" * (n - 8),
    "deepspeed keys": lambda n: ("global_step=1 RunningAvgSamplesPerSec=1 " * n)[:n],
    "dict starts": lambda n: ("{'a': " * n)[:n],
}


def _work(line: str) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        for _ in range(3):
            parse_line(line)
        best = min(best, time.process_time() - t)
    return best


@pytest.mark.parametrize("case", sorted(HOSTILE_LINES))
def test_every_built_in_format_parses_in_time_linear_in_the_line(case: str) -> None:
    make = HOSTILE_LINES[case]
    small, big = _work(make(1024)), _work(make(8192))
    assert big <= 24 * small + 0.003, f"{case}: {big * 1e3:.1f} ms for 8192 characters, {small * 1e3:.2f} ms for 1024"


def test_the_issues_log_of_long_digit_lines_is_read_at_once(tmp_path: Path) -> None:
    """The issue's reproduction, 8 lines of 8190 '1's, is read as one tick in well under a second of CPU
    (generous: a tick is 2 s): no reading, every line counted."""
    from gpu_triage.sources.job import LogTracker

    log = tmp_path / "d.log"
    log.write_text(("1" * 8190 + "\n") * 8)
    tracker = LogTracker(log)
    t = time.process_time()
    assert tracker.sample(0.0, 2.0) is None
    assert time.process_time() - t < 1.0
    assert tracker.unmatched == 8 and tracker.parsed_chars == 8 * 8190


def test_characters_parsed_per_tick_are_bounded_and_the_newest_line_still_counts(tmp_path: Path) -> None:
    from gpu_triage.sources.job import LogTracker
    from gpu_triage.sources.joblog import PARSE_BUDGET_CHARS

    log = tmp_path / "flood.log"
    log.write_text(("x" * 8000 + "\n") * 120 + "train: 10/100 [00:01<00:09, 9.50it/s]\n")
    tracker = LogTracker(log, batch_size=4)
    tracker.follower.tail_start = 2 << 20  # read the whole file on this first poll
    got = tracker.sample(0.0, 2.0)
    assert got is not None and got.steps_per_s == 9.5
    tracker.follower.close()
    log.write_text(("x" * 8000 + "\n") * 1500)
    flood = LogTracker(log)
    flood.follower.tail_start = flood.follower.budget = 16 << 20
    flood.sample(0.0, 2.0)
    assert 0 < flood.parsed_chars <= PARSE_BUDGET_CHARS  # 12 MB arrived; at most the budget was parsed


def test_a_user_regex_is_matched_in_linear_time_whatever_the_pattern() -> None:
    """(a+)+$ is exponential in Python's engine (30 characters: seconds); RE2 has no backtracking."""
    rx = compile_user_regex(r"(?P<step>(a+)+)$")
    t = time.process_time()
    assert parse_line("a" * 4000 + "!", rx) is None
    assert time.process_time() - t < 1.0
    assert parse_line("x" * 9000, compile_user_regex(r"(?P<step>\d+)")) is None  # over MAX_PARSE_CHARS


def test_a_user_regex_re2_cannot_match_linearly_is_refused_in_words() -> None:
    for pattern in (r"(?<=step )(?P<step>\d+)", r"(?P<step>\d+) \1"):
        with pytest.raises(ValueError, match="RE2 .linear time., which has no lookaround or backreferences"):
            compile_user_regex(pattern)
    with pytest.raises(ValueError, match="at most 4096"):
        compile_user_regex("(?P<step>1)" + "a" * 5000)
