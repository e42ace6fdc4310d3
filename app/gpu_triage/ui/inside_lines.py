"""What the waiting processes were doing inside, from the window's stack samples (trace v3's ``stacks``): the
process table's detail part for the selected process and the diagnosis pane's "inside" lines. Plain text, no
Textual; live and replay draw the same lines from the same ticks.

A sample counts for a process only while that process is still the one on screen: its pid on every tick from
the sample to the newest, with the same name and user (a worker: among its trainer's workers on each of them).
A pid that left the table, or came back as another program, is another process and its old stacks are not its.
The frames are another user's function and file names, read back from a recording too: cleaned again here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from gpu_triage.model import ProcSample, StackSample
from gpu_triage.safetext import clean
from gpu_triage.sources.stacks import ACCESS_PROBLEMS
from gpu_triage.sources.waiting import WaitBand, waits_after
from gpu_triage.window import WindowView

RECENT_S = 30.0  # the pane's summary looks at this much recent history (15 dumps at the sampler's pace)
MAX_PROCESSES = 3  # "inside" lines in the pane at most, then "+N more"
FRAME_CHARS = 48  # characters of the frame that named the phase, on a line that also says much else


def _identity(p: ProcSample) -> tuple[str | None, str | None]:
    return p.name, p.user


def _present(procs: list[ProcSample], pid: int, parent: int | None) -> ProcSample | None:
    if parent is None:
        return next((p for p in procs if p.pid == pid), None)
    return next((p for p in procs if p.pid == parent and pid in p.worker_pids), None)


def _first_same(view: WindowView, pid: int, parent: int | None) -> int | None:
    """The first tick of the run that ends at the newest tick, over which the process (a worker: among its
    trainer's) is the same one; None when it is not on the newest tick."""
    now = _present(view.procs[-1], pid, parent) if view.procs else None
    if now is None:
        return None
    first = len(view.procs) - 1
    while first > 0:
        then = _present(view.procs[first - 1], pid, parent)
        if then is None or _identity(then) != _identity(now):
            break
        first -= 1
    return first


def _samples(view: WindowView, since_t: float | None = None) -> Iterator[tuple[int, StackSample]]:
    """(tick index, sample) newest first."""
    for i in range(min(len(view.stacks), view.n) - 1, -1, -1):
        if since_t is not None and float(view.t[i]) < since_t:
            return
        for s in reversed(view.stacks[i]):
            yield i, s


def _problem(error: str) -> str:
    return clean(ACCESS_PROBLEMS.get(error, error))


def _named_by(frames: str | None) -> str | None:
    """The function of the frame that named the phase: the last of the frames, without its file."""
    if not frames:
        return None
    fn = frames.rsplit(" < ", 1)[-1].rsplit(" (", 1)[0]
    return clean(fn if len(fn) <= FRAME_CHARS else fn[: FRAME_CHARS - 1] + "…")


def latest(view: WindowView, pid: int, parent: int | None = None) -> tuple[float, StackSample] | None:
    """The newest sample of ``pid`` (``parent``: a DataLoader worker of that trainer) that is still this
    process's, with its tick's time."""
    first = _first_same(view, pid, parent)
    if first is None:
        return None
    role = "main" if parent is None else "worker"
    for i, s in _samples(view):
        if i < first:
            return None
        if s.pid == pid and s.role == role and (parent is None or s.parent_pid == parent):
            return float(view.t[i]), s
    return None


def detail_text(view: WindowView, pid: int, parent: int | None = None) -> str | None:
    """"main thread: optimizer (Adam.step), 16 threads busy, 4 s ago" for the process table's detail line;
    None with no sample of this process in the window."""
    found = latest(view, pid, parent)
    if found is None:
        return None
    t, s = found
    who = "main thread" if parent is None else "worker"
    if s.error is not None:
        text = f"{who}: no stack ({_problem(s.error)})"
    else:
        fn = _named_by(s.frames)
        text = f"{who}: {clean(s.phase)}" + (f" ({fn})" if fn else "")
        if parent is None:
            busy = s.busy_threads
            text += f", {busy} thread{'' if busy == 1 else 's'} busy" if busy is not None else ", threads busy n/a"
    age = float(view.t[-1]) - t if view.n else 0.0
    return text + (f", {age:.0f} s ago" if age >= 0.5 else "")


def _someone_waits(view: WindowView, band: WaitBand) -> bool:
    """A process at the newest tick on a card that waits as the sampler judges it (the band's hysteresis over the
    window's GPU-Util): one it would look inside."""
    if not view.n or not view.procs or "util_pct" not in view.gpu:
        return False
    cards = {p.gpu_index for p in view.procs[-1]}
    column = view.gpu["util_pct"]
    return any(waits_after(column[:, k].tolist(), band) for k, i in enumerate(view.gpu_indexes) if i in cards)


def _recent_main_samples(view: WindowView) -> dict[int, list[StackSample]]:
    """Each process's main-thread samples of the last RECENT_S, from its first tick as the same process."""
    since = float(view.t[-1]) - RECENT_S
    per_pid: dict[int, list[StackSample]] = {}
    firsts: dict[int, int | None] = {}
    for i, s in _samples(view, since):
        if s.role != "main":
            continue
        if s.pid not in firsts:
            firsts[s.pid] = _first_same(view, s.pid, None)
        first = firsts[s.pid]
        if first is not None and i >= first:
            per_pid.setdefault(s.pid, []).append(s)
    return per_pid


def _pid_line(pid: int, samples: list[StackSample]) -> str:
    """One process's line: its most sampled phase and the function that names it, or why no stack was read."""
    read = [s for s in samples if s.error is None]
    if not read:
        return f"inside pid {pid}: no stack ({_problem(samples[0].error or '')})"
    phase, n = Counter(s.phase for s in read).most_common(1)[0]
    fn = next((f for s in read if s.phase == phase and (f := _named_by(s.frames))), None)
    return f"inside pid {pid}: {clean(phase)} {n}/{len(read)} samples" + (f" ({fn})" if fn else "")


def pane_lines(view: WindowView, notice: str | None = None, cited: frozenset[int] = frozenset(),
               band: WaitBand | None = None) -> list[str]:
    """The diagnosis pane's compact look inside: "inside pid 504: optimizer 5/5 samples (Adam.step)" per
    waiting process with samples in the last RECENT_S, at most MAX_PROCESSES; else, while a process's card
    waits, the notice that says why none are read (no py-spy, no permission), if any: while every card is
    busy nothing would be read anyway (a card waits as ``band``, the configured one, says: sources/waiting.py).
    Processes in ``cited`` (named by the verdict's own evidence) are left out."""
    if not view.n:
        return []
    per_pid = _recent_main_samples(view)
    # a process the verdict already cites has its own evidence line, over the judged ticks: a second count of
    # the same samples over another span beside it read as a contradiction
    per_pid = {pid: v for pid, v in per_pid.items() if pid not in cited}
    lines = []
    for pid in sorted(per_pid)[:MAX_PROCESSES]:
        lines.append(_pid_line(pid, per_pid[pid]))
    if len(per_pid) > MAX_PROCESSES:
        lines.append(f"inside: +{len(per_pid) - MAX_PROCESSES} more processes (Tab, then select one)")
    if not lines and notice and _someone_waits(view, band or WaitBand()):
        lines.append(f"inside: {clean(notice)}")
    return lines
