"""Every Python thread of a dump, where the recording has them (trace v4: a stack sample's ``thread_list``).

A main-thread sample of trace v3 says the process's phase and how many threads were busy; v4 adds each thread:
its name, whether py-spy found it on a CPU (``state`` "active") or off it ("idle"), whether it held the GIL, its
own phase and frames. Read here, per training process over the judged samples: how often the main thread sat
off CPU, in which of its phases, and which other thread ran Python on a CPU meanwhile (a thread that holds the
step through the GIL: a thread of the job's own, a pin-memory thread, a gradient hook on autograd's thread). A sample
without threads
(every recording before v4) adds nothing: the readings that need them do not hold.

Also here: whether a sample shows the input pipeline anywhere (its phase, its frames, any of its threads),
what evidence precedence asks before a loader verdict stands (``precedence.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpu_triage.model import StackSample


class ThreadLike(Protocol):
    """One thread of a dump as trace v4 records it (``model.ThreadSample``); read by name, not by type."""

    tid: int
    state: str
    phase: str
    name: str | None
    holds_gil: int | None
    frames: str | None


def thread_list(s: StackSample) -> Sequence[ThreadLike]:
    """The sample's threads (trace v4), or none (v1-v3, or a dump that listed none)."""
    got: Any = getattr(s, "thread_list", None)
    return tuple(got) if got else ()


#: phases of the training process's own threads that are the input pipeline (num_workers=0, the loop waiting
#: for its workers), and of its DataLoader workers
LOADING_PHASES = frozenset({"loading", "dataloader_wait", "worker_busy", "worker_waiting", "worker_idle"})
#: words of a frame ("fn (file)") that belong to an input pipeline, compared in lower case
LOADING_WORDS = ("torch/utils/data/", "dataloader", "dataset", "collate", "fetch", "__getitem__", "pin_memory")


def shows_loading(phase: str, frames: str | None) -> bool:
    """A thread whose phase or frames are the input pipeline's."""
    if phase in LOADING_PHASES:
        return True
    low = (frames or "").lower()
    return any(w in low for w in LOADING_WORDS)


def sample_shows_loading(s: StackSample) -> bool:
    """The sample, or any of its threads, in the input pipeline."""
    return shows_loading(s.phase, s.frames) or any(shows_loading(t.phase, t.frames) for t in thread_list(s))


@dataclass(frozen=True, slots=True)
class ThreadsRead:
    """One process's main-thread samples that carried their threads, over the judged ticks."""

    samples: int = 0  # samples with threads
    main_idle: int = 0  # ... where the main thread was off CPU
    idle_in: dict[str, int] = field(default_factory=dict)  # the process's phase -> those samples
    holders: dict[str, int] = field(default_factory=dict)  # another thread running Python on a CPU while the
    # main thread was off it ("name in phase at frame") -> samples
    by_phase: dict[str, int] = field(default_factory=dict)  # the process's phase -> samples with threads
    held: int = 0  # samples where some other thread ran Python on a CPU while the main thread was off it
    held_loading: int = 0  # ... that thread in the input pipeline (a pin-memory thread, a loader thread)

    def holder(self) -> tuple[str, int]:
        """(the other thread seen most often holding the GIL while the main thread waited, its samples)."""
        if not self.holders:
            return "", 0
        return max(self.holders.items(), key=lambda kv: kv[1])

    def idle_share(self, phases: Iterable[str]) -> tuple[int, int]:
        """(samples in ``phases`` whose main thread was off CPU, samples in ``phases`` with threads)."""
        want = set(phases)
        return sum(v for p, v in self.idle_in.items() if p in want), sum(self.by_phase.get(p, 0) for p in want)


def _main(s: StackSample, threads: Sequence[ThreadLike]) -> ThreadLike | None:
    return next((t for t in threads if t.tid == s.pid), None) or next(
        (t for t in threads if t.name == "MainThread"), None)


def _label(t: ThreadLike, quote: Any) -> str:
    name = t.name or f"thread {t.tid}"
    at = f" at {quote(t.frames.split(' < ', 1)[0])}" if t.frames else ""
    return f"'{quote(name)}' in {t.phase}{at}"


def read_threads(samples: Sequence[StackSample], phases: Sequence[str], quote: Any) -> ThreadsRead:
    """What the samples' threads say (``phases``: each sample's phase as counted; ``quote`` bounds outside
    text quoted in evidence)."""
    n = idle = 0
    idle_in: Counter[str] = Counter()
    by_phase: Counter[str] = Counter()
    holders: Counter[str] = Counter()
    held = held_loading = 0
    for s, phase in zip(samples, phases, strict=True):
        threads = thread_list(s)
        main = _main(s, threads) if threads else None
        if main is None:
            continue
        n += 1
        by_phase[phase] += 1
        if main.state == "active":
            continue
        idle += 1
        idle_in[phase] += 1
        running = [t for t in threads if t is not main and _runs_python(t)]
        if running:
            first = max(running, key=lambda t: bool(t.holds_gil))  # the one py-spy saw with the GIL, if it said
            holders[_label(first, quote)] += 1
            held += 1
            held_loading += shows_loading(first.phase, f"{first.name or ''} {first.frames or ''}")
    return ThreadsRead(n, idle, dict(idle_in), dict(holders), dict(by_phase), held, held_loading)


def _runs_python(t: ThreadLike) -> bool:
    """On a CPU in Python code: py-spy saw it hold the GIL, or found Python frames on it (a thread running Python
    holds the GIL, which py-spy does not always report: real autograd thread running a gradient hook). A native
    thread (autograd's device thread in C++, an intra-op pool, CUDA's) has no Python frames: not counted."""
    return t.state == "active" and (bool(t.holds_gil) or (t.phase != "unknown" and bool(t.frames)))
