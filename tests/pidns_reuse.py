"""Run inside a new pid namespace (``unshare --pid --fork --mount-proc``) by tests/test_proc_control.py:
a real process A is pinned (the confirmation opened), A exits, a real process B gets A's pid (written to
this namespace's ns_last_pid), then the signal is sent. Prints one JSON line: what the user was told, whether
B got A's pid, whether B is still alive.

Modes: ``pidfd``, ``proc_dir`` and ``start`` (ProcControl through a pidfd, through an open /proc/PID
directory, through the start time alone), ``ui`` (the dashboard under Pilot: Tab, x, then K once B holds the
pid). A lives longer than a clock tick, as every process picked from the table does: the start time has
clock-tick resolution.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "app")]

from gpu_triage.config import Config  # noqa: E402
from gpu_triage.model import ProcSample  # noqa: E402
from gpu_triage.proc_control import ProcControl, proc_start_time  # noqa: E402


def reuse(pid: int) -> subprocess.Popen[bytes]:
    """A new process on ``pid``: the next pid the kernel gives in this namespace is ns_last_pid + 1."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
        fh.write(str(pid - 1))
    b = subprocess.Popen(["sleep", "61"])
    # Popen returns once exec began (its close-on-exec pipe closed); the new image's command line is set a moment
    # later, and until then /proc/PID/cmdline reads empty: wait for it, bounded, so B's details are B's
    deadline = time.monotonic() + 10.0
    while not Path(f"/proc/{b.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.001)
    return b


def _killed(pid: int) -> bool:
    """Whether ``pid`` was sent SIGKILL: it is gone, a zombie, or SIGKILL is pending on it. Read at once, with no
    wait: the kernel marks a SIGKILL pending before kill() returns, and it stays so until the process is dead."""
    try:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except FileNotFoundError:
        return True
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return status["State"].split()[0] in ("Z", "X") or bool(pending & (1 << 8))  # bit 8: signal 9


def control_mode(mode: str) -> dict[str, object]:
    a = subprocess.Popen(["sleep", "60"])
    time.sleep(0.05)  # A lives past a clock tick, the start time's resolution, as a process picked from the table does
    if mode == "pidfd":
        control = ProcControl()
    elif mode == "proc_dir":
        control = ProcControl(pidfd=False)
    else:
        control = ProcControl(pidfd=False, start_time=proc_start_time)
    pinned = control.pin(a.pid)
    assert not isinstance(pinned, str), pinned
    shown = pinned.details.cmdline
    how = "pidfd" if pinned.fd is not None else "proc_dir" if pinned.proc_dir is not None else "start"
    a.kill()
    a.wait()
    b = reuse(a.pid)
    error = control.send(pinned, "SIGKILL")
    pinned.close()
    alive = not _killed(b.pid)
    after = control.details(b.pid).cmdline  # the cache is keyed by (pid, start): B's own command line
    b.kill()
    return {"error": error, "reused": b.pid == a.pid, "b_alive": alive, "shown": shown, "after": after,
            "how": how}


async def ui_mode() -> dict[str, object]:
    from gpu_triage.ui.app import TriageApp
    from tests.ui_ticks import TickListSource, make_tick

    a = subprocess.Popen(["sleep", "60"])
    time.sleep(0.05)  # A lives past a clock tick, the start time's resolution, as a process picked from the table does
    procs = [ProcSample(pid=a.pid, gpu_index=0, name="sleep", gpu_mem_bytes=1 << 30, cpu_pct=0.0, workers=0)]
    prefill = [dataclasses.replace(make_tick(i, gpus=2, cores=2), procs=procs) for i in range(3)]
    app = TriageApp(Config(), source=TickListSource(2, 2), source_label="test", prefill=prefill, autostart=False)
    app.procs.control = ProcControl()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab", "x")
        await pilot.pause()
        dialog = str(app.screen.query_one("#signal").render())
        a.kill()
        a.wait()
        b = reuse(a.pid)
        await pilot.press("K")
        await pilot.pause()
        told = [str(n.message) for n in app._notifications]
    alive = not _killed(b.pid)
    b.kill()
    return {"error": " | ".join(told), "reused": b.pid == a.pid, "b_alive": alive, "shown": dialog}


def main() -> None:
    mode = sys.argv[1]
    if mode == "ui":
        out = asyncio.run(ui_mode())
    else:
        out = control_mode(mode)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
