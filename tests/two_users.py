"""Two real local users for tests where ownership matters, and a way to run code as one of them.

The interpreter lives under /root, which other users cannot read, so a fresh ``python`` as them could not
start: :func:`as_user` forks this process and drops the child to the user's uid instead. Load every module
the child needs before calling it (the standard library under /root is out of its reach too).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd: two real users")


@dataclass
class User:
    name: str
    uid: int
    gid: int


def _make_user(prefix: str) -> User:
    name = f"{prefix}{os.urandom(3).hex()}"
    subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True)
    pw = pwd.getpwnam(name)
    return User(name, pw.pw_uid, pw.pw_gid)


@pytest.fixture
def users() -> Iterator[tuple[User, User]]:
    made: list[User] = []
    try:
        made.append(_make_user("gta"))
        made.append(_make_user("gtb"))
        yield made[0], made[1]
    finally:
        for u in made:
            subprocess.run(["userdel", u.name], check=False, capture_output=True)


def as_user(user: User, fn: Callable[[], Any], *, before: Callable[[int], None] | None = None) -> Any:
    """``fn()``'s JSON-able result, run in a forked child as ``user``. ``before(child_pid)`` runs in the parent
    after the fork and before the child starts (to plant something named for the child's pid)."""
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            os.close(go_w)
            os.read(go_r, 1)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            out = {"ok": fn()}
            code = 0
        except BaseException as exc:  # noqa: BLE001 - carried back to the test as text
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(w, json.dumps(out).encode())
        os._exit(code)
    os.close(w)
    os.close(go_r)
    try:
        if before is not None:
            before(pid)
    finally:
        os.write(go_w, b"g")
        os.close(go_w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    out = json.loads(data)
    assert "error" not in out, out["error"]
    return out["ok"]


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory every user can reach (pytest's own under /tmp is root's, mode 700)."""
    d = Path(tempfile.mkdtemp(prefix="gpu-triage-test-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
