"""What each training process is doing while its card waits: its stacks (py-spy) and threads (/proc), sampled
beside the ticks in a thread of their own.

Why a thread: a dump takes 20-100 ms (py-spy's start-up, then reading the job's memory), which must neither
delay a tick nor pace it. Why only while a card waits (sources/waiting.py: a 45/55 % band of GPU-Util): a job
that keeps its card busy needs no explanation, and a healthy job is then not touched at all. The pace: a burst of
BURST_DUMPS dumps BURST_EVERY_S apart when a process's card starts waiting (at most one per BURST_COOLDOWN_S),
then one per ``every_s`` for KEEP dumps, then one per ``every_s`` x SETTLED_FACTOR while the wait lasts; its
DataLoader workers one at a time in turn. Whatever the paces ask, every py-spy run of every process draws on one
budget a minute (sources/dumpbudget.py: 24 by default), so the cost is bounded whatever the jobs and however many
start: 5-10 ms of py-spy CPU per dump on a real H200 job, the job's step time unchanged beyond its spread
(docs/performance.md).

The reports are kept per (pid, start time), so a pid reused by another process starts afresh, and over the last
``keep`` dumps only: the phase shares follow the job as it changes.

Each dump is also one :class:`~gpu_triage.model.StackSample` (the trace's ``stacks`` column, every Python thread
of the process in its ``thread_list``): :meth:`drain` hands over those finished since its last call, so a tick
carries the dumps taken during it. A process py-spy cannot read gives one sample saying why, not one per dump;
the reason is said again only when it changes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpu_triage.model import StackSample, Tick
from gpu_triage.safetext import clean
from gpu_triage.sources.dumpbudget import DumpBudget, InsideSettings
from gpu_triage.sources.phases import (
    Phase,
    PhaseShare,
    classify,
    gil_holder,
    main_thread_phases,
    naming_frames,
    process_phase,
    thread_samples,
)
from gpu_triage.sources.stacks import ACCESS_PROBLEMS, StackDump, StackReader, ThreadStack
from gpu_triage.sources.threads import ThreadInfo, ThreadReader, busy_threads
from gpu_triage.sources.waiting import WaitingCards

log = logging.getLogger(__name__)

EVERY_S = 2.0  # one dump per process per this many seconds at most, past a burst
KEEP = 15  # dumps kept per process: 30 s at the default pace
# When a card starts waiting its processes are dumped BURST_DUMPS times, BURST_EVERY_S apart, then at the
# ordinary pace: a verdict that needs the stacks has six within 3 s of the wait beginning instead of one or two.
# At most one burst per process per BURST_COOLDOWN_S, so a card that comes and goes cannot keep the rate up:
# at about 10 ms of py-spy CPU a dump (docs/performance.md), a burst a minute adds under 0.1 % of a core.
BURST_DUMPS = 6
BURST_EVERY_S = 0.5
BURST_COOLDOWN_S = 60.0
# A wait that lasts has told its story in its first KEEP dumps: past them a process is dumped SETTLED_FACTOR times
# less often (every 4 s at the default pace), which still follows a change of phase within seconds and halves
# py-spy's CPU over a long wait (a dump cost 5-10 ms of py-spy's CPU on the H200: one every 2 s is 0.25-0.5 % of a
# core, the whole budget of +0.5 % over --no-stacks once the monitor's own reading of the dumps is counted).
SETTLED_FACTOR = 2.0
MAX_PROCESSES = 16  # processes followed at once (one per card of the largest servers)
# A round follows each tick (want() wakes it): at a 2 s tick, a round that came a few ms early would wait for the
# next one and the job's stacks would come every other tick. A dump is due once most of ``every_s`` has passed.
PACE_SLACK = 0.8
#: A round's time, all its dumps together: 16 processes whose py-spy each takes its whole DUMP_TIMEOUT_S must
#: not hold a snapshot (its dumps run in line) for minutes.
ROUND_S = 4.0
MAX_PENDING = 256  # samples kept for drain(): a caller that never drains (snapshot, doctor) holds no more
#: Problems that stop every dump on this machine, not one process's: the notice names them with their fix.
MACHINE_PROBLEMS = ("no_pyspy", "pyspy_refused", "permission")


@dataclass(frozen=True)
class InsideReport:
    """One training process as seen from inside over its last dumps."""

    pid: int
    share: PhaseShare  # the main thread's phases (a waiting main thread takes the phase it waits on)
    busy_threads: int | None  # threads on a CPU ≥ 20 % of a core at the last read; None before a second read
    workers: dict[Phase, int]  # DataLoader workers' phases at their last dumps
    error: str | None  # why there are no stacks (stacks.ACCESS_PROBLEMS' key), None when they read
    # another thread seen holding the GIL on a CPU while the main thread was off one: (its name, in how many
    # dumps), the most frequent; None when no dump showed one
    gil_holder: tuple[str, int] | None = None

    def sentence(self) -> str:
        """One line of evidence: "main thread in optimizer 8 of 9 dumps (Adam.step), 16 threads busy"."""
        if self.error is not None and not self.share.samples:
            return f"no stacks: {self.error}"
        lead = self.share.leading
        if lead is None:
            return "no stacks yet"
        phase, frac = lead
        n = round(frac * self.share.samples)
        top = self.share.top_frames.get(phase)
        text = f"main thread {phase.value} in {n} of {self.share.samples} dumps" + (f" ({top})" if top else "")
        if self.busy_threads is not None:
            text += f", {self.busy_threads} thread{'s' if self.busy_threads != 1 else ''} busy"
        if self.workers:
            text += ", workers: " + ", ".join(f"{c} {p.value}" for p, c in sorted(self.workers.items()))
        if self.gil_holder is not None:
            tid, dumps = self.gil_holder
            text += f", thread {tid} held the GIL in {dumps} dumps while the main thread was idle"
        return text


class _Followed:
    def __init__(self, start: int | None, since: float) -> None:
        self.start = start
        self.since = since  # when it was first due: its place in the queue until its first dump
        self.dumps: deque[tuple[StackDump, list[ThreadInfo] | None]] = deque(maxlen=KEEP)
        self.last = 0.0
        self.next_worker = 0
        self.workers: dict[int, Phase] = {}
        self.busy: int | None = None
        self.error: str | None = None
        self.said: dict[int, str] = {}  # the error last given as a sample, per pid dumped (the process, a worker)
        self.burst_left = 0  # dumps still to take at the burst's pace
        self.taken = 0  # dumps taken since it started waiting

    @property
    def waited_since(self) -> float:
        """Since when it has waited for a dump: its last one, or since it was first due."""
        return self.last if self.taken else self.since


def _stat_field(pid: int, proc_root: str, k: int) -> int | None:
    """Field ``k`` of /proc/PID/stat counted after the command name (0: the state), None when unreadable; the
    command name, which its process chooses, may hold spaces and parentheses: the fields start after its last ")"."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            data = f.read(4096)
        return int(data[data.rindex(b")") + 2 :].split()[k])
    except (OSError, ValueError, IndexError):
        return None


def _start_time(pid: int, proc_root: str) -> int | None:
    return _stat_field(pid, proc_root, 19)  # starttime (field 22): with the pid, which process it is


def _parent_of(pid: int, proc_root: str) -> int | None:
    return _stat_field(pid, proc_root, 1)  # ppid (field 4)


class InsideSampler:
    """Dumps the processes it is told are waiting, in its own thread; :meth:`reports` reads the results."""

    def __init__(self, stacks: StackReader | None = None, threads: ThreadReader | None = None, *,
                 every_s: float = EVERY_S, proc_root: str = "/proc",
                 clock: Callable[[], float] = time.monotonic, settings: InsideSettings | None = None,
                 burst_dumps: int = BURST_DUMPS, burst_every_s: float = BURST_EVERY_S) -> None:
        settings = settings or InsideSettings()
        self.stacks = stacks or StackReader()
        self.threads = threads or ThreadReader(proc_root)
        self.every_s = every_s
        self.cards = WaitingCards(settings.band)
        # every py-spy run of every process counts against one budget a minute (sources/dumpbudget.py)
        self.budget = DumpBudget(settings.dumps_per_min, clock)
        self.burst_dumps = burst_dumps
        self.burst_every_s = min(burst_every_s, every_s)
        self.settled_s = every_s * SETTLED_FACTOR
        self._burst: set[int] = set()  # pids whose card started waiting, a burst asked for
        # when each process's last burst began: kept past its card's wait (a card that comes and goes must
        # not earn a burst each time), forgotten after the cooldown
        self._burst_at: dict[int, float] = {}
        self.proc_root = proc_root
        self._clock = clock
        self._lock = threading.Lock()
        self._followed: dict[int, _Followed] = {}
        self._want: list[tuple[int, list[int]]] = []  # (pid, worker pids) to look at, newest call wins
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending: deque[StackSample] = deque(maxlen=MAX_PENDING)
        self.problem: str | None = None  # the first machine-wide problem met (MACHINE_PROBLEMS' key)

    @property
    def available(self) -> bool:
        return self.stacks.available

    def notice(self) -> str | None:
        """One line on why no stacks are read here, with its fix; None while they read (or none was tried)."""
        if not self.available and self.stacks.refused is not None:
            return f"no stacks: {self.stacks.refused}"  # names the py-spy found and why it was not run
        key = "no_pyspy" if not self.available else self.problem
        return None if key is None else f"no stacks: {ACCESS_PROBLEMS[key]}"

    def drain(self) -> list[StackSample]:
        """The samples finished since the last call, oldest first."""
        with self._lock:
            out = list(self._pending)
            self._pending.clear()
        return out

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpu-triage-inside", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def follow(self, tick: Tick) -> None:
        """The processes whose card waits at ``tick`` (the hysteresis of sources/waiting.py) are dumped from
        now on, with a burst for those whose card has just started waiting; the others no longer."""
        waiting, started = self.cards.update(tick)
        self.want(waiting, burst=started)

    def want(self, waiting: Iterable[tuple[int, list[int]]], burst: Iterable[int] = ()) -> None:
        """The processes whose cards wait now, with their worker pids; the others are no longer dumped. Those in
        ``burst`` are dumped BURST_DUMPS times at the burst's pace first (unless one burst within the cooldown)."""
        with self._lock:
            self._want = list(waiting)[:MAX_PROCESSES]
            self._burst |= set(burst)
        self._wake.set()

    def _pace(self) -> float:
        """How long the thread may sleep before a dump is due: the burst's pace while one is on, and no less than
        the time until the budget allows a run. A round while the budget is spent dumps nothing: in a storm of new
        jobs a burst waiting on the budget would otherwise wake the thread every BURST_EVERY_S for a round that
        reads every wanted process's /proc entry and is refused. Each tick's want() still wakes it at once (a
        new process, a burst asked for, one no longer wanted)."""
        with self._lock:
            bursting = bool(self._burst) or any(f.burst_left for f in self._followed.values())
        return max(self.burst_every_s if bursting else self.every_s, self.budget.wait_s())

    def reports(self) -> dict[int, InsideReport]:
        with self._lock:
            return {pid: InsideReport(pid, main_thread_phases(list(f.dumps)), f.busy, _count(f.workers.values()),
                                      f.error, gil_holder(d for d, _ in f.dumps))
                    for pid, f in self._followed.items() if f.dumps or f.error}

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self._pace())
            self._wake.clear()
            try:
                self.step()
            except Exception:  # the sampler must outlive any one process's oddity; said in the log
                log.exception("inside sampler: a round failed")

    def step(self) -> None:
        """One round: each wanted process not dumped within ``every_s`` is dumped once, with one worker, the
        least recently dumped first, until ROUND_S has passed or the minute's dump budget is spent: the processes
        left wait for a later round (a burst's dumps too: it goes on when the budget allows)."""
        deadline = time.monotonic() + ROUND_S
        want, burst, waited, now = self._round_start()
        # the process that has waited longest for a dump goes first (one a slow round or a spent budget left out;
        # one never dumped counts from when it was first due): a storm of new processes cannot starve an old one
        want.sort(key=lambda w: waited.get(w[0], now))
        for pid, workers in want:
            if time.monotonic() >= deadline:
                break
            start = _start_time(pid, self.proc_root)
            f = self._due(pid, start, burst)
            if f is None:
                continue
            dump = self.stacks.dump(pid, deadline, self.budget.take)
            threads = self.threads.read(pid, self._clock())
            if _start_time(pid, self.proc_root) != start:
                continue  # the process ended during its dump and its pid is another's: neither is this one
            busy = busy_threads(threads) if threads and any(t.cpu_pct is not None for t in threads) else None
            samples = [self._main_sample(f, dump, threads, busy)]
            worker_phase = None
            if workers and dump.error is None:
                worker_phase, sample = self._dump_worker(f, pid, workers, deadline)
                samples.append(sample)
            self._keep(f, dump, threads, busy, samples, workers, worker_phase)

    def _round_start(self) -> tuple[list[tuple[int, list[int]]], set[int], dict[int, float], float]:
        """The round's wanted processes, its bursts (taken, so each is asked for once) and when each followed
        process began waiting; processes no longer wanted are forgotten here, before any dump."""
        with self._lock:
            want = list(self._want)
            burst, self._burst = self._burst, set()
            now = self._clock()
            self._burst_at = {p: t for p, t in self._burst_at.items() if now - t < BURST_COOLDOWN_S}
            live = {pid for pid, _ in want}
            for pid in [p for p in self._followed if p not in live]:
                del self._followed[pid]
                self.threads.forget(pid)
            waited = {pid: f.waited_since for pid, f in self._followed.items()}
        return want, burst, waited, now

    def _due(self, pid: int, start: int | None, burst: set[int]) -> _Followed | None:
        """The process's follow state when a dump of it is due now and the minute's budget grants one (counted as
        taken), else None: it keeps its place in the queue. A pid whose start time changed is a new process."""
        now = self._clock()
        with self._lock:
            f = self._followed.get(pid)
            if f is None or f.start != start:  # new, or its pid now another process's
                f = self._followed[pid] = _Followed(start, now)
            if pid in burst and now - self._burst_at.get(pid, now - BURST_COOLDOWN_S) >= BURST_COOLDOWN_S:
                self._burst_at[pid], f.burst_left = now, self.burst_dumps
            pace = self.burst_every_s if f.burst_left else self.every_s if f.taken < KEEP else self.settled_s
            if now - f.last < pace * PACE_SLACK:
                return None
            if not self.budget.take():  # the minute's dumps are spent: it keeps its place in the queue
                return None
            f.last = now
            f.burst_left = max(0, f.burst_left - 1)
            f.taken += 1
        return f

    def _dump_worker(self, f: _Followed, pid: int, workers: list[int], deadline: float,
                     ) -> tuple[tuple[int, Phase] | None, StackSample | None]:
        """One of the process's workers, in turn, dumped when the budget allows: its (pid, phase) and sample."""
        w = workers[f.next_worker % len(workers)]
        f.next_worker += 1
        # the worker pids are a tick old and workers re-spawn each epoch: a pid is dumped as this
        # process's worker only while it is its child, before and after the dump
        if _parent_of(w, self.proc_root) == pid and self.budget.take():
            wdump = self.stacks.dump(w, deadline, self.budget.take)
            if _parent_of(w, self.proc_root) == pid:
                phase = classify(wdump.main)
                return (w, phase), self._worker_sample(f, wdump, pid, phase)
        return None, None

    def _keep(self, f: _Followed, dump: StackDump, threads: list[ThreadInfo] | None, busy: int | None,
              samples: list[StackSample | None], workers: list[int], worker_phase: tuple[int, Phase] | None) -> None:
        """The round's findings for one process, stored under the lock the reporting side reads with."""
        with self._lock:
            if dump.error is None:
                f.dumps.append((dump, threads))
            f.error = dump.error
            if dump.error in MACHINE_PROBLEMS and self.problem is None:
                self.problem = dump.error
            self._pending.extend(x for x in samples if x is not None)
            f.busy = busy
            f.workers = {w: p for w, p in f.workers.items() if w in workers}
            if worker_phase is not None:
                f.workers[worker_phase[0]] = worker_phase[1]

    @staticmethod
    def _unsaid(f: _Followed, pid: int, error: str | None) -> bool:
        """A failed dump becomes a sample once per reason: the same failure every 2 s says nothing new."""
        if error is None:
            f.said.pop(pid, None)
            return True
        if f.said.get(pid) == error:
            return False
        f.said[pid] = error
        return True

    def _main_sample(self, f: _Followed, dump: StackDump, threads: list[ThreadInfo] | None,
                     busy: int | None) -> StackSample | None:
        if not self._unsaid(f, dump.pid, dump.error):
            return None
        count = _task_count(dump.pid, self.proc_root)
        if dump.error is not None:
            return StackSample(dump.pid, "main", Phase.UNKNOWN.value, error=clean(dump.error), busy_threads=busy,
                               threads=count)
        phase = process_phase(dump, threads)
        return StackSample(dump.pid, "main", phase.value, frames=naming_frames(_named_by(dump, phase), phase),
                           busy_threads=busy, threads=count, thread_list=thread_samples(dump, threads))

    def _worker_sample(self, f: _Followed, dump: StackDump, parent: int, phase: Phase) -> StackSample | None:
        if not self._unsaid(f, dump.pid, dump.error):
            return None
        # a worker's own threads are not followed (their CPU shares would need a reader per worker): the count only
        return StackSample(dump.pid, "worker", phase.value, parent_pid=parent,
                           frames=naming_frames(dump.main, phase) if dump.error is None else None,
                           threads=_task_count(dump.pid, self.proc_root),
                           error=clean(dump.error) if dump.error is not None else None,
                           thread_list=thread_samples(dump) if dump.error is None else [])


def _named_by(dump: StackDump, phase: Phase) -> ThreadStack | None:
    """The thread whose stack gave the process its phase: the main thread, or the one it waits on."""
    main = dump.main
    if main is None or classify(main) is phase or main.active:
        return main
    return next((th for th in dump.threads if th.tid != dump.pid and th.active and classify(th) is phase), main)


def _task_count(pid: int, proc_root: str) -> int | None:
    """The process's threads, all of them (the thread reader reads at most MAX_THREADS), within the column's
    u16: another user's process may hold more threads than the trace can store, and must not stop a recording."""
    try:
        return min(len(os.listdir(f"{proc_root}/{pid}/task")), 0xFFFF)
    except OSError:
        return None


def _count(phases: Iterable[Phase]) -> dict[Phase, int]:
    out: dict[Phase, int] = {}
    for p in phases:
        out[p] = out.get(p, 0) + 1
    return out


def report_json(r: InsideReport) -> dict[str, object]:
    return {"pid": r.pid, "samples": r.share.samples,
            "phases": {p.value: round(v, 3) for p, v in r.share.shares.items()},
            "top_frames": {p.value: f for p, f in r.share.top_frames.items()}, "busy_threads": r.busy_threads,
            "workers": {p.value: c for p, c in r.workers.items()}, "error": r.error,
            "gil_holder": None if r.gil_holder is None else {"thread": r.gil_holder[0], "dumps": r.gil_holder[1]},
            "evidence": r.sentence()}
