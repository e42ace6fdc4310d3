"""What only the inside of a job can tell: its main thread's phase in most of its stack samples names the
mechanism (diagnosis/inside.py counts them; sources/phases.py named each).

Each rule holds only where the processes' samples agree (every process read at least ``inside_min_samples``
times has the phase in at least ``inside_phase_share`` of them) while the GPU waits, and comes before the
outside rules it refines: from outside, a Python loop on one core looks like num_workers=0, a CPU optimizer or
a loader waiting on latency like nothing at all. With no samples (no stacks recorded, py-spy not allowed) none
holds, and the outside rules speak as before. The evidence names the process, the phase, its frame, the
count and the busy threads, and says once why dumps failed where some did.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.inside import (
    COMPILE,
    EXTERNAL,
    HOST_COMPUTE,
    LOADER_WAIT,
    LOADING,
    OWN_PYTHON,
    WORKER_WAITING,
    ProcessInside,
)
from gpu_triage.diagnosis.mechanisms.base import WAITS, Advice, Cause, Need, Rule, ge
from gpu_triage.diagnosis.mechanisms.pipeline import pipeline_advice
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements

STACKS_SEEN = Need("stacks_seen", lambda m: bool(m.inside.processes))
# the job has run a kernel: a process that waits or loops before its first one is starting up (a rendezvous,
# a poll for a file, parsing its config), not a step held by what it waits on
RUNNING = Need("running", lambda m: m.judged.span.first_kernel is not None)


class InsideRule(Rule):
    """A rule that names its mechanism from the main threads' phases: ``phases`` in most samples."""

    phases: tuple[str, ...] = ()

    def agreeing(self, m: Measurements) -> list[ProcessInside]:
        return m.inside.agreeing(self.phases, int(m.th.inside_min_samples), m.th.inside_phase_share)

    def evidence(self, m: Measurements, procs: list[ProcessInside], *extra: Fact | None) -> list[Fact]:
        facts = [p.fact(self.phases) for p in procs[:2]]
        if len(procs) > 2:
            facts.append(Fact(f"and {len(procs) - 2} more process{'es' if len(procs) > 3 else ''} alike"))
        failed = m.inside.failed_fact()
        return [*m.base, *facts, *(e for e in extra if e is not None), *([failed] if failed else [])]

    def counted(self, m: Measurements, procs: list[ProcessInside], confidence: float, *extra: Fact | None) -> Cause:
        """The cause at ``confidence``, capped at ``conf_inside_few`` (possible) where the phase rests on fewer
        than ``inside_likely_samples`` samples in the process that has the fewest: 2 of 2 is a hint."""
        th = m.th
        if min(p.count(self.phases) for p in procs) < th.inside_likely_samples:
            confidence = min(confidence, th.conf_inside_few)
        return self.cause(confidence, self.evidence(m, procs, *extra))

    def lead(self, m: Measurements) -> tuple[str, str]:
        """(the leading phase, its frame) of the first agreeing process: what the advice names."""
        procs = self.agreeing(m)
        if not procs:
            return "", ""
        phase = procs[0].leading(self.phases)
        return phase, procs[0].frames.get(phase, "")


class Recompile(InsideRule):
    """torch.compile compiling in most samples of a job past its start: a graph recompiled again and again
    (a shape or a Python value a guard checks changes every few steps). Real H200 job recompiling each step
    and every 8th: the main thread in dynamo/inductor 7 of 9 samples, the card idle between."""

    name, bottleneck, needs, phases = Mechanism.RECOMPILE, Bottleneck.COMPILE, (WAITS, STACKS_SEEN), COMPILE

    def detect(self, m: Measurements) -> Cause | None:
        procs = self.agreeing(m)
        return self.counted(m, procs, m.th.conf_recompile) if procs else None

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return ([f"torch.compile is compiling ({self.lead(m)[1] or 'dynamo / inductor'}) while the GPU waits: "
                 "run with TORCH_LOGS=recompiles (torch._dynamo's recompile log) to see which guard fails",
                 "a shape that changes: torch._dynamo.mark_dynamic(tensor, dim) or torch.compile(dynamic=True), "
                 "or pad to a few fixed sizes; a Python number or object that changes: pass it as a tensor",
                 "past torch._dynamo.config.cache_size_limit recompiles the frame runs eagerly: the log says so; "
                 "once at start is expected (a compile cache, TORCHINDUCTOR_CACHE_DIR, shortens the next run)"], [])


class OtherThread(InsideRule):
    """The main thread off CPU while another thread of the process runs Python on a CPU, in at least
    ``inside_phase_share`` of the samples that carry their threads (trace v4): that thread holds the step
    through the GIL, the main thread waits. A
    thread of the job's own (real held-out: three metrics threads taking turns), a gradient hook on autograd's
    thread (the main thread in backward), a pin-memory thread copying each batch (the input pipeline: then the
    bottleneck is the data pipeline's). From the main thread's frames alone the sample reads as whatever it
    waits in (an optimizer's step, backward, a lock), and the advice would be that phase's."""

    name, bottleneck = Mechanism.OTHER_THREAD, Bottleneck.HOST_STEP
    needs = (WAITS, STACKS_SEEN, RUNNING)

    def detect(self, m: Measurements) -> Cause | None:
        th = m.th
        read = [p for p in m.inside.processes if p.thread_read.samples >= th.inside_min_samples]
        if not read or any(p.thread_read.held < th.inside_phase_share * p.thread_read.samples for p in read):
            return None
        conf = th.conf_other_thread
        if min(p.thread_read.held for p in read) < th.inside_likely_samples:
            conf = min(conf, th.conf_inside_few)
        facts = []
        for p in read[:2]:
            tr = p.thread_read
            who, k = tr.holder()
            alike = f" (another thread in {tr.held - k} more)" if tr.held > k else ""
            facts.append(Fact(f"{p.name}'s main thread was off CPU while thread {who} was on a CPU (its Python, or "
                              f"the native code it calls) in {k} of {tr.samples} samples{alike}",
                              "other_thread_share", tr.held / tr.samples, p.cards, p.pid))
        loading = all(2 * p.thread_read.held_loading > p.thread_read.held for p in read)
        bottleneck = Bottleneck.DATA_PIPELINE if loading else self.bottleneck
        return Cause(bottleneck, conf, [*m.base, *facts], self.name)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        procs = [p for p in m.inside.processes if p.thread_read.holders]
        who = procs[0].thread_read.holder()[0] if procs else "another thread"
        if cause.bottleneck == Bottleneck.DATA_PIPELINE:
            return ([f"the loop waits for a thread of its input pipeline ({who}): with pin_memory=True one thread "
                     "of the training process copies every batch into pinned memory; smaller batches on the host "
                     "(uint8, not float32), pinning in the workers (a pinned buffer reused), or pin_memory=False "
                     "with .to(device, non_blocking=True) from the workers' own pinned tensors",
                     "more DataLoader workers do not help while this one thread is the limit"], [])
        return ([f"another thread of the training process runs Python while the step waits for the GIL ({who}): "
                 "move its work to a separate process (multiprocessing), make it hold the GIL less (larger numpy "
                 "/ torch calls release it), or run it less often",
                 "a gradient hook (register_hook, a backward hook) runs its Python on autograd's thread inside "
                 "backward: keep hooks to tensor ops, log from them every N steps",
                 "py-spy dump --pid PID shows every thread: the one active in Python is the one"], [])


class HostCompute(InsideRule):
    """An optimizer or a model part computing on the CPU: the main thread in torch.optim / autograd / a module
    in most samples with more threads busy than a launching thread and autograd's (``host_compute_threads``).
    A GPU model's step passes through the same modules on one or two threads while it launches kernels: that
    is the outside's launch_overhead (``host_bound_step``), left to it. Real H200: AdamW over host master
    weights (16 and 4 threads busy, 6-7 of 8 samples in _multi_tensor_adam), a model part on the CPU (its
    backward and optimizer in every sample, 16 and 4 threads)."""

    name, bottleneck, needs, phases = Mechanism.HOST_COMPUTE, Bottleneck.HOST_STEP, (WAITS, STACKS_SEEN), HOST_COMPUTE

    def detect(self, m: Measurements) -> Cause | None:
        th = m.th
        # a thread launching a GPU step's kernels keeps its card running them (a launch-bound loop reads
        # GPU-Util 20-31 %): torch's code in most samples while the card is stalled runs on the CPU, on any
        # number of threads (real AdamW over host master weights with 2 threads: GPU-Util 4-6 %); but with a
        # thread on a CPU at those dumps: a main thread in backward with none busy waits for the GPU's backward
        stalled = m.hf.gpu_mean < th.stall_util_pct  # False where not measured (NaN)
        procs = [p for p in self.agreeing(m)
                 if (stalled and p.busy_in(self.phases) > 0) or ge(p.busy_threads, th.host_compute_threads)]
        if not procs or len(procs) < len(self.agreeing(m)):
            return None
        return self.counted(m, procs, th.conf_host_compute)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        phase, frame = self.lead(m)
        if phase == "optimizer":
            return ([f"the optimizer steps on the CPU ({frame or 'torch.optim'}): keep it on the GPU if its state "
                     "fits; else a fused multi-tensor CPU Adam (DeepSpeed's DeepSpeedCPUAdam) and overlap the "
                     "step with the next forward (ZeRO-Offload's delayed parameter update)",
                     "torch.set_num_threads to the physical cores the job owns: the step is CPU arithmetic",
                     "send fewer bytes each way: bf16 gradients and parameters over PCIe"], [])
        return ([f"part of the model runs on the CPU ({frame or 'a module'}): move every module and its inputs "
                 "to the GPU (.to(device)); torch.profiler's CPU ops name the ones left",
                 "if it must stay on the CPU: overlap it with the GPU's work (a separate stream / thread) and "
                 "give it the physical cores (torch.set_num_threads)"], [])


class PythonStep(InsideRule):
    """The process's own Python on one core in most samples (no library phase under it) while its card waits:
    a loop between steps, per-step bookkeeping, ``.item()`` / ``.cpu()`` syncs (C called from Python reads
    as the caller). From outside exactly num_workers=0 (one core, no workers). A pageable host-to-device copy
    is one thread's memcpy called from Python too: while PCIe shows the copy it is left to ``h2d_copy``; a loop
    that calls torch ops one by one is its own Python too: while the card shows tiny kernels (GPU-Util with
    no SM activity) it is left to ``launch_overhead``.
    Real H200: a Python loop of 60 and 250 ms per step, 8 of 8 samples in its own function, 1 thread busy."""

    name, bottleneck, phases = Mechanism.PYTHON_STEP, Bottleneck.HOST_STEP, OWN_PYTHON
    needs = (WAITS, STACKS_SEEN, RUNNING)

    def detect(self, m: Measurements) -> Cause | None:
        th = m.th
        if ge(m.hf.h2d_bytes_per_s, th.h2d_bytes_per_s):
            return None  # the Python that calls a pageable copy: the copy is the step (h2d_copy)
        if m.sm_known and ge(m.hf.gpu_mean, th.stall_util_pct) and m.hf.sm_mean < th.sm_idle_pct:
            return None  # a loop calling torch ops reads as its own Python too: tiny kernels (launch_overhead)
        procs = self.agreeing(m)
        if not procs or any(ge(p.busy_threads, th.host_compute_threads) for p in procs):
            return None  # its own code on many threads: a C extension computing, not the Python loop
        return self.counted(m, procs, th.conf_python_step)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return ([f"the step waits on the training process's own Python ({self.lead(m)[1] or 'its code'}): move "
                 "per-step work off the step (every N steps, or a background thread) and vectorise loops over "
                 "tensors",
                 ".item(), .cpu(), .tolist() or print of a CUDA tensor each step wait for the GPU: accumulate on "
                 "the GPU and read every N steps",
                 "profile one step: py-spy record --pid PID, or torch.profiler with with_stack=True"], [])


class InputLatency(InsideRule):
    """The loop waits for batches (``dataloader_wait``) while the workers wait inside the Dataset off CPU:
    each sample's fetch has latency (an object store, a network file system, a database), not a CPU or a local
    disk limit; from outside the cores and disks are quiet. Real H200: 4 and 8 workers sleeping 5 and 20 ms
    per sample, the main thread in _try_get_data in every sample, the workers off CPU in __getitem__."""

    name, bottleneck, phases = Mechanism.INPUT_LATENCY, Bottleneck.DATA_PIPELINE, LOADER_WAIT
    needs = (WAITS, STACKS_SEEN, RUNNING)

    def detect(self, m: Measurements) -> Cause | None:
        procs = self.agreeing(m)
        th = m.th
        for p in procs:
            total = sum(p.workers.values())
            if not total or p.workers.get(WORKER_WAITING, 0) / total < th.inside_phase_share:
                return None  # workers computing, or not seen: the outside's loader rules read them
        if not procs:
            return None
        return self.counted(m, procs, th.conf_input_latency, procs[0].workers_fact(WORKER_WAITING))

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return (["the DataLoader's workers wait inside the Dataset (a read, a fetch), they do not compute: more "
                 "workers (num_workers, they cost little while they wait) and a deeper prefetch_factor",
                 "fetch asynchronously or in batches inside the Dataset (threads or asyncio per batch, an "
                 "IterableDataset that keeps requests in flight), or cache the data near the GPU",
                 "lighter preprocessing will not help: the workers are waiting, not computing"], [])


class InProcessLoading(InsideRule):
    """The main thread in the DataLoader's fetch or collate in most samples: num_workers=0 (PyTorch's default)
    makes every batch in the training process, between the steps. From outside the same one core as the
    process's own Python (``one_core.py``); the stack names the Dataset.

    Or in as many samples as the phase that leads, when that is the step's own host work (torch's code or the
    process's Python on a CPU), within sampling noise (``inside_tie_sigmas``), the two together most of them:
    the loader and the loop's own work run one after the other on the one thread, the
    samples cannot tell which takes longer, and the loader's share is the one that configuration alone takes off
    the step (workers make the batches while the step runs), so it is named first, as possible, with both shares
    in the evidence. Real held-out ``slow_collate_b256``: a pure-Python collate_fn 5 of 12 samples, the loop's
    F.pad on each batch 7 of 12, the lab's clock 83 % of the step in next(it). Before the host rules that would
    name the other phase of the tie."""

    name, bottleneck, phases = Mechanism.IN_PROCESS_LOADER, Bottleneck.DATA_PIPELINE, LOADING
    needs = (WAITS, STACKS_SEEN, RUNNING)

    def detect(self, m: Measurements) -> Cause | None:
        procs = self.agreeing(m)
        if procs:
            return self.counted(m, procs, m.th.conf_in_process)
        th = m.th
        read = [p for p in m.inside.processes if p.samples >= th.inside_min_samples]
        ties = [tie for p in read if (tie := _tie(p, self.phases, th.inside_tie_sigmas, th.inside_phase_share))]
        if not read or len(ties) < len(read):
            return None
        conf = min(th.conf_in_process, th.conf_inside_few)  # a tie: possible, whatever the counts
        return self.cause(conf, self.evidence(m, read, *ties[:2]))

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return pipeline_advice(m, Mechanism.IN_PROCESS_LOADER), []


class ExternalWait(InsideRule):
    """The main thread off CPU on a socket, a poll or a sleep in most samples of a job that runs kernels:
    the step waits on another service (an RPC, a parameter server, a reward model, a database) or a sleep.
    Real H200: a call to a local service of 100 and 400 ms per step, the main thread in the call 4-9 of 8-9
    samples (the rest on the lock the reply comes through)."""

    name, bottleneck, phases = Mechanism.EXTERNAL_WAIT, Bottleneck.EXTERNAL_WAIT, EXTERNAL
    needs = (WAITS, STACKS_SEEN, RUNNING)

    def detect(self, m: Measurements) -> Cause | None:
        procs = self.agreeing(m)
        return self.counted(m, procs, m.th.conf_external_wait) if procs else None

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        phase, frame = self.lead(m)
        frame = frame or "the call in the evidence"
        if phase == "sleep":
            return ([f"the step sleeps ({frame}): remove the sleep or make it conditional; a poll loop can "
                     "wait on an event instead"], [])
        return ([f"the step waits on another service ({frame}): speed that service up, or take the call off "
                 "the step (a background thread with a queue, asynchronous requests, batched calls)",
                 "check the service's own latency and load: the GPU waits as long as it does"], [])


# the step's own work on the host, the other side of a tie with the loader: what host_compute and python_step
# name; a main thread that mostly waits (on the GPU, a socket, a lock) is read by the rules of what it waits on
HOST_WORK = frozenset(HOST_COMPUTE + OWN_PYTHON)


def _tie(p: ProcessInside, phases: tuple[str, ...], sigmas: float, most: float) -> Fact | None:
    """The sentence saying that ``p``'s main thread was in ``phases`` about as often as in the phase that leads
    the others, when that is the step's own host work (HOST_WORK; their counts apart by at most ``sigmas`` x
    sqrt(their sum)), the two in at least ``most`` of its samples; None where the samples tell them apart, the
    leading phase is a wait, or ``phases`` were not seen."""
    k = p.count(phases)
    others = {ph: c for ph, c in p.counts.items() if ph not in phases}
    if not k or not others:
        return None
    lead, c = max(others.items(), key=lambda pc: pc[1])
    if lead not in HOST_WORK or c - k > sigmas * math.sqrt(c + k) or c + k < most * p.samples:
        return None
    at = f" at {p.frames[lead]}" if p.frames.get(lead) else ""
    return Fact(f"{p.name}'s main thread was in {lead}{at} in {c} of {p.samples} samples: too close to the loader's "
                f"{k} for the samples to tell which takes longer; with num_workers=0 each batch is made between the "
                "steps, and DataLoader workers would take the loader's share off them", "main_thread_phase_share",
                c / p.samples, p.cards, p.pid)


INSIDE_RULES: tuple[InsideRule, ...] = (Recompile(), OtherThread(), InProcessLoading(), HostCompute(), PythonStep(),
                                        InputLatency(), ExternalWait())
INSIDE_MECHANISMS = frozenset(r.name for r in INSIDE_RULES)


def not_read(m: Measurements, cause: Cause) -> Fact | None:
    """Why some stacks could not be read, said once, where the cause was read from outside (an inside rule's
    evidence says it itself)."""
    fact = m.inside.failed_fact()
    if fact is None or cause.mechanism in INSIDE_MECHANISMS:
        return None
    return Fact(fact.text + ": read from outside", fact.metric, fact.value)
