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

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from gpu_triage.sources.pulsereader import PulseReader, stale_after

log = logging.getLogger(__name__)


MAX_PARSE_LINES = 2000  # lines looked at per tick, newest first (see LogTracker._scan)
NOTE_AFTER_LINES = 20  # lines read without one progress line before the formats tried are listed


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
        self._poll(now)
        r = self.latest
        if r is None:
            return None
        bs = r.batch or self.batch_size
        steps_per_s = r.steps_per_s
        step_time = r.step_time_s or (1.0 / steps_per_s if steps_per_s else None)
        # the job's own counter between two ticks beats an averaged printed rate
        if r.step is not None:
            steps_per_s = self._counter_rate(r.step, now, steps_per_s)
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
        if since is not None and since > stale_after(step_time, interval_s) and r.step is not None:
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

    def _poll(self, now: float) -> None:
        """The log's new lines (and a tqdm bar waiting for its redraw) read; its vanishing said once."""
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

    def _counter_rate(self, step: int, now: float, printed: float | None) -> float | None:
        """Steps/s from the job's step counter since the tick it last moved, else the ``printed`` rate."""
        rate = printed
        if self._prev_step is not None and step > self._prev_step[1] and now > self._prev_step[0]:
            rate = (step - self._prev_step[1]) / (now - self._prev_step[0])
        if self._prev_step is None or step != self._prev_step[1]:
            self._prev_step = (now, step)
        return rate

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
        return dataclasses.replace(st, lost_gpus=set(st.lost_gpus), messages=[*st.messages, *self._messages])

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
