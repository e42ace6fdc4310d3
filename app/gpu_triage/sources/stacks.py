"""The Python stacks of a training process, read from outside with py-spy, without pausing it.

Why py-spy: it reads a live CPython's frames from /proc/PID/mem (ptrace rights, no cooperation from the job,
nothing to install in it), and ``dump --nonblocking`` does so without stopping the process: on a real H200 a
dump every 0.5 s left a training step's time inside its run-to-run spread (docs/performance.md). It is an
optional extra (``gpu-triage[stacks]``, a Rust binary in its PyPI wheel) or any ``py-spy`` on PATH.

Each dump is one subprocess with a deadline; its output is another user's program's frame names and file
names, so it is bounded (threads, frames, characters) and its control characters are made visible
(:func:`gpu_triage.safetext.clean`) before anything draws or prints them. A process that cannot be read
is said once per reason, with what would fix it (``ACCESS_PROBLEMS``).
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpu_triage.safetext import clean

log = logging.getLogger(__name__)

#: One dump's deadline: py-spy answers in 20-100 ms on a live PyTorch job (H200 and this box); a process it
#: cannot attach to must not hold a tick.
DUMP_TIMEOUT_S = 3.0
MAX_THREADS = 256  # a process with thousands of threads still costs one bounded parse
MAX_FRAMES = 64  # innermost frames kept per thread: the phase lives near the top
MAX_TEXT = 200  # characters of a frame's name or file
MAX_OUTPUT = 4 << 20  # bytes of py-spy's JSON read at most: past it py-spy is stopped and the dump not read
MAX_STDERR = 64 << 10  # bytes of py-spy's error text kept (its own line comes first)
_CHUNK = 64 << 10
# py-spy gives up on a process of more threads than this (its own limit: it then says it found no Python
# interpreter), and one of 4,000 already takes it 6 s: such a process is counted in /proc and not dumped
PYSPY_MAX_THREADS = 4096


@dataclass(frozen=True, slots=True)
class Frame:
    name: str  # "Adam.step", "_MultiProcessingDataLoaderIter._next_data"
    file: str  # the file as py-spy shortens it to its package part: "torch/optim/adam.py"
    line: int | None


@dataclass(frozen=True, slots=True)
class ThreadStack:
    tid: int  # the OS thread id, as in /proc/PID/task
    name: str | None  # Python's thread name
    active: bool  # on a CPU at the dump (py-spy's idle detection)
    frames: tuple[Frame, ...]  # innermost first
    owns_gil: bool | None = None  # it held the GIL at the dump (py-spy's owns_gil); None where py-spy did not say


@dataclass(frozen=True, slots=True)
class StackDump:
    pid: int
    t: float  # epoch seconds at the dump's start
    took_s: float
    threads: tuple[ThreadStack, ...]
    error: str | None = None  # why there are no threads: one of ACCESS_PROBLEMS' keys, or another line

    @property
    def main(self) -> ThreadStack | None:
        """The process's main thread (its tid is the pid), where a training loop runs."""
        return next((t for t in self.threads if t.tid == self.pid), None)


#: What stops a dump, how py-spy says it, and the one line that fixes it.
ACCESS_PROBLEMS = {
    "no_pyspy": "py-spy is not installed: pip install 'gpu-triage[stacks]' (or py-spy) to see what the job's "
                "threads are doing",
    "pyspy_refused": "the py-spy found was not run: it must be a file that only root (or this user) can write, in "
                     "directories only they can write (the log names it): install it so, or set GPU_TRIAGE_PYSPY",
    "permission": "py-spy may not read this process: run gpu-triage as root or as the job's user, with "
                  "kernel.yama.ptrace_scope=0 (sysctl) or CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE)",
    "not_python": "not a Python process py-spy can read",
    "threads": f"more threads than py-spy reads (it stops at {PYSPY_MAX_THREADS:,}): the stacks are not read",
    "gone": "the process ended",
    "timeout": f"py-spy did not answer within {DUMP_TIMEOUT_S:g} s (or the round's time ran out)",
    "too_big": f"py-spy's dump was over {MAX_OUTPUT >> 20} MiB (thousands of threads, frames or long names): "
               "py-spy was stopped and the dump not read",
    "torn": "py-spy read the stack while the interpreter changed it (--nonblocking never pauses the job); the next "
            "dump reads again",
}

# py-spy's words when a --nonblocking read raced the running interpreter (a code object freed or moved as it
# was copied): about one dump in twenty of a busy Python loop here; a second read a moment later succeeds
_TORN = ("failed to get stack traces", "failed to copy", "bad address")


def find_pyspy(environ: Mapping[str, str] | None = None, interpreter_dir: str | None = None) -> str | None:
    """The py-spy this process may run (:func:`locate_pyspy`), None when there is none or it was refused."""
    return locate_pyspy(environ, interpreter_dir)[0]


def locate_pyspy(environ: Mapping[str, str] | None = None,
                 interpreter_dir: str | None = None) -> tuple[str | None, str | None]:
    """(path, refusal): ``$GPU_TRIAGE_PYSPY``, else the py-spy installed beside this interpreter (the extra), else
    the first on PATH, as a real path that :func:`untrusted_executable` accepts; else (None, the line saying
    which py-spy was refused and why), or (None, None) where there is none at all.

    Root runs this binary against every waiting job: a py-spy someone else could have put or replaced (a
    directory of theirs, an empty PATH entry, which means the current directory) would run as root. PATH
    entries that are empty or relative are never searched."""
    env = os.environ if environ is None else environ
    here = os.path.dirname(sys.executable) if interpreter_dir is None else interpreter_dir
    if explicit := env.get("GPU_TRIAGE_PYSPY"):
        found: str | None = explicit if os.access(explicit, os.X_OK) else None
        if found is None:
            return None, None
    else:
        beside = os.path.join(here, "py-spy")
        found = beside if os.access(beside, os.X_OK) else None
        for entry in ([] if found else env.get("PATH", os.defpath).split(os.pathsep)):
            if not os.path.isabs(entry):  # "" and "." are the current directory: whoever owns it chose the binary
                continue
            candidate = os.path.join(entry, "py-spy")
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                found = candidate
                break
    if found is None:
        return None, None
    why = untrusted_executable(found)
    if why is not None:
        return None, (f"py-spy {clean(found)[:MAX_TEXT]} not run: {why}; install py-spy where only root (or this "
                      "user) can write, or set GPU_TRIAGE_PYSPY to such a py-spy")
    return os.path.realpath(found), None


def untrusted_executable(path: str) -> str | None:
    """Why ``path`` may not be run by this process, None when it may: it must be absolute, a regular file, and
    it and every directory above its real path (links resolved) owned by root or this process's user and not
    writable by group or others. A directory with the sticky bit (``/tmp``) is the one exception: others may
    add names there but never replace one of ours, and the next directory down is checked to be ours."""
    if not os.path.isabs(path):
        return "a relative path (it depends on the current directory)"
    real = os.path.realpath(path)
    trusted = {0, os.geteuid()}
    try:
        st = os.stat(real)
    except OSError as exc:
        return f"cannot look at it ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in trusted:
        return f"it belongs to uid {st.st_uid}, neither root nor this user"
    if st.st_mode & 0o022:
        return "it is writable by group or others"
    parent = os.path.dirname(real)
    while True:
        try:
            dst = os.stat(parent)
        except OSError as exc:
            return f"cannot look at {clean(parent)[:MAX_TEXT]} ({exc.strerror or exc})"
        if dst.st_uid not in trusted:
            return f"directory {clean(parent)[:MAX_TEXT]} belongs to uid {dst.st_uid}, neither root nor this user"
        if dst.st_mode & 0o022 and not dst.st_mode & stat.S_ISVTX:
            return f"directory {clean(parent)[:MAX_TEXT]} is writable by group or others"
        if parent == os.path.dirname(parent):
            return None
        parent = os.path.dirname(parent)


def _text(value: object) -> str:
    # another user's program names its own functions and files: what reaches a terminal is made visible
    return clean(value[:MAX_TEXT]) if isinstance(value, str) else ""


# A job's frames repeat from dump to dump (the same loop, the same lines): each (function, file, line) py-spy gives
# is made a Frame once, its text cleaned once, and kept; another user's program may name frames without end, so the
# table is emptied when full. Only str names and files and int (or absent) lines are kept: a key of other JSON
# types could be unhashable, or equal to another that reads differently (True == 1, 1.0 == 1).
_FRAMES: dict[tuple[str, str, int | None], Frame] = {}
MAX_KEPT_FRAMES = 16384


def _frame(fr: dict[str, object]) -> Frame:
    name, file, line = fr.get("name"), fr.get("short_filename") or fr.get("filename"), fr.get("line")
    if (type(name) is not str or type(file) is not str or not (line is None or type(line) is int)
            or len(name) > MAX_TEXT or len(file) > MAX_TEXT):  # a key holds the text whole: only what is kept whole
        return Frame(_text(name), _text(file), line if isinstance(line, int) and not isinstance(line, bool) else None)
    key = (name, file, line)
    made = _FRAMES.get(key)
    if made is None:
        made = Frame(_text(name), _text(file), line)
        if len(_FRAMES) >= MAX_KEPT_FRAMES:
            _FRAMES.clear()
        _FRAMES[key] = made
    return made


def parse_dump(pid: int, t: float, took_s: float, payload: str) -> StackDump:
    """py-spy's ``dump --json`` output (a list of threads, each with frames innermost first) as a StackDump;
    anything else in it is ignored, never raised on."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return StackDump(pid, t, took_s, (), "py-spy printed something that is not its JSON")
    if not isinstance(data, list):
        return StackDump(pid, t, took_s, (), "py-spy printed something that is not its JSON")
    threads = []
    for th in data[:MAX_THREADS]:
        if not isinstance(th, dict):
            continue
        tid = th.get("os_thread_id")
        frames = th.get("frames")
        if not isinstance(tid, int) or isinstance(tid, bool) or not isinstance(frames, list):
            continue
        kept = [_frame(fr) for fr in frames[:MAX_FRAMES] if isinstance(fr, dict)]
        name = th.get("thread_name")
        gil = th.get("owns_gil")
        threads.append(ThreadStack(tid, _text(name) if isinstance(name, str) else None, th.get("active") is True,
                                   tuple(kept), gil if isinstance(gil, bool) else None))
    return StackDump(pid, t, took_s, tuple(threads))


def thread_count(pid: int) -> int | None:
    """The process's threads, from the ``Threads:`` line of /proc/PID/status; None where unreadable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _problem(stderr: str, pid: int) -> str:
    low = stderr.lower()
    if not os.path.exists(f"/proc/{pid}") or "check that the process is running" in low:
        return "gone"  # py-spy's words when it exits between our look at /proc and its own (seen on the H200)
    if "permission denied" in low or "operation not permitted" in low or "ptrace" in low:
        return "permission"
    if "python" in low and ("version" in low or "interpreter" in low or "not a python" in low):
        count = thread_count(pid)  # threads started since the count before the dump: py-spy's limit, not Python
        return "threads" if count is not None and count > PYSPY_MAX_THREADS else "not_python"
    if any(w in low for w in _TORN):
        return "torn"
    # its own line ("Error: …"), not the last line of the Rust backtrace it may print after it ("10: main")
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    said = next((ln for ln in lines if ln.startswith("Error:")), lines[0] if lines else None)
    return _text(said)[:MAX_TEXT] if said else "py-spy failed without a word"


class StackReader:
    """Dumps processes with py-spy, one subprocess a dump; says each reason a dump fails once in the log."""

    def __init__(self, pyspy: str | None = None, timeout_s: float = DUMP_TIMEOUT_S) -> None:
        if pyspy is None:
            self.pyspy, self.refused = locate_pyspy()
        else:  # a path given by the caller is run under the same rule as one found
            why = untrusted_executable(pyspy)
            self.pyspy = os.path.realpath(pyspy) if why is None else None
            self.refused = None if why is None else f"py-spy {clean(pyspy)[:MAX_TEXT]} not run: {why}"
        self.timeout_s = timeout_s
        self._said: set[str] = set()
        self.cpu_s = 0.0  # py-spy's own CPU over every dump, for the cost figures
        self.bytes_read = 0  # py-spy's output read over every dump (at most MAX_OUTPUT + a chunk a dump)
        self.runs = 0  # py-spy runs started, a torn dump's second read too, for the cost figures

    @property
    def available(self) -> bool:
        return self.pyspy is not None

    def _say(self, key: str, pid: int) -> None:
        if key not in self._said:
            self._said.add(key)
            said = self.refused if key == "pyspy_refused" else ACCESS_PROBLEMS.get(key, key)
            log.warning("stacks of pid %d: %s", pid, said)

    def dump(self, pid: int, deadline: float | None = None, may_retry: Callable[[], bool] | None = None) -> StackDump:
        """One dump of ``pid``, given up at ``deadline`` (``time.monotonic``) where that comes before the dump's
        own ``timeout_s``: a caller dumping many processes bounds the whole round, not each dump. A read that raced
        the interpreter is read once more, if ``may_retry`` (asked then: a second py-spy run) allows it."""
        count = thread_count(pid)
        if count is not None and count > PYSPY_MAX_THREADS:
            self._say("threads", pid)
            return StackDump(pid, time.time(), 0.0, (), "threads")
        first = self._dump_once(pid, deadline)
        if first.error != "torn" or (deadline is not None and time.monotonic() >= deadline):
            return first
        if may_retry is not None and not may_retry():
            return first
        again = self._dump_once(pid, deadline)  # once more, at once: the race is over in microseconds
        if again.error == "torn":
            log.debug("stacks of pid %d: two reads in a row raced the interpreter", pid)
        return again

    def _dump_once(self, pid: int, deadline: float | None = None) -> StackDump:
        t = time.time()
        if self.pyspy is None:
            key = "no_pyspy" if self.refused is None else "pyspy_refused"
            self._say(key, pid)
            return StackDump(pid, t, 0.0, (), key)
        until = time.monotonic() + self.timeout_s
        until = until if deadline is None else min(until, deadline)
        before = os.times()
        self.runs += 1
        try:
            code, out, err, stopped = _run_capped([self.pyspy, "dump", "--pid", str(pid), "--json", "--nonblocking"],
                                                  until)
        except OSError as e:  # the binary vanished or is not executable
            log.warning("py-spy at %s could not run: %s", self.pyspy, e)
            return StackDump(pid, t, time.time() - t, (), "no_pyspy")
        finally:
            after = os.times()
            self.cpu_s += after.children_user + after.children_system - before.children_user - before.children_system
        self.bytes_read += len(out) + len(err)
        took = time.time() - t
        if stopped is not None:
            self._say(stopped, pid)
            return StackDump(pid, t, took, (), stopped)
        if code != 0:
            key = _problem(err[:4000].decode("utf-8", "replace"), pid)
            if key != "torn":  # a race, not a lasting problem: retried by dump, never a warning
                self._say(key, pid)
            return StackDump(pid, t, took, (), key)
        return parse_dump(pid, t, took, out.decode("utf-8", "replace"))


def _run_capped(argv: list[str], until: float) -> tuple[int | None, bytes, bytes, str | None]:
    """Run ``argv`` and read its output as it comes: (exit code, stdout, stderr, why it was stopped). It is
    killed at ``until`` ("timeout") or once its stdout passes MAX_OUTPUT ("too_big"): the dump of another
    user's process is as long as that user makes its threads, frames and names, so it is never held whole."""
    out, err = bytearray(), bytearray()
    stopped: str | None = None
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            with selectors.DefaultSelector() as sel:
                assert proc.stdout is not None and proc.stderr is not None
                sel.register(proc.stdout, selectors.EVENT_READ, out)
                sel.register(proc.stderr, selectors.EVENT_READ, err)
                while sel.get_map() and stopped is None:
                    left = until - time.monotonic()
                    if left <= 0:
                        stopped = "timeout"
                        break
                    for key, _ in sel.select(left):
                        chunk = os.read(key.fd, _CHUNK)
                        if not chunk:
                            sel.unregister(key.fileobj)
                            continue
                        buf: bytearray = key.data
                        buf += chunk
                        if buf is out and len(out) > MAX_OUTPUT:
                            stopped = "too_big"
                        elif buf is err and len(err) > MAX_STDERR:  # its own error is at the start: enough
                            del err[MAX_STDERR:]
                            stopped = stopped or "failed"
            if stopped is None:
                try:
                    proc.wait(timeout=max(0.0, until - time.monotonic()))
                except subprocess.TimeoutExpired:
                    stopped = "timeout"
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
    if stopped == "failed":  # a flood on stderr: read as the failure it says it is
        return proc.returncode, bytes(out), bytes(err), None
    return proc.returncode, bytes(out), bytes(err), stopped


@dataclass(frozen=True, slots=True)
class StackAccess:
    """Whether py-spy can read a training process here: found, and the rights ptrace asks for."""

    pyspy: str | None
    euid: int
    cap_sys_ptrace: bool | None  # in the effective set (containers drop it unless --cap-add SYS_PTRACE)
    ptrace_scope: int | None  # kernel.yama.ptrace_scope: 0 same user, 1 descendants only, 2 admin, 3 none
    refused: str | None = None  # the py-spy found and not run (locate_pyspy's line), where pyspy is None


def stack_access(proc_root: str = "/proc") -> StackAccess:
    """This process's rights to read other processes' stacks, from /proc (None where unreadable)."""
    cap = None
    try:
        with open(f"{proc_root}/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    cap = bool(int(line.split()[1], 16) >> 19 & 1)  # CAP_SYS_PTRACE is capability 19
    except (OSError, ValueError, IndexError):
        cap = None
    scope = None
    try:
        with open(f"{proc_root}/sys/kernel/yama/ptrace_scope", encoding="ascii") as f:
            scope = int(f.read().strip())
    except (OSError, ValueError):
        scope = None  # no Yama: ordinary ptrace rules (same user, or CAP_SYS_PTRACE)
    found, refused = locate_pyspy()
    return StackAccess(found, os.geteuid(), cap, scope, refused)
