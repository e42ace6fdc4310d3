"""Read the :mod:`gpu_triage.pulse` files of a training job's ranks, once per tick.

Each rank of a job that calls ``gpu_triage.pulse.step()`` publishes a small fixed-size record in the pulse
directory. :class:`PulseReader` reads them all without trusting the directory: nobody else may write to it
(and, unless it was named explicitly, it is the reader's own or root's), each file must be a regular file of
the directory's owner, a pid must
still be the process that wrote the record (its start time, from /proc), and at most
``MAX_PULSE_FILES`` are read per tick. Rates come from the cumulative steps and samples between two
records; :class:`gpu_triage.sources.job.JobMonitor` merges the ranks into the tick's job sample.
"""

from __future__ import annotations

import logging
import math
import os
import stat
from dataclasses import dataclass
from typing import Any

from gpu_triage import pulse
from gpu_triage.model import JobRank, job_figure

log = logging.getLogger(__name__)


def stale_after(step_time_s: float | None, interval_s: float) -> float:
    """Seconds without a step after which a job counts as stopped (a pulse's rank and a log alike)."""
    return max(3.0 * (step_time_s or 0.0), 2.0 * interval_s, 1.0)


@dataclass(slots=True)
class _RankState:
    prev: dict[str, Any] | None = None  # the record of the previous tick
    last: dict[str, Any] | None = None  # the newest record
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    step_time_s: float | None = None
    data_wait_pct: float | None = None


MAX_PULSE_FILES = 256  # pulse files read per tick: a job has a rank per card; more is someone filling the dir
PID_MAX = 2**22  # the kernel's PID_MAX_LIMIT: no pid is larger


class PulseReader:
    """Reads the pulse files in the pulse directory once per tick; one rank per live process.

    The directory and its files may come from another local user, so only these are read: a directory that
    is no symbolic link, not writable by group or others, owned by this user or root (or by anyone when it
    was named explicitly: ``GPU_TRIAGE_PULSE_DIR`` or ``directory``); in it, regular files (``fstat`` of the
    descriptor opened with ``O_NOFOLLOW``) named ``pulse-PID.json`` with PID in canonical decimal, owned by
    the directory's owner (or any user when root owns the directory), whose PID is a live process of the
    file's owner started when the record says (``start_ticks``: a reused pid is another process). At most
    ``MAX_PULSE_FILES`` a tick. Whatever is refused is said once, in a log warning and in ``messages``.
    """

    def __init__(self, directory: str | None = None) -> None:
        self.explicit = directory is not None or bool(os.environ.get("GPU_TRIAGE_PULSE_DIR"))
        self.directory = directory or pulse.pulse_dir()
        self._ranks: dict[int, _RankState] = {}  # by pid
        self._unranked: dict[int, int] = {}  # pid -> the rank number given to a process without RANK
        self.messages: list[str] = []
        self._said: set[str] = set()

    def _say(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", text)
            self.messages.append(text)

    def _open_dir(self) -> tuple[int, os.stat_result] | None:
        try:
            dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None  # no job has published yet
        except OSError as exc:
            self._say("dir", f"pulse directory {self.directory}: not read ({exc.strerror or exc}: a symbolic link "
                             "or not a directory); remove it, the job makes its own")
            return None
        st = os.fstat(dfd)
        uid = os.geteuid()
        why = None
        if st.st_mode & 0o022:
            why = f"group or others may write to it (mode {stat.S_IMODE(st.st_mode):o})"
        elif not self.explicit and st.st_uid not in (uid, 0):
            why = f"it belongs to uid {st.st_uid}, not to this user (uid {uid}) or root"
        if why is not None:
            os.close(dfd)
            self._say("dir", f"pulse directory {self.directory}: not read, {why}; another user may have made "
                             "it: remove it (the job makes its own, mode 700)")
            return None
        self._said.discard("dir")
        return dfd, st

    def sample(self, now: float, interval_s: float) -> list[JobRank]:
        opened = self._open_dir()
        seen: set[int] = set()
        if opened is not None:
            dfd, dst = opened
            try:
                self._read_all(dfd, dst, seen)
            finally:
                os.close(dfd)
        for pid in list(self._ranks):
            if pid not in seen:
                del self._ranks[pid]  # the process ended (its file is gone) or died
                self._unranked.pop(pid, None)
        self._number_unranked()
        out = [self._rank(pid, s, now, interval_s, self._unranked.get(pid))
               for pid, s in self._ranks.items() if s.last is not None]
        out.sort(key=lambda r: (r.rank, r.pid or 0))
        return out

    def _read_all(self, dfd: int, dst: os.stat_result, seen: set[int]) -> None:
        try:
            names = os.listdir(dfd)
        except OSError:
            return
        followed, others = self._listed_pids(names)
        total = len(followed) + len(others)
        if total > MAX_PULSE_FILES:
            # the processes already followed first, so that a flood of new files cannot push a rank out
            self._say("many", f"pulse directory {self.directory}: {total} pulse files, "
                              f"{total - MAX_PULSE_FILES} not read (at most {MAX_PULSE_FILES} a tick)")
            # then new files of live processes: a dead pid's file is never worth a read, and listing /proc once
            # (only on this flooded path) costs less than a stat per name; without it, directory order decided
            # whether a new job was read at all
            try:
                live = {int(n) for n in os.listdir("/proc") if n.isdigit()}
            except OSError:
                live = set()
            others.sort(key=lambda pid: pid not in live)
            others = others[: max(0, MAX_PULSE_FILES - len(followed))]
            followed = followed[:MAX_PULSE_FILES]
        pids = sorted(followed + others)
        for pid in pids:
            self._follow(dfd, pid, dst.st_uid, seen)

    def _listed_pids(self, names: list[str]) -> tuple[list[int], list[int]]:
        """The pids of the pulse files among ``names``: those already followed, and the others."""
        followed: list[int] = []
        others: list[int] = []
        for name in names:  # string tests, not a regex: a flooded directory is 100,000 names a tick
            if name.startswith("pulse-") and name.endswith(".json"):
                digits = name[6:-5]
                # canonical decimal only (no 0-prefix, sign or space): one name per pid
                if digits.isascii() and digits.isdigit() and digits[0] != "0" and len(digits) <= 7:
                    pid = int(digits)
                    if pid <= PID_MAX:
                        (followed if pid in self._ranks else others).append(pid)
        return followed, others

    def _follow(self, dfd: int, pid: int, dir_uid: int, seen: set[int]) -> None:
        """Read ``pid``'s pulse file into its rank's state, when the file is to be trusted and its process's."""
        got = self._read(dfd, f"pulse-{pid}.json", dir_uid)
        if got is None:
            return
        owner, rec = got
        state = self._ranks.get(pid)
        ref = rec if rec is not None else (state.last if state is not None else None)
        if ref is None or not _owned_by(pid, owner, ref):
            return
        if state is None or (rec is not None and state.last is not None
                             and rec.get("start_ticks") != state.last.get("start_ticks")):
            state = self._ranks[pid] = _RankState()  # a new process under a pid seen before
            self._unranked.pop(pid, None)
        seen.add(pid)
        if rec is not None:
            self._update(state, rec)

    @staticmethod
    def _read(dfd: int, name: str, dir_uid: int) -> tuple[int, dict[str, Any] | None] | None:
        """(the file's owner, its record or None when torn), None when the file is not to be trusted."""
        try:  # O_NONBLOCK and regular files only: a FIFO named pulse-PID.json froze the sampler on open
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (dir_uid != 0 and st.st_uid != dir_uid):
                return None
            data = os.read(fd, pulse.RECORD_BYTES)
        except OSError:
            return None
        finally:
            os.close(fd)
        rec = pulse.decode_record(data)
        if rec is not None and rec.get("pid", int(name[6:-5])) != int(name[6:-5]):
            return None  # a record copied from another process's file
        return st.st_uid, rec

    def _number_unranked(self) -> None:
        """A distinct rank number for each process without RANK (two plain ``python train.py`` of one user
        were both rank 0: one series, one silently dropped by Prometheus): the lowest number no other
        process holds, kept for the process's life unless a process with that RANK appears."""
        ranks = {pid: _u32(s.last.get("rank")) for pid, s in self._ranks.items() if s.last is not None}
        unranked = sorted(pid for pid, r in ranks.items() if r is None)
        taken = {r for r in ranks.values() if r is not None}
        for pid in list(self._unranked):
            n = self._unranked[pid]
            if pid in unranked and n not in taken:
                taken.add(n)
            else:
                del self._unranked[pid]
        for pid in unranked:
            if pid not in self._unranked:
                n = 0
                while n in taken:
                    n += 1
                self._unranked[pid] = n
                taken.add(n)

    @staticmethod
    def _update(state: _RankState, rec: dict[str, Any]) -> None:
        last = state.last
        if last is not None and rec.get("t") == last.get("t"):
            return  # nothing new since the previous tick
        state.prev, state.last = last, rec
        if last is None:
            return
        try:
            dt = float(rec["t"]) - float(last["t"])
            dsteps = int(rec["steps"]) - int(last["steps"])
            if not math.isfinite(dt) or dt <= 0 or dsteps < 0:
                return
            # measured figures: one that is no finite number within its physical range is not measured (a
            # pulse file's counters are the job's to write: 1e300 samples in a microsecond divide to infinity)
            state.steps_per_s = job_figure("steps_per_s", dsteps / dt)
            if rec.get("samples") is not None and last.get("samples") is not None:
                state.samples_per_s = job_figure("samples_per_s", (int(rec["samples"]) - int(last["samples"])) / dt)
            dtimed = int(rec.get("timed_steps") or 0) - int(last.get("timed_steps") or 0)
            dstep_s = float(rec.get("step_s") or 0.0) - float(last.get("step_s") or 0.0)
            dwait = float(rec.get("wait_s") or 0.0) - float(last.get("wait_s") or 0.0)
            if dtimed > 0 and dstep_s > 0:
                state.step_time_s = job_figure("step_time_s", dstep_s / dtimed)
                state.data_wait_pct = job_figure("data_wait_pct", min(100.0, max(0.0, 100.0 * dwait / dstep_s)))
            elif dsteps > 0:
                state.step_time_s = job_figure("step_time_s", dt / dsteps)
        except (KeyError, TypeError, ValueError, OverflowError):
            log.debug("pulse record without the expected fields: %r", rec)

    @staticmethod
    def _rank(pid: int, s: _RankState, now: float, interval_s: float, unranked: int | None) -> JobRank:
        rec = s.last or {}
        last_step = _finite(rec.get("last_step")) or _finite(rec.get("t"))
        since = max(0.0, now - last_step) if last_step else None
        rank = _u32(rec.get("rank"))
        r = JobRank(
            rank=rank if rank is not None else unranked or 0,
            local_rank=_u32(rec.get("local_rank")),
            world_size=_u32(rec.get("world_size")),
            pid=pid,
            samples_per_s=s.samples_per_s,
            steps_per_s=s.steps_per_s,
            step_time_s=s.step_time_s,
            data_wait_pct=s.data_wait_pct,
            since_progress_s=since,
        )
        if since is not None and since > stale_after(s.step_time_s, interval_s):
            r.samples_per_s = 0.0 if r.samples_per_s is not None else None
            r.steps_per_s = 0.0
        return r


def _u32(v: Any) -> int | None:
    """A rank, local rank or world size as its trace column (u32) holds it, else None: a job started with
    LOCAL_RANK=-1 (``not distributed`` in some launchers) or a damaged pulse file made every tick of the
    recording unwritable, the cards' readings lost with it."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 else None


def _finite(v: Any) -> float | None:
    """A pulse time as a float, None when it is not a finite number (NaN, 1e400, a 400-digit integer)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


_HAVE_PROC = os.path.isdir("/proc/self")


def _owned_by(pid: int, owner: int, rec: dict[str, Any]) -> bool:
    """Whether ``pid`` is a live process of uid ``owner`` started when ``rec`` says (where it says).

    Where there is /proc, the uid of ``/proc/PID/stat`` (the process's) and its start time decide; kill(pid, 0)
    cannot: it answers EPERM for any other user's process, pid 1 included. A mismatch is another process,
    or a file planted for someone else's pid: the record is ignored."""
    if not _HAVE_PROC:
        try:
            os.kill(pid, 0)
        except OSError:  # EPERM: not ours, so not this file's owner's to report
            return False
        return owner == os.geteuid()
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return False
    try:
        uid = os.fstat(fd).st_uid
        data = os.read(fd, 4096)
    except OSError:
        return False
    finally:
        os.close(fd)
    if uid != owner:
        return False
    want = rec.get("start_ticks")
    if want is None:
        return True  # a writer without the field (an older gpu_triage in the job's environment)
    return pulse.start_ticks_of(data) == want
