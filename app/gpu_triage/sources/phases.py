"""What a training process's thread is doing, from its Python stack (py-spy) and its /proc entry: one phase.

The table reads PyTorch's own module and function names, the ones its stacks carry on every version this was
checked on (torch 2.11 on a real H200, 2.13 on the CPU box; docs/diagnosis.md lists the phases). A stack is
matched outermost-agnostic: the first rule of ``RULES`` any frame matches wins, so a compile under a module's
forward is a compile and a save under a training loop is a checkpoint. A stack no rule names is read from the
thread itself: on a CPU it is the process's own Python (``python``); off it, what the kernel says it waits in
(a sleep, a socket, IO), else ``waiting``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpu_triage.model import ThreadSample
from gpu_triage.sources.stacks import Frame, StackDump, ThreadStack
from gpu_triage.sources.threads import ThreadInfo


class Phase(StrEnum):
    COMPILE = "compile"  # torch.compile: dynamo tracing, inductor codegen, triton builds
    CHECKPOINT = "checkpoint"  # torch.save, serialization, distributed checkpoint, safetensors
    COLLECTIVE = "collective"  # torch.distributed collectives and barriers
    DATALOADER_WAIT = "dataloader_wait"  # the training loop waits for a batch from its workers
    LOADING = "loading"  # a batch made in the training process itself (num_workers=0: fetch, collate)
    OPTIMIZER = "optimizer"  # torch.optim step
    BACKWARD = "backward"  # autograd's backward
    MODEL = "model"  # a module's forward
    GPU_SYNC = "gpu_sync"  # the host waits for the card (torch.cuda.synchronize, events)
    LOGGING = "logging"  # logging, progress bars, metrics writers
    IMPORT = "import"  # importing modules
    PYTHON = "python"  # on a CPU in the process's own code (no library phase named)
    SLEEP = "sleep"  # off CPU in a sleep
    WAIT_SERVICE = "wait_service"  # off CPU on a socket or poll: another service, the network
    IO_WAIT = "io_wait"  # uninterruptible sleep: disk or network file system
    WAITING = "waiting"  # off CPU on a lock, a queue, a condition (another thread of ours)
    WORKER_BUSY = "worker_busy"  # a DataLoader worker on a CPU making a sample (decode, augment, collate)
    WORKER_WAITING = "worker_waiting"  # a worker inside the Dataset but off CPU: latency (a fetch, a read)
    WORKER_IDLE = "worker_idle"  # a worker with no index to work on: it is ahead of the training loop
    UNKNOWN = "unknown"  # no stack


@dataclass(frozen=True)
class Rule:
    phase: Phase
    files: tuple[str, ...] = ()  # a frame's file starting with one of these
    names: tuple[str, ...] = ()  # or a frame's function name holding one of these
    # or, in this file, a function of these bare names: py-spy 0.4.3 names a method by its qualified name
    # ("_MultiProcessingDataLoaderIter._get_data"), 0.4.2 and older by its bare name ("_get_data")
    bare_in: str = ""
    bare: tuple[str, ...] = ()

    def matches(self, stack: ThreadStack) -> bool:
        return any(self.names_frame(fr) for fr in stack.frames)

    def names_frame(self, fr: Frame) -> bool:
        if self.files and fr.file.startswith(self.files):
            return True
        if self.bare and fr.name in self.bare and fr.file.startswith(self.bare_in):
            return True
        return bool(self.names) and any(n in fr.name for n in self.names)


#: Ordered: the first rule any frame matches names the phase.
RULES: tuple[Rule, ...] = (
    # The compiler's own files only: a compiled graph runs through torch/_dynamo/eval_frame.py and
    # aot_autograd's runtime_wrappers.py on every step, and torch.optim wraps its methods in dynamo's disable
    # (seen on the H200: Optimizer.zero_grad under DisableContext), none of which is compiling.
    Rule(Phase.COMPILE, files=("torch/_dynamo/convert_frame.py", "torch/_dynamo/symbolic_convert.py",
                               "torch/_dynamo/output_graph.py", "torch/_dynamo/variables/", "torch/_inductor/",
                               "torch/_functorch/_aot_autograd/graph_compile.py",
                               "torch/_functorch/_aot_autograd/jit_compile_runtime_wrappers.py",
                               "torch/_subclasses/fake_tensor.py", "triton/compiler/", "torch/_export/")),
    Rule(Phase.CHECKPOINT, files=("torch/serialization.py", "torch/distributed/checkpoint/", "safetensors/")),
    Rule(Phase.COLLECTIVE, files=("torch/distributed/distributed_c10d.py", "torch/distributed/c10d_logger.py",
                                  "torch/distributed/_functional_collectives.py")),
    # bare, only the two methods the single-process iterator lacks: its _next_data loads in the process itself
    Rule(Phase.DATALOADER_WAIT, names=("_MultiProcessingDataLoaderIter._next_data",
                                       "_MultiProcessingDataLoaderIter._get_data",
                                       "_MultiProcessingDataLoaderIter._try_get_data"),
         bare_in="torch/utils/data/dataloader.py", bare=("_get_data", "_try_get_data")),
    # anywhere under the single-process iterator's _next_data the batch is made in the training process: its
    # indices drawn (a Python sampler), fetched, collated, pinned; py-spy 0.4.2's bare "_next_data" is also the
    # workers' iterator's, so only the qualified name (0.4.3) says which
    Rule(Phase.LOADING, files=("torch/utils/data/_utils/fetch.py", "torch/utils/data/_utils/collate.py"),
         names=("_SingleProcessDataLoaderIter._next_data",)),
    Rule(Phase.OPTIMIZER, files=("torch/optim/",)),
    Rule(Phase.BACKWARD, files=("torch/autograd/",)),
    Rule(Phase.GPU_SYNC, names=("synchronize",), files=("torch/cuda/streams.py",)),
    Rule(Phase.LOGGING, files=("logging/", "tqdm/std.py", "torch/utils/tensorboard/", "wandb/", "mlflow/",
                               "tensorboard/")),
    Rule(Phase.IMPORT, files=("<frozen importlib.",)),
    Rule(Phase.MODEL, files=("torch/nn/modules/", "torch/nn/functional.py")),
)

_WORKER = Rule(Phase.WORKER_BUSY, names=("_worker_loop",))
_IN_DATASET = Rule(Phase.WORKER_BUSY, files=("torch/utils/data/_utils/fetch.py",))

#: Kernel wait channels of a thread off CPU, by what it waits on (prefixes; seen on kernels 6.x).
_WCHAN = (
    (Phase.SLEEP, ("hrtimer_nanosleep", "do_nanosleep", "clock_nanosleep")),
    (Phase.WAIT_SERVICE, ("wait_woken", "sk_wait_data", "inet_csk_accept", "unix_stream", "tcp_", "do_epoll_wait",
                          "ep_poll", "do_select", "poll_schedule_timeout", "do_sys_poll",
                          "__skb_wait_for_more_packets")),
    (Phase.WAITING, ("futex", "pipe_read", "pipe_wait", "do_wait")),
)


def _off_cpu(info: ThreadInfo | None) -> Phase:
    if info is None:
        return Phase.WAITING
    if info.state == "D":
        return Phase.IO_WAIT
    for phase, prefixes in _WCHAN:
        if info.wchan and info.wchan.startswith(prefixes):
            return phase
    return Phase.WAITING


# Each frame is read against every rule once: bit i of its mask says RULES[i] names it, and the two bits past
# them _WORKER and _IN_DATASET. A dump classifies each thread several times (its process's phase, its own, the
# frames that named it) and a job's frames repeat from dump to dump, so the masks are kept per (function, file):
# a stack then costs one dict lookup a frame instead of a rule's tests a frame (11 rules over 30-60 frames).
_WORKER_BIT = 1 << len(RULES)
_IN_DATASET_BIT = 1 << (len(RULES) + 1)
_RULE_BITS = _WORKER_BIT - 1
_MASKS: dict[tuple[str, str], int] = {}
#: (function, file) pairs whose masks are kept: another user's program may name frames without end, so the
#: table is emptied when full (a job's own frames number in the hundreds to a few thousand)
MAX_MASKS = 16384


def _frame_mask(fr: Frame) -> int:
    key = (fr.name, fr.file)
    mask = _MASKS.get(key)
    if mask is None:
        mask = sum(1 << i for i, rule in enumerate(RULES) if rule.names_frame(fr))
        mask |= (_WORKER_BIT if _WORKER.names_frame(fr) else 0) | (_IN_DATASET_BIT if _IN_DATASET.names_frame(fr)
                                                                   else 0)
        if len(_MASKS) >= MAX_MASKS:
            _MASKS.clear()
        _MASKS[key] = mask
    return mask


#: The bits of the rules that name each phase: a frame naming any of them named the phase (naming_frames).
_NAMING: dict[Phase, int] = {
    **{phase: sum(1 << i for i, rule in enumerate(RULES) if rule.phase is phase) for phase in Phase},
    **dict.fromkeys((Phase.WORKER_BUSY, Phase.WORKER_WAITING, Phase.WORKER_IDLE), _WORKER_BIT | _IN_DATASET_BIT),
}


def _stack_mask(stack: ThreadStack) -> int:
    mask = 0
    for fr in stack.frames:
        mask |= _frame_mask(fr)
    return mask


def classify(stack: ThreadStack | None, info: ThreadInfo | None = None) -> Phase:
    """The phase of one thread at one dump; ``info`` is its /proc entry read at the same moment, if any."""
    if stack is None or not stack.frames:
        return Phase.UNKNOWN
    mask = _stack_mask(stack)
    if mask & _WORKER_BIT:  # a DataLoader worker's main thread
        if not mask & _IN_DATASET_BIT:
            return Phase.WORKER_IDLE
        return Phase.WORKER_BUSY if stack.active else Phase.WORKER_WAITING
    rules = mask & _RULE_BITS
    if rules:  # the first rule any frame matches: the lowest bit set
        return RULES[(rules & -rules).bit_length() - 1].phase
    return Phase.PYTHON if stack.active else _off_cpu(info)


#: Phases of another thread that a waiting main thread is waiting on: CUDA tensors' backward runs on autograd's
#: device thread (the main thread sits off CPU in _engine_run_backward), and so does compiling its graph.
_DELEGATED = (Phase.COMPILE, Phase.CHECKPOINT, Phase.COLLECTIVE, Phase.LOADING, Phase.OPTIMIZER, Phase.BACKWARD,
              Phase.MODEL)


_NAMED_WAITS = frozenset({Phase.SLEEP, Phase.WAIT_SERVICE, Phase.IO_WAIT})
_GIL_BOUND = frozenset({Phase.MODEL, Phase.BACKWARD, Phase.OPTIMIZER})


def process_phase(dump: StackDump, threads: list[ThreadInfo] | None = None) -> Phase:
    """The phase of a training process at one dump: its main thread's, unless that thread is off CPU while
    another of its threads is on one in a named phase of the step (then the main thread waits on it), or while
    another thread of the job's own holds the GIL on a CPU in a torch op (then it waits for the GIL)."""
    main = dump.main
    by_tid = {t.tid: t for t in threads or ()}
    phase = classify(main, by_tid.get(dump.pid))
    if main is None or main.active:
        return phase
    if phase in _GIL_BOUND and any(th.tid != dump.pid and th.name and th.owns_gil and th.active for th in dump.threads):
        # starved of the GIL by a thread of the job's own (threading named it; autograd's device thread, running
        # a hook inside backward, has no name): the op it sits in is where it next needs the GIL, not its work
        return Phase.WAITING
    for th in dump.threads:
        if th.tid != dump.pid and th.active:
            other = classify(th, by_tid.get(th.tid))
            if other in _DELEGATED:
                return other
    return phase


@dataclass(frozen=True)
class PhaseShare:
    """How a process's main thread spent a run of dumps: each phase's share of the dumps that read."""

    samples: int
    shares: dict[Phase, float]
    top_frames: dict[Phase, str]  # the innermost frame most often seen in each phase ("Adam.step (adam.py)")

    @property
    def leading(self) -> tuple[Phase, float] | None:
        if not self.shares:
            return None
        # a tie goes to the phase that names something (a wait on a socket over a wait on "something")
        phase = max(self.shares, key=lambda p: (self.shares[p], p not in (Phase.WAITING, Phase.UNKNOWN)))
        return phase, self.shares[phase]


def main_thread_phases(dumps: Iterable[tuple[StackDump, list[ThreadInfo] | None]]) -> PhaseShare:
    """A training process's phases (``process_phase``) over ``dumps``, each with its threads read beside it;
    dumps that failed count for nothing. The top frames are the main thread's."""
    read: list[tuple[Phase, str | None]] = []
    for dump, threads in dumps:
        main = dump.main
        if main is None:
            continue
        top = f"{main.frames[0].name} ({main.frames[0].file.rsplit('/', 1)[-1]})" if main.frames else None
        read.append((process_phase(dump, threads), top))
    # /proc is read a moment apart from the dump: a thread being woken from its sleep or socket reads state R and
    # no wait channel, so one line of code off CPU reads as a named wait at one dump and "waiting" at the next;
    # a "waiting" at the innermost frame of a named wait is taken for that wait (diagnosis/inside.py likewise)
    named = {top: phase for phase, top in read if phase in _NAMED_WAITS and top}
    counts: Counter[Phase] = Counter()
    frames: dict[Phase, Counter[str]] = {}
    for phase, top in read:
        if phase is Phase.WAITING and top in named:
            phase = named[top]
        counts[phase] += 1
        if top:
            frames.setdefault(phase, Counter())[top] += 1
    n = len(read)
    return PhaseShare(n, {p: c / n for p, c in counts.items()} if n else {},
                      {p: c.most_common(1)[0][0] for p, c in frames.items()})


FRAMES_SHOWN = 4  # frames of one sample kept: the innermost ones and the one that named the phase
FRAME_NAME = 48  # characters of a frame's function name at most (another user's names: bounded) ...
FRAME_FILE = 20  # ... and of its file's base name: a frame is at most 71, a sample's frames at most 300


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _frame_text(name: str, file: str) -> str:
    return f"{_cut(name, FRAME_NAME)} ({_cut(file.rsplit('/', 1)[-1], FRAME_FILE)})"


def naming_frames(stack: ThreadStack | None, phase: Phase) -> str | None:
    """The innermost frames of ``stack`` down to the one that named ``phase``, "fn (file)" joined by " < "
    (innermost first); past FRAMES_SHOWN frames the innermost ones and that frame, with "…" between. A phase no
    frame names (python, sleep, waiting) gives the innermost frame. The last frame given is always the one that
    named the phase: each frame's name and file are cut (FRAME_NAME, FRAME_FILE), never the whole text."""
    if stack is None or not stack.frames:
        return None
    frames = stack.frames
    # the innermost frame any of the phase's rules names: a worker in its Dataset is named by fetch.py, an idle
    # one by its loop
    want = _NAMING.get(phase, 0)
    at = next((i for i, fr in enumerate(frames) if _frame_mask(fr) & want), None)
    texts = [_frame_text(f.name, f.file) for f in frames]
    if at is None:
        at = 0  # no frame names it: the thread's own state did (on a CPU, asleep), where it is now
    if at < FRAMES_SHOWN:
        kept = texts[: at + 1]
    else:
        kept = [*texts[: FRAMES_SHOWN - 1], "…", texts[at]]
    return " < ".join(kept)


MAX_THREAD_SAMPLES = 16  # threads kept per sample (trace v4): the main thread, then those on a CPU, then the rest


def thread_samples(dump: StackDump, threads: list[ThreadInfo] | None = None) -> list[ThreadSample]:
    """Each Python thread of ``dump`` as the trace keeps it: its own phase, py-spy's active and GIL flags, its
    CPU share from /proc (read beside the dump) and its frames down to the one that named its phase. At most
    MAX_THREAD_SAMPLES: the main thread first, then the GIL's holder and the threads on a CPU, then idle ones;
    each thread's name and frames bounded as ``naming_frames`` bounds them."""
    by_tid = {t.tid: t for t in threads or ()}
    order = sorted(dump.threads, key=lambda th: (th.tid != dump.pid, not th.owns_gil, not th.active))
    out = []
    for th in order[:MAX_THREAD_SAMPLES]:
        info = by_tid.get(th.tid)
        phase = classify(th, info)
        out.append(ThreadSample(
            th.tid, "active" if th.active else "idle", phase.value,
            name=_cut(th.name, FRAME_NAME) if th.name else None,
            holds_gil=None if th.owns_gil is None else int(th.owns_gil),
            cpu_pct=None if info is None or info.cpu_pct is None else round(info.cpu_pct, 1),
            frames=naming_frames(th, phase)))
    return out


def gil_holder(dumps: Iterable[StackDump]) -> tuple[str, int] | None:
    """The thread most often seen on a CPU holding the GIL while its process's main thread was off one, by
    name (its tid where Python gave it none), and in how many of ``dumps``: a main thread starved by another
    thread of its own process (py-spy's flags are a moment's reading each: it is counted over the dumps)."""
    seen: Counter[str] = Counter()
    for dump in dumps:
        main = dump.main
        if main is None or main.active:
            continue
        holder = next((th for th in dump.threads if th.tid != dump.pid and th.owns_gil and th.active), None)
        if holder is not None:
            seen[_cut(holder.name, FRAME_NAME) if holder.name else f"tid {holder.tid}"] += 1
    return seen.most_common(1)[0] if seen else None
