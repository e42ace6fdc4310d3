"""The diagnosis's one vocabulary: what a verdict's pattern, bottleneck and mechanism may be.

Each is a :class:`~enum.StrEnum`, so a member *is* its string: JSON, metric labels, the config file, the
docs and the tests read and write the values below, and comparing a member with its string holds. A new
bottleneck or mechanism is one line here (and its rule in ``mechanisms/``); docs/diagnosis.md explains
each. The order of :class:`Bottleneck` is the order metrics and summaries list them in.
"""

from __future__ import annotations

from enum import StrEnum

from gpu_triage.sources.base import GpuFault as GpuFault  # the cards' own faults: the source's words, said here too


class Pattern(StrEnum):
    """The shape of GPU-Util over the judged ticks, across the cards (patterns.py)."""

    COLLECTING = "collecting"  # no verdict yet: the window is shorter than warmup_s
    IDLE = "idle"
    STEADY_HIGH = "steady_high"
    STEADY_LOW = "steady_low"
    SAWTOOTH = "sawtooth"
    SINGLE_CARD_BUSY = "single_card_busy"
    IMBALANCED = "imbalanced"


class Bottleneck(StrEnum):
    """What the GPUs wait for: what the user changes."""

    NONE = "none"
    STORAGE_IO = "storage_io"
    DATA_PIPELINE = "data_pipeline"
    MEMORY_IDLE = "memory_idle"
    COMMUNICATION = "communication"
    LAUNCH_OVERHEAD = "launch_overhead"
    STALL_UNEXPLAINED = "stall_unexplained"
    PLACEMENT = "placement"  # every rank on one card while the others idle
    IMBALANCE = "imbalance"  # the cards do unequal work, or one card (a straggler) holds the others
    HUNG_COLLECTIVE = "hung_collective"  # ranks spinning in a collective that moves nothing
    HOST_STEP = "host_step"  # the training process's own CPU work holds the step (its stacks say so)
    COMPILE = "compile"  # torch.compile compiling, again and again (its stacks say so)
    EXTERNAL_WAIT = "external_wait"  # the training waits on another service or a sleep (its stacks say so)
    # the training process holds one core with no DataLoader workers while its GPU waits, and nothing from outside
    # tells its own CPU work from its in-process loading (num_workers=0): its stacks would
    HOST_OR_INPUT = "host_or_input"
    UNEXPLAINED = "unexplained"  # the GPU waits while a job holds it and no rule names why: no specific advice


#: Each bottleneck's words for a person ("storage I/O became the bottleneck": ``compare``'s sentences). A new
#: bottleneck adds its phrase here; a test fails on one left out.
LABELS: dict[str, str] = {
    Bottleneck.NONE: "nothing",
    Bottleneck.STORAGE_IO: "storage I/O",
    Bottleneck.DATA_PIPELINE: "the input pipeline",
    Bottleneck.MEMORY_IDLE: "memory held on idle cards",
    Bottleneck.COMMUNICATION: "communication between the cards",
    Bottleneck.LAUNCH_OVERHEAD: "kernel launch overhead",
    Bottleneck.STALL_UNEXPLAINED: "a stall in the job itself",
    Bottleneck.PLACEMENT: "every rank on one card",
    Bottleneck.IMBALANCE: "unequal work across the cards",
    Bottleneck.HUNG_COLLECTIVE: "a hung collective",
    Bottleneck.HOST_STEP: "the training process's own CPU work",
    Bottleneck.COMPILE: "torch.compile recompiling",
    Bottleneck.EXTERNAL_WAIT: "waits on another service",
    Bottleneck.HOST_OR_INPUT: "the training process's own CPU work or its in-process loading",
    Bottleneck.UNEXPLAINED: "a wait no rule explains",
}


def label(bottleneck: str) -> str:
    """``bottleneck``'s phrase for a person; one this version does not know (a newer recording's) is said as is."""
    return LABELS.get(bottleneck, bottleneck)


def is_healthy(bottleneck: str | None) -> bool:
    """Whether ``bottleneck`` asks nothing of a person: ``none``, or no bottleneck said at all (an old exporter's
    empty label). Every other value, one this version does not know included, is something to act on."""
    return not bottleneck or bottleneck == Bottleneck.NONE


#: The bottleneck label of the verdict ``export`` serves while the cards themselves are faulty (a :class:`GpuFault`,
#: its pattern label): no rule gives it, the source's status does.
GPU_FAULT = "gpu_fault"

#: What needs a human first, worst first: the one order of severity (the fleet view's rows, docs/diagnosis.md).
#: Cards that are gone, then a job that makes no progress at all, then most of the machine idle (every rank on one
#: card, cards waiting for a straggler), then a share of every step lost (input, storage, links, the host's own
#: work), then memory held with no work, then what no rule can name; ``none`` last.
SEVERITY: tuple[str, ...] = (
    GPU_FAULT,
    Bottleneck.HUNG_COLLECTIVE,
    Bottleneck.PLACEMENT,
    Bottleneck.IMBALANCE,
    Bottleneck.DATA_PIPELINE,
    Bottleneck.STORAGE_IO,
    Bottleneck.COMMUNICATION,
    Bottleneck.HOST_STEP,
    Bottleneck.HOST_OR_INPUT,  # one of the two above, not told apart without stacks
    Bottleneck.EXTERNAL_WAIT,
    Bottleneck.COMPILE,
    Bottleneck.LAUNCH_OVERHEAD,
    Bottleneck.MEMORY_IDLE,
    Bottleneck.STALL_UNEXPLAINED,
    Bottleneck.UNEXPLAINED,
    Bottleneck.NONE,
)


def severity(bottleneck: str | None) -> int:
    """``bottleneck``'s rank in :data:`SEVERITY` (0 is the worst); one this version does not know (a newer
    exporter's) ranks after every known bottleneck and before ``none``."""
    if is_healthy(bottleneck):
        return len(SEVERITY)
    try:
        return SEVERITY.index(bottleneck)
    except ValueError:
        return len(SEVERITY) - 1  # none's own place, which none itself gives up above


class Mechanism(StrEnum):
    """How the bottleneck came about: the rule that named it (``mechanisms/``), or the job's clock (job.py)."""

    START_UP = "start_up"
    IDLE_STORAGE = "idle_storage"
    IDLE_DATA = "idle_data"
    IN_PROCESS_LOADER = "in_process_loader"  # its stacks: the main thread in the DataLoader's fetch (num_workers=0)
    MEMORY_IDLE = "memory_idle"
    IDLE = "idle"
    RANK_BLOCKED_ON_STORAGE = "rank_blocked_on_storage"
    HUNG_COLLECTIVE = "hung_collective"
    COMMUNICATION = "communication"
    STORAGE = "storage"
    DATA_PIPELINE = "data_pipeline"
    H2D_COPY = "h2d_copy"
    LAUNCH_OVERHEAD = "launch_overhead"
    HOST_BOUND_STEP = "host_bound_step"
    IN_PROCESS_OR_LAUNCH = "in_process_or_launch"  # num_workers=0 without SM activity to tell the two apart
    IN_PROCESS_OR_HOST = "in_process_or_host"  # one core, no workers, no stacks: loading or its own CPU work
    NO_PROCESS_INFO = "no_process_info"
    STALL_UNEXPLAINED = "stall_unexplained"
    HEALTHY = "none"
    JOB_DATA_WAIT = "job_data_wait"  # the job's own clock: most of each step waits for the next batch
    PLACEMENT = "placement"
    IMBALANCE = "imbalance"
    STRAGGLER = "straggler"  # one card computes while the others wait at a collective
    UNEXPLAINED = "unexplained"
    # read from the training processes' stacks (mechanisms/inside.py)
    RECOMPILE = "recompile"  # the main thread in torch.compile's compiler in most samples
    HOST_COMPUTE = "host_compute"  # an optimizer or a model part computing on the CPU, on several threads
    PYTHON_STEP = "python_step"  # the process's own Python (a loop, .item() syncs) on one core
    INPUT_LATENCY = "input_latency"  # the loop waits for batches while the workers wait inside the Dataset
    EXTERNAL_WAIT = "external_wait"  # the main thread off CPU on a socket, a poll or a sleep
    OTHER_THREAD = "other_thread"  # the main thread off CPU while another of its threads holds the GIL (trace v4)
