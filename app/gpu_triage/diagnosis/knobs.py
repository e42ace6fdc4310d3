"""Each bottleneck's knob in a few words: what a fleet-wide ranking prints beside it.

A verdict's own advice (its rule's ``advise``) reads the measurements of that moment and names the figures; a
ranking over a week of stored verdicts has only the bottleneck, so it says the knob its rules' advice turns
first. A bottleneck this version does not know (a newer recording's) has none.
"""

from __future__ import annotations

from gpu_triage.diagnosis.vocab import Bottleneck

KNOBS: dict[str, str] = {
    Bottleneck.NONE: "",
    Bottleneck.STORAGE_IO: "faster reads: stage the data on local NVMe, more reader threads, larger files",
    Bottleneck.DATA_PIPELINE: "DataLoader: more num_workers, pin_memory, prefetch_factor; lighter CPU transforms",
    Bottleneck.MEMORY_IDLE: "a process holds GPU memory with no work: finish it or free its memory",
    Bottleneck.COMMUNICATION: "the slow rank or link: NCCL topology (NCCL_DEBUG=INFO), overlap comms with compute",
    Bottleneck.LAUNCH_OVERHEAD: "fewer, larger kernels: CUDA graphs, torch.compile, larger batches",
    Bottleneck.STALL_UNEXPLAINED: "the job stalls on its own: py-spy dump --pid PID while it waits",
    Bottleneck.PLACEMENT: "one card per rank: torch.cuda.set_device(local_rank) or CUDA_VISIBLE_DEVICES per rank",
    Bottleneck.IMBALANCE: "balance the work per rank (equal shards, drop_last=True), or check the slow card",
    Bottleneck.HUNG_COLLECTIVE: "find the missing rank (py-spy dump every rank), set a collective timeout",
    Bottleneck.HOST_STEP: "take the step's own CPU work off the loop: fewer .item() syncs, work on the GPU",
    Bottleneck.COMPILE: "stop the recompiles: TORCH_LOGS=recompiles, mark_dynamic or dynamic=True",
    Bottleneck.EXTERNAL_WAIT: "take the service call or sleep off the step: a background thread, batched calls",
    Bottleneck.HOST_OR_INPUT: "DataLoader(num_workers=2 or more), then py-spy dump to tell loading from the step",
    Bottleneck.UNEXPLAINED: "no rule names it: run gpu-triage on the host while it happens, py-spy dump the job",
}


def knob(bottleneck: str | None) -> str:
    """``bottleneck``'s knob, "" for none or one this version does not know."""
    return KNOBS.get(bottleneck or "", "")
