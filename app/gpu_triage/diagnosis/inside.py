"""What the training processes were doing, from inside: their stack samples (trace v3) over the judged ticks.

Each :class:`~gpu_triage.model.StackSample` already carries one phase (``sources/phases.py`` read the py-spy
dump where it was taken); here they are only counted, per training process: how many of its main thread's
samples fell in each phase, the frames most often seen in each, how many of its threads were busy, what its
DataLoader workers were doing, and how many dumps could not be read and why. The phases are plain strings
(the values of ``sources.phases.Phase``): the diagnosis reads a recording's column, not the sampler.

A window without stacks (every recording before trace v3, a job py-spy may not read) gives an empty
:class:`InsideEvidence`, and no rule that reads it holds: the outside rules speak as before.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.threads import ThreadsRead, main_phase, read_threads, sample_shows_loading
from gpu_triage.model import ProcSample, StackSample
from gpu_triage.window import WindowView

# phases, as sources.phases.Phase writes them
UNKNOWN = "unknown"
HOST_COMPUTE = ("optimizer", "backward", "model")  # torch's own code: on the CPU only with a model part there
OWN_PYTHON = ("python",)  # on a CPU in the process's own code (a loop, or C it calls: .item(), a memcpy)
COMPILE = ("compile",)
EXTERNAL = ("wait_service", "sleep")  # off CPU on a socket or poll, or in a sleep
LOADER_WAIT = ("dataloader_wait",)
LOADING = ("loading",)  # the main thread in the DataLoader's fetch or collate: a batch made in-process
NAMED_WAITS = ("wait_service", "sleep", "io_wait")  # off CPU, the kernel's wait channel naming on what
UNNAMED_WAIT = "waiting"  # off CPU, the wait channel naming nothing the classifier knows (or read as none)
WORKER_WAITING = "worker_waiting"  # a DataLoader worker inside the Dataset but off CPU: a fetch's latency


@dataclass(frozen=True, slots=True)
class ProcessInside:
    """One training process's main thread over the judged ticks' samples."""

    pid: int
    cards: tuple[int, ...]
    samples: int  # dumps read
    failed: int  # dumps that could not be read
    counts: dict[str, int]  # phase -> samples
    frames: dict[str, str]  # phase -> the frames most often seen in it
    busy_threads: float  # median threads on a CPU at its dumps; NaN where not known
    workers: dict[str, int] = field(default_factory=dict)  # a worker phase -> its workers' samples in it
    busy_by_phase: dict[str, tuple[int, ...]] = field(default_factory=dict)  # a phase -> busy threads at its dumps
    loading: int = 0  # samples (main thread, any thread of it, its workers) in the input pipeline
    thread_read: ThreadsRead = ThreadsRead()  # what its samples' threads say (trace v4; empty before)

    def share(self, phases: tuple[str, ...]) -> float:
        return sum(self.counts.get(p, 0) for p in phases) / self.samples if self.samples else math.nan

    def count(self, phases: tuple[str, ...]) -> int:
        """How many of the main thread's samples fell in ``phases``."""
        return sum(self.counts.get(p, 0) for p in phases)

    def busy_in(self, phases: tuple[str, ...]) -> float:
        """The median threads on a CPU at the dumps that found the main thread in ``phases``; NaN: not known."""
        busy = sorted(b for p in phases for b in self.busy_by_phase.get(p, ()))
        return float(busy[len(busy) // 2]) if busy else math.nan

    def leading(self, phases: tuple[str, ...]) -> str:
        """The phase among ``phases`` seen most often (ties: the first named)."""
        return max(phases, key=lambda p: (self.counts.get(p, 0), -phases.index(p)))

    @property
    def name(self) -> str:
        where = f" (card {', '.join(map(str, self.cards))})" if self.cards else ""
        return f"pid {self.pid}{where}"

    def fact(self, phases: tuple[str, ...]) -> Fact:
        """"pid 811 (card 0)'s main thread was in optimizer (_multi_tensor_adam (adam.py) < …) in 6 of 8
        samples (16 threads busy)": the share of ``phases`` as the figure."""
        lead = self.leading(phases)
        k = sum(self.counts.get(p, 0) for p in phases)
        seen = sorted((p for p in phases if self.counts.get(p, 0)), key=lambda p: -self.counts[p])
        names = "/".join(seen) or lead  # the leading phase first
        at = f" at {self.frames[lead]}" if self.frames.get(lead) else ""
        b = self.busy_threads
        busy = ("" if math.isnan(b) else " (no thread busy)" if b == 0
                else f" ({b:.0f} thread{'' if b == 1 else 's'} busy)")
        return Fact(f"{self.name}'s main thread was in {names}{at} in {k} of {self.samples} samples{busy}",
                    "main_thread_phase_share", self.share(phases), self.cards, self.pid)

    def workers_fact(self, phase: str) -> Fact | None:
        total = sum(self.workers.values())
        if not total:
            return None
        k = self.workers.get(phase, 0)
        return Fact(f"its DataLoader workers were {phase.replace('_', ' ')} in {k} of {total} samples",
                    "workers_phase_share", k / total, self.cards)


@dataclass(frozen=True, slots=True)
class InsideEvidence:
    """Every training process's inside over the judged ticks, and why dumps failed (said once)."""

    processes: tuple[ProcessInside, ...] = ()
    failed: int = 0
    error: str | None = None  # the first reason a dump could not be read

    @property
    def seen(self) -> bool:
        return bool(self.processes) or self.failed > 0

    def agreeing(self, phases: tuple[str, ...], min_samples: int, share: float) -> list[ProcessInside]:
        """The processes read often enough, when in every one of them ``phases`` hold at least ``share`` of
        the main thread's samples; empty otherwise (a rank elsewhere vetoes: the ranks do not agree)."""
        read = [p for p in self.processes if p.samples >= min_samples]
        if not read or any(p.share(phases) < share for p in read):
            return []
        return read

    def failed_fact(self) -> Fact | None:
        if not self.failed:
            return None
        return Fact(f"{self.failed} stack dump{'s' if self.failed != 1 else ''} could not be read "
                    f"({_quoted(self.error) if self.error else 'no reason given'})", "stack_dumps_failed",
                    float(self.failed))


def inside_evidence(view: WindowView, start: int) -> InsideEvidence:
    """The stack samples of ticks ``start``.. of ``view`` (aligned to the newest tick), per training process
    on the cards in those ticks (another job's samples, still in the window, are not its)."""
    n = view.n
    stacks = view.stacks[-(n - start):] if n > start else []
    if not any(stacks):
        return InsideEvidence()
    cards = _cards(view.procs[-(n - start):])
    mains, workers = _by_process(stacks, cards)
    failed, error, out = 0, None, []
    for pid, samples in sorted(mains.items()):
        read = [s for s in samples if s.error is None and s.phase != UNKNOWN]
        bad = [s for s in samples if s.error is not None]
        failed += len(bad)
        error = error or next((s.error for s in bad), None)
        out.append(_process(pid, tuple(sorted(cards.get(pid, ()))), read, len(bad), workers.get(pid, Counter())))
    return InsideEvidence(tuple(out), failed, error)


#: a child of a training process whose own stack is in a DataLoader worker's loop reads one of these
LOADER_WORKER_PHASES = frozenset({"worker_busy", WORKER_WAITING, "worker_idle"})


def not_loaders(view: WindowView) -> frozenset[int]:
    """Children of the training processes whose own stack, read in the window, was not a DataLoader worker's:
    inductor's compile workers, a forked service, a logger. From outside every child of a GPU process counts as
    a DataLoader worker, and one pegged at 100 % reads as a starved loader (real H200: torch.compile's compile
    worker beside a recompiling job); its stack says what it is. A child never read stays a worker."""
    # the window's rows read once, as a slice (an offline view's rows are lazy, converted per read); a tick
    # without samples (every tick of a recording before trace v3) is skipped before its samples are walked
    ticks = [tick for tick in view.stacks[:] if tick]
    if not ticks:
        return frozenset()
    return frozenset(s.pid for tick in ticks for s in tick if s.role == "worker" and s.error is None
                     and s.phase != UNKNOWN and s.phase not in LOADER_WORKER_PHASES)


def _cards(procs: list[list[ProcSample]]) -> dict[int, set[int]]:
    cards: dict[int, set[int]] = {}
    for tick in procs:
        for p in tick:
            cards.setdefault(p.pid, set()).add(p.gpu_index)
    return cards


def _by_process(stacks: list[list[StackSample]], cards: dict[int, set[int]]
                ) -> tuple[dict[int, list[StackSample]], dict[int, Counter[str]]]:
    """The main threads' samples per process on the cards (any, without process information), and its
    workers' phases."""
    mains: dict[int, list[StackSample]] = {}
    workers: dict[int, Counter[str]] = {}
    for tick_samples in stacks:
        for s in tick_samples:
            if s.role == "main" and (not cards or s.pid in cards):
                mains.setdefault(s.pid, []).append(s)
            elif s.role == "worker" and s.parent_pid is not None:
                workers.setdefault(s.parent_pid, Counter())[s.phase] += 1
    return mains, workers


def _phases(read: list[StackSample]) -> list[str]:
    """Each sample's phase (``threads.main_phase``: a main thread starved of the GIL waits), a wait whose channel
    named nothing taken for the named wait of the same stack.

    /proc's wait channel is read a moment apart from py-spy's dump: a thread being woken from its socket reads
    state R and no channel, so the same line of code off CPU reads ``wait_service`` at one dump and ``waiting``
    at the next (real H200: 4 and 4 of 8 samples of a job calling a service, every one in its recv)."""
    named = {s.frames: s.phase for s in read if s.phase in NAMED_WAITS and s.frames}
    phases = [main_phase(s) for s in read]  # a main thread starved of the GIL waits, whatever op it is in
    return [named.get(s.frames, p) if p == UNNAMED_WAIT and s.frames else p for s, p in zip(read, phases, strict=True)]


FRAME_CHARS = 80  # a frame quoted in evidence and advice: a function and its file, never a screenful


def _quoted(frame: str) -> str:
    """One frame as evidence quotes it, bounded: a recording is outside input, its frame text anyone's."""
    return frame if len(frame) <= FRAME_CHARS else frame[: FRAME_CHARS - 1] + "…"


def _process(pid: int, cards: tuple[int, ...], read: list[StackSample], failed: int,
             workers: Counter[str]) -> ProcessInside:
    phases = _phases(read)
    counts = Counter(phases)
    frames: dict[str, Counter[str]] = {}
    for s, phase in zip(read, phases, strict=True):
        if s.frames:
            frames.setdefault(phase, Counter())[_quoted(s.frames.split(" < ", 1)[0])] += 1
    busy = sorted(s.busy_threads for s in read if s.busy_threads is not None)
    median = float(busy[len(busy) // 2]) if busy else math.nan
    by_phase: dict[str, list[int]] = {}
    for s, phase in zip(read, phases, strict=True):
        if s.busy_threads is not None:
            by_phase.setdefault(phase, []).append(s.busy_threads)
    loading = sum(map(sample_shows_loading, read)) + sum(k for p, k in workers.items() if p in LOADER_WORKER_PHASES)
    return ProcessInside(pid, cards, len(read), failed, dict(counts),
                         {p: c.most_common(1)[0][0] for p, c in frames.items()}, median, dict(workers),
                         {p: tuple(v) for p, v in by_phase.items()}, loading, read_threads(read, phases, _quoted))
