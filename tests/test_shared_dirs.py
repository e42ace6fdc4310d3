"""Recordings and datasets in a directory another local user can write to: nothing planted there is followed.

User A (real, ``useradd``) plants links in a mode-777 directory; root records into it, as a fleet DIR on
shared storage would be used.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_triage.data import H200_TRACE_2S
from gpu_triage.errors import UserError
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.storage.dataset import DatasetWriter
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter
from tests.two_users import User, as_user, needs_root, open_tmp, users

pytestmark = needs_root
__all__ = ["open_tmp", "users"]  # fixtures, used by name

TICKS = open_trace(H200_TRACE_2S).ticks()[:10]
HOST = open_trace(H200_TRACE_2S).host


def _shared_and_victim(root: Path) -> tuple[Path, Path, Path]:
    shared = root / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    private = root / "root-only"
    private.mkdir(mode=0o700)
    victim = private / "precious"
    victim.write_text("root's file\n")
    return shared, private, victim


@pytest.mark.parametrize("in_child", [False, True])
def test_a_link_planted_under_the_temporary_name_is_not_written_through(
        users: tuple[User, User], open_tmp: Path, in_child: bool) -> None:
    a, _b = users
    shared, _private, victim = _shared_and_victim(open_tmp)
    me = os.getpid()

    def plant() -> None:  # the converter's name was .run.parquet.tmp-PID: this pid and the next few
        for pid in range(me, me + 200):
            os.symlink(victim, shared / f".run.parquet.tmp-{pid}")

    as_user(a, plant)
    writer = TraceWriter(shared / "run.parquet", HOST, 2.0, convert_in_child=in_child)
    for t in TICKS:
        writer.append(t)
    out = writer.close()
    assert victim.read_text() == "root's file\n"
    assert not out.is_symlink() and open_trace(out).ticks() == TICKS
    left = [p for p in shared.iterdir() if p.name.startswith(".run.parquet.tmp-") and not p.is_symlink()]
    assert left == []  # the real temporary file was renamed into place; A's links are A's business


def test_a_link_planted_at_the_target_is_replaced_not_written_through(open_tmp: Path) -> None:
    shared, private, _victim = _shared_and_victim(open_tmp)
    (shared / "run.parquet").symlink_to(private / "new-file")  # dangling: "does not exist" to a stat
    writer = TraceWriter(shared / "run.parquet", HOST, 2.0, convert_in_child=False)
    for t in TICKS:
        writer.append(t)
    out = writer.close()
    assert not (private / "new-file").exists() and not out.is_symlink()
    assert open_trace(out).ticks() == TICKS


def _source(start: datetime) -> SimulatedSource:
    return SimulatedSource("healthy", gpus=2, seed=1, interval_s=2.0, start=start)


@pytest.mark.parametrize("planted", ["host link", "date link", "host of A"])
def test_a_planted_partition_is_refused_with_one_line(users: tuple[User, User], open_tmp: Path,
                                                      planted: str) -> None:
    a, _b = users
    shared, private, _victim = _shared_and_victim(open_tmp)

    if planted == "date link":  # root's own host partition, open to others
        (shared / "host=h1").mkdir()
        (shared / "host=h1").chmod(0o777)

    def plant() -> None:
        if planted == "host link":
            os.symlink(private, shared / "host=h1")
        elif planted == "date link":
            os.symlink(private, shared / "host=h1" / "date=2026-01-05")
        else:
            os.mkdir(shared / "host=h1")
            os.chmod(shared / "host=h1", 0o777)

    as_user(a, plant)
    src = _source(datetime(2026, 1, 5, 12, tzinfo=UTC))
    writer = DatasetWriter(shared, src.host_info(), 2.0, hostname="h1")
    with pytest.raises(UserError) as caught:
        writer.append(src.sample())
    line = str(caught.value)
    assert "\n" not in line and "host=h1" in line
    assert ("symbolic link" in line) if "link" in planted else (f"belongs to uid {a.uid}" in line)
    assert sorted(p.name for p in private.iterdir()) == ["precious"]  # nothing written inside


def test_a_partition_planted_for_the_next_day_keeps_the_ticks_in_the_open_file(
        users: tuple[User, User], open_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, _b = users
    shared, private, _victim = _shared_and_victim(open_tmp)
    src = _source(datetime(2026, 1, 5, 23, 50, tzinfo=UTC))
    writer = DatasetWriter(shared, src.host_info(), 2.0, hostname="h1")
    for _ in range(10):
        writer.append(src.sample())
    (shared / "host=h1").chmod(0o777)  # a partition others may write to: A plants tomorrow's

    def plant() -> None:
        os.symlink(private, shared / "host=h1" / "date=2026-01-06")

    as_user(a, plant)
    caplog.set_level(logging.ERROR, logger="gpu_triage.storage.dataset")
    ticks = 10
    for _ in range(600):  # 20 minutes: across midnight
        writer.append(src.sample())
        ticks += 1
    writer.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "date=2026-01-06 is a symbolic link" in said[0] and "still recording" in said[0]
    assert sorted(p.name for p in private.iterdir()) == ["precious"]
    files = sorted((shared / "host=h1" / "date=2026-01-05").glob("*.parquet"))
    assert sum(open_trace(f).n for f in files) == ticks  # every tick kept, in the partition that was ours
