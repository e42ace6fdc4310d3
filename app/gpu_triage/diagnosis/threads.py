"""Every Python thread of a dump, where the recording has them (trace v4: a stack sample's ``thread_list``).

A main-thread sample of trace v3 says the process's phase and how many threads were busy; v4 adds each thread:
its name, whether py-spy found it on a CPU (``state`` "active") or off it ("idle"), whether it held the GIL, its
own phase and frames. Read here, per training process over the judged samples: how often the main thread sat
off CPU, in which of its phases, and which other thread, seen running Python, was on a CPU meanwhile (a thread
that holds the step: a thread of the job's own through the GIL, a pin-memory thread, autograd's thread running a
gradient hook); and the main thread's phase as the engine counts it (``main_phase``: starved of the GIL, it
waits). A sample without threads (every recording before v4) adds nothing: the readings that need them do not
hold.

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
#: words of a frame ("fn (file)") that belong to an input pipeline, compared in lower case; torch's fetcher by its
#: file (``fetch.py``), not the bare word, which a job's own ``fetch_metrics`` or ``fetch_reward`` also holds
LOADING_WORDS = ("torch/utils/data/", "dataloader", "dataset", "collate", "fetch.py", "__getitem__", "pin_memory")


def shows_loading(phase: str, frames: str | None) -> bool:
    """A thread whose phase or frames are the input pipeline's."""
    if phase in LOADING_PHASES:
        return True
    low = (frames or "").lower()
    return any(w in low for w in LOADING_WORDS)


def sample_shows_loading(s: StackSample) -> bool:
    """The sample, or any of its threads, in the input pipeline."""
    return shows_loading(s.phase, s.frames) or any(shows_loading(t.phase, t.frames) for t in thread_list(s))


#: the main thread's phases that name the torch op it is in: off CPU there while a thread of the job's own holds
#: the GIL, it waits for the GIL, not in the op
GIL_BOUND = frozenset({"model", "backward", "optimizer"})


def main_phase(s: StackSample) -> str:
    """The main thread's phase as the engine counts it: the recorded one, but "waiting" where the main thread sat
    off CPU in a torch op (model, backward, optimizer) while a thread of the job's own (one Python's threading
    started: it has a name) held the GIL on a CPU. A thread starved of the GIL is sampled idle in whichever op
    it next needs the GIL for (real held-out job: three metrics threads taking turns, the main thread at 1-2 %
    of a core, recorded in backward, model and waiting alike); the op names where it waits, not what holds it.
    Autograd's device thread has no threading name: the main thread waiting in backward for its hook is in
    backward. ``sources.phases.process_phase`` applies the same rule to a dump as it is sampled; this reads it
    back from recordings whose samples carry only each thread's own phase."""
    if s.phase not in GIL_BOUND:
        return s.phase
    threads = thread_list(s)
    main = _main(s, threads) if threads else None
    if main is None or main.state == "active":
        return s.phase
    held = any(t is not main and t.name and t.holds_gil == 1 and t.state == "active" for t in threads)
    return "waiting" if held else s.phase


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


def _names(read: list[tuple[str, ThreadLike, Sequence[ThreadLike]]], quote: Any) -> dict[int, str]:
    """The threads seen running Python on a CPU while the main thread waited, each labelled "'name' in phase at
    frame" by its Python sightings (its most frequent phase and innermost frame). A thread Python did not start
    has no name in py-spy's dump: one running the job's Python while the main thread waits in backward is
    autograd's device thread running a hook."""
    seen: dict[int, list[ThreadLike]] = {}
    in_backward: set[int] = set()
    for phase, main, threads in read:
        if main.state == "active":
            continue
        for t in threads:
            if t is not main and _runs_python(t):
                seen.setdefault(t.tid, []).append(t)
                if phase == "backward":
                    in_backward.add(t.tid)
    out: dict[int, str] = {}
    for tid, sights in seen.items():
        first = sights[0]
        name = (quote(first.name) if first.name else "autograd's thread" if tid in in_backward
                else f"thread {tid}")
        phases = Counter(t.phase for t in sights if t.phase != "unknown").most_common(1)
        frames = Counter(t.frames.split(" < ", 1)[0] for t in sights if t.frames).most_common(1)
        at = f" at {quote(frames[0][0])}" if frames else ""
        out[tid] = f"'{name}' in {phases[0][0] if phases else 'python'}{at}"
    return out


def read_threads(samples: Sequence[StackSample], phases: Sequence[str], quote: Any) -> ThreadsRead:
    """What the samples' threads say (``phases``: each sample's phase as counted; ``quote`` bounds outside
    text quoted in evidence).

    A thread seen running Python on a CPU while the main thread waited holds the step at every dump that finds
    it on a CPU while the main thread waits, in its Python or in the native code it calls between: autograd's
    device thread runs a backward natively and a gradient hook's Python in turn, the main thread waiting in
    backward throughout (real held-out job: the hook's Python caught in 3 of 6 dumps, the thread on a CPU in
    native code in 1 more). A thread never seen in Python (a native pool, CUDA's) counts for nothing."""
    read: list[tuple[str, ThreadLike, Sequence[ThreadLike]]] = []
    for s, phase in zip(samples, phases, strict=True):
        threads = thread_list(s)
        main = _main(s, threads) if threads else None
        if main is not None:
            read.append((phase, main, threads))
    named = _names(read, quote)
    n = idle = 0
    idle_in: Counter[str] = Counter()
    by_phase: Counter[str] = Counter()
    holders: Counter[str] = Counter()
    held = held_loading = 0
    for phase, main, threads in read:
        n += 1
        by_phase[phase] += 1
        if main.state == "active":
            continue
        idle += 1
        idle_in[phase] += 1
        running = [t for t in threads if t is not main and t.state == "active" and t.tid in named]
        if running:
            # the one py-spy saw with the GIL, if it said; else one in Python, else one in its native code
            first = max(running, key=lambda t: (bool(t.holds_gil), _runs_python(t)))
            holders[named[first.tid]] += 1
            held += 1
            held_loading += shows_loading(first.phase, f"{first.name or ''} {first.frames or ''}")
    return ThreadsRead(n, idle, dict(idle_in), dict(holders), dict(by_phase), held, held_loading)


def _runs_python(t: ThreadLike) -> bool:
    """On a CPU in Python code: py-spy saw it hold the GIL, or found Python frames on it (a thread running Python
    holds the GIL, which py-spy does not always report: real autograd thread running a gradient hook). A native
    thread (autograd's device thread in C++, an intra-op pool, CUDA's) has no Python frames: not counted."""
    return t.state == "active" and (bool(t.holds_gil) or (t.phase != "unknown" and bool(t.frames)))
