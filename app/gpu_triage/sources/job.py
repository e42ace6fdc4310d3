"""The job's own progress, merged into each tick: from :mod:`gpu_triage.pulse` files and/or a job log.

:class:`JobMonitor` is polled once per tick (on the sampler thread) and returns a
:class:`~gpu_triage.model.JobSample` or None when no source has said anything yet. :class:`WithJob`
wraps any :class:`~gpu_triage.sources.base.Source` so that its ticks carry ``tick.job``.

Rates come from the job's counters where it has them: the pulse's cumulative steps and samples between
two publications (exact), a log's step counter between two polls; else the rate the log line prints.
When a job stops advancing, its rate is 0 and ``since_progress_s`` grows: never a stale rate. "Stopped"
means no step for longer than ``max(3 steps, 2 ticks, 1 s)``.
"""

from __future__ import annotations

import logging
import math
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_triage import pulse
from gpu_triage.model import HostInfo, JobRank, JobSample, Tick
from gpu_triage.sources.base import Source, SourceStatus
from gpu_triage.sources.joblog import (
    FORMAT_NAMES,
    MAX_PARSE_CHARS,
    PARSE_BUDGET_CHARS,
    Reading,
    UserRegex,
    parse_line,
)
from gpu_triage.sources.logfollower import LogFollower

log = logging.getLogger(__name__)


MAX_PARSE_LINES = 2000  # lines looked at per tick, newest first (see LogTracker._scan)
NOTE_AFTER_LINES = 20  # lines read without one progress line before the formats tried are listed


def _stale_after(step_time_s: float | None, interval_s: float) -> float:
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
        total = len(followed) + len(others)
        if total > MAX_PULSE_FILES:
            # the processes already followed first, so that a flood of new files cannot push a rank out
            self._say("many", f"pulse directory {self.directory}: {total} pulse files, "
                              f"{total - MAX_PULSE_FILES} not read (at most {MAX_PULSE_FILES} a tick)")
            others = others[: max(0, MAX_PULSE_FILES - len(followed))]
            followed = followed[:MAX_PULSE_FILES]
        pids = sorted(followed + others)
        for pid in pids:
            got = self._read(dfd, f"pulse-{pid}.json", dst.st_uid)
            if got is None:
                continue
            owner, rec = got
            state = self._ranks.get(pid)
            ref = rec if rec is not None else (state.last if state is not None else None)
            if ref is None or not _owned_by(pid, owner, ref):
                continue
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
            state.steps_per_s = dsteps / dt
            if rec.get("samples") is not None and last.get("samples") is not None:
                state.samples_per_s = (int(rec["samples"]) - int(last["samples"])) / dt
            dtimed = int(rec.get("timed_steps") or 0) - int(last.get("timed_steps") or 0)
            dstep_s = float(rec.get("step_s") or 0.0) - float(last.get("step_s") or 0.0)
            dwait = float(rec.get("wait_s") or 0.0) - float(last.get("wait_s") or 0.0)
            if dtimed > 0 and dstep_s > 0:
                state.step_time_s = dstep_s / dtimed
                state.data_wait_pct = min(100.0, max(0.0, 100.0 * dwait / dstep_s))
            elif dsteps > 0:
                state.step_time_s = dt / dsteps
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
        if since is not None and since > _stale_after(s.step_time_s, interval_s):
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


class LogTracker:
    """Follows a job log and keeps what its newest progress lines say."""

    def __init__(self, path: Path | str, batch_size: int | None = None, user_regex: UserRegex | None = None,
                 follower: LogFollower | None = None) -> None:
        self.follower = follower or LogFollower(path)
        self.batch_size = batch_size
        self.user_regex = user_regex
        self.latest: Reading | None = None
        self.matched: dict[str, int] = {}
        self.unmatched = 0
        self.parsed_chars = 0  # characters given to the parsers since start (bounded per tick)
        self._last_progress: float | None = None  # wall time the counter last advanced (or a line matched)
        self._prev_step: tuple[float, int] | None = None  # (time, step) at the previous tick
        self._prev_means: Reading | None = None  # the previous tick's reading, for _span_means
        self._last_span: tuple[float, float] | None = None
        self._vanished_said = False
        self.messages: list[str] = []

    def _scan(self, lines: list[str], now: float) -> None:
        """Newest line first, up to the newest line that says something about progress: only the latest
        reading matters, and a writer that printed 100,000 lines since the last tick costs a few, not all."""
        newest_loss = None
        found: Reading | None = None
        budget = PARSE_BUDGET_CHARS  # and a bound on the characters parsed: lines of 8 KiB cost 8 KiB each
        for line in reversed(lines[-MAX_PARSE_LINES:]):
            cost = len(line) if len(line) <= MAX_PARSE_CHARS else 0  # longer: not parsed (parse_line)
            budget -= cost
            if budget < 0:
                break
            self.parsed_chars += cost
            r = parse_line(line, self.user_regex)
            if r is None:
                self.unmatched += 1
                continue
            self.matched[r.fmt] = self.matched.get(r.fmt, 0) + 1
            if r.samples_per_s is None and r.steps_per_s is None and r.step is None and r.step_time_s is None:
                # a log dict with a loss and no rate (Hugging Face Trainer): keep the rate, take the loss
                newest_loss = r.loss if newest_loss is None else newest_loss
                found = found or (r if self.latest is None else None)
                continue
            found = r
            break
        if found is not None:
            prev = self.latest
            if prev is None or found.step is None or prev.step is None or found.step != prev.step:
                self._last_progress = now
            self.latest = found
        if newest_loss is not None and self.latest is not None:
            self.latest.loss = newest_loss

    def sample(self, now: float, interval_s: float) -> JobSample | None:
        lines = self.follower.poll()
        partial = self.follower.partial()
        if partial.rstrip().endswith("]"):  # a tqdm bar drawn and waiting for its next redraw
            lines.append(partial)
        self._scan(lines, now)
        if self.follower.missing and not self._vanished_said:
            self._vanished_said = True
            self.messages.append(f"job log {self.follower.path} has vanished: waiting for it to come back")
        elif not self.follower.missing:
            self._vanished_said = False
        r = self.latest
        if r is None:
            return None
        bs = r.batch or self.batch_size
        steps_per_s = r.steps_per_s
        step_time = r.step_time_s or (1.0 / steps_per_s if steps_per_s else None)
        # the job's own counter between two ticks beats an averaged printed rate
        if r.step is not None:
            if self._prev_step is not None and r.step > self._prev_step[1] and now > self._prev_step[0]:
                steps_per_s = (r.step - self._prev_step[1]) / (now - self._prev_step[0])
            if self._prev_step is None or r.step != self._prev_step[1]:
                self._prev_step = (now, r.step)
        samples = r.samples_per_s
        if samples is None and steps_per_s is not None and bs:
            samples = steps_per_s * bs
        wait = None
        if r.data_time_s is not None and r.step_time_s:
            wait = min(100.0, max(0.0, 100.0 * r.data_time_s / r.step_time_s))
        span = self._span_means(r)
        if span is not None:  # the running means of two lines: step time and data wait over the span between
            step_time, wait = span
        since = None if self._last_progress is None else max(0.0, now - self._last_progress)
        if since is not None and since > _stale_after(step_time, interval_s) and r.step is not None:
            samples = 0.0 if samples is not None else None
            steps_per_s = 0.0
        return JobSample(
            source=f"log:{r.fmt}",
            samples_per_s=samples,
            steps_per_s=steps_per_s,
            step_time_s=step_time,
            data_wait_pct=wait,
            since_progress_s=since,
            steps=r.step,
            loss=r.loss,
        )

    def _span_means(self, r: Reading) -> tuple[float, float] | None:
        """Mean step time and data-wait share between the previous tick's line and this one, from the job's
        running means (ImageNet example: mean x count is the total so far in the epoch); None when not known."""
        prev = self._prev_means
        if prev is r:  # no new line this tick: the last span's figures still stand
            return self._last_span
        self._prev_means = r
        self._last_span = None
        if prev is None or r.epoch != prev.epoch:
            return None
        n1, n2 = prev.step, r.step
        t1, t2, d1, d2 = prev.avg_step_time_s, r.avg_step_time_s, prev.avg_data_time_s, r.avg_data_time_s
        if n1 is None or n2 is None or t1 is None or t2 is None or d1 is None or d2 is None or n2 <= n1:
            return None
        dt = t2 * n2 - t1 * n1
        if dt <= 0:
            return None
        self._last_span = (dt / (n2 - n1), min(100.0, max(0.0, 100.0 * (d2 * n2 - d1 * n1) / dt)))
        return self._last_span

    def not_matched_note(self) -> str | None:
        """What to tell the user when lines came but none was a progress line."""
        if self.latest is not None or self.unmatched == 0:
            return None
        return (f"no progress line recognised in {self.unmatched} line(s) of {self.follower.path}: tried "
                f"{', '.join(FORMAT_NAMES if self.user_regex is not None else FORMAT_NAMES[1:])}; "
                "set [job] log_regex in the config")


class JobMonitor:
    """The job's progress from the pulse directory and/or a log, one :class:`JobSample` per tick."""

    def __init__(self, *, log_path: Path | str | None = None, batch_size: int | None = None,
                 user_regex: UserRegex | None = None, pulse_directory: str | None = None,
                 use_pulse: bool = True) -> None:
        self.pulse = PulseReader(pulse_directory) if use_pulse else None
        self.log = LogTracker(log_path, batch_size, user_regex) if log_path is not None else None
        self.batch_size = batch_size

    def check_start(self) -> None:
        if self.log is not None:
            self.log.follower.check_start()

    def sample(self, now: float | None = None, interval_s: float = 2.0) -> JobSample | None:
        now = time.time() if now is None else now
        ranks = self.pulse.sample(now, interval_s) if self.pulse is not None else []
        from_log = self.log.sample(now, interval_s) if self.log is not None else None
        if ranks:
            job = _combine(ranks)
            if from_log is not None and job.loss is None:
                job.loss = from_log.loss
            return job
        return from_log

    def messages(self) -> list[str]:
        out: list[str] = []
        if self.pulse is not None:
            out, self.pulse.messages = self.pulse.messages, []
        if self.log is not None:
            out, self.log.messages = out + self.log.messages, []
        return out

    def note(self) -> str | None:
        return self.log.not_matched_note() if self.log is not None else None

    def current_notice(self) -> str | None:
        """What the job pane should say about the log now: gone, not there yet, or nothing recognised."""
        if self.log is None:
            return None
        follower = self.log.follower
        if follower.missing:
            if self.log.latest is None and follower.lines == 0:
                return f"waiting for the job log {follower.path} to appear"
            return f"job log {follower.path} has vanished: waiting for it to come back"
        if self.log.unmatched >= NOTE_AFTER_LINES:
            return self.note()
        return None

    def close(self) -> None:
        if self.log is not None:
            self.log.follower.close()


def _combine(ranks: list[JobRank]) -> JobSample:
    """The whole job from its ranks: rates summed, step time and data wait of the slowest, oldest progress."""

    def known(values: list[float | None]) -> list[float]:
        return [v for v in values if v is not None]

    sps = known([r.samples_per_s for r in ranks])
    steps = known([r.steps_per_s for r in ranks])
    st = known([r.step_time_s for r in ranks])
    wait = known([r.data_wait_pct for r in ranks])
    since = known([r.since_progress_s for r in ranks])
    return JobSample(
        source="pulse",
        samples_per_s=sum(sps) if len(sps) == len(ranks) and sps else None,
        steps_per_s=min(steps) if steps else None,  # ranks of one job step together: the slowest sets the pace
        step_time_s=max(st) if st else None,
        data_wait_pct=max(wait) if wait else None,
        since_progress_s=max(since) if since else None,
        ranks=ranks,
    )


class WithJob:
    """A source whose ticks carry ``tick.job`` from a :class:`JobMonitor`; everything else is the inner one's."""

    def __init__(self, inner: Source, monitor: JobMonitor, interval_s: float,
                 on_message: Callable[[str], None] | None = None) -> None:
        self.inner = inner
        self.monitor = monitor
        self.interval_s = interval_s
        self.name = inner.name
        self.on_message = on_message  # told each new job notice at once (the headless recorder prints it)
        self._messages: list[str] = []  # the last few job notices, kept on the banner
        self._noted = False
        self.failures = 0  # ticks whose job side failed (the first is logged with its traceback)
        self._failing = False

    def host_info(self) -> HostInfo:
        return self.inner.host_info()

    def sample(self) -> Tick:
        tick = self.inner.sample()
        messages = []
        try:
            tick.job = self.monitor.sample(tick.ts.timestamp(), tick.interval_s or self.interval_s)
            self._failing = False
        except Exception as exc:  # the cards' tick must not be lost to the job's side: said once, then counted
            self.failures += 1
            self._failing = True
            tick.job = None
            if self.failures == 1:
                log.warning("job source failed: %s: %s", type(exc).__name__, exc, exc_info=True)
                messages.append(f"the job's progress could not be read ({type(exc).__name__}: {exc}); "
                                "the cards are still recorded")
        messages += self.monitor.messages()
        note = None if self._noted else self.monitor.note()
        if note is not None and self.monitor.log is not None and self.monitor.log.unmatched >= NOTE_AFTER_LINES:
            self._noted = True
            messages.append(note)
        for message in messages:
            self._messages = [*self._messages[-4:], message]
            if self.on_message is not None:
                self.on_message(message)
        return tick

    def job_notice(self) -> str | None:
        """One line for the job pane: the job side failing, else the log's state (see JobMonitor)."""
        if self._failing:
            return "the job's progress could not be read (see the log); the cards are still shown"
        return self.monitor.current_notice()

    def status(self) -> SourceStatus:
        st = self.inner.status()
        if not self._messages:
            return st
        return SourceStatus(st.gpu_available, set(st.lost_gpus), [*st.messages, *self._messages])

    def close(self) -> None:
        self.monitor.close()
        self.inner.close()


def monitor_for(
    job_log: str | None, batch_size: int | None, config: Any, *, use_pulse: bool = True
) -> JobMonitor | None:
    """The job monitor ``live`` and ``record`` run: the pulse directory always (when ``use_pulse``), the log when
    ``--job-log`` is given. A log path that cannot be followed is a UserError (one line, exit 2) here, at start."""
    from gpu_triage.errors import UserError
    from gpu_triage.sources.joblog import compile_user_regex

    if job_log is None and not use_pulse:
        return None
    regex = compile_user_regex(config.job_log_regex) if getattr(config, "job_log_regex", None) else None
    mon = JobMonitor(log_path=Path(job_log).expanduser() if job_log else None,
                     batch_size=batch_size or getattr(config, "job_batch_size", None), user_regex=regex,
                     use_pulse=use_pulse)
    try:
        mon.check_start()
    except OSError as exc:
        text = exc.strerror if isinstance(exc, PermissionError) and exc.strerror else str(exc)
        raise UserError(f"--job-log {job_log}: cannot follow it ({text}): give a readable log file") from exc
    return mon
