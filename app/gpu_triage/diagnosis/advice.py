"""Advice in the user's terms: what to change in the training script or the machine, per mechanism.

Starting points are the method's (field notes): ``num_workers`` from cores/4 to cores/2 per process (one
recommendation, :class:`~gpu_triage.diagnosis.causes.WorkersRec`, computed once per verdict),
``pin_memory=True``, ``prefetch_factor`` 2-4, ``persistent_workers=True``, ``drop_last=True`` with several
cards; sharded formats or caching for storage; topology, ``NCCL_P2P_LEVEL`` and mixed precision for
communication with traffic, and finding the missing rank for a collective with none; CUDA graphs,
``torch.compile`` and larger batches for launch overhead.

Destructive advice (kill, free, restart) is returned apart: the tracker shows it only once the verdict is
confident and has been shown for ``hold_s`` (see tracker.py).
"""

from __future__ import annotations

from gpu_triage.diagnosis.causes import Cause, Context

HANG_ADVICE = [
    "find the missing rank: py-spy dump --pid PID of every rank shows which one is not in the collective",
    "rerun with NCCL_DEBUG=INFO to see the last collective each rank entered",
    ("set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a collective timeout (init_process_group(timeout=...)) so a "
     "hung collective fails instead of spinning"),
]


def advise(cause: Cause, ctx: Context) -> tuple[list[str], list[str]]:
    """(advice, destructive advice) for the cause that ``ctx`` produced."""
    out: list[str] = []
    destructive: list[str] = []
    pf, mech = ctx.pf, cause.mechanism
    bottleneck = cause.bottleneck
    if bottleneck == "data_pipeline":
        if mech == "h2d_copy":
            out.append("DataLoader(pin_memory=True) and .to(device, non_blocking=True): copies from pinned memory "
                       "run at full PCIe speed and overlap compute")
            out.append("send smaller dtypes (uint8 images, bf16) and decode/augment on the GPU")
        elif mech == "in_process_loader":
            rec = ctx.workers
            hi = rec.hi if rec else 2
            span = "2" if hi <= 2 else f"2..{hi}"
            out.append(f"DataLoader(num_workers={span}) (now 0): PyTorch's default num_workers=0 loads every batch "
                       "in the training process, between steps")
        if pf.respawns >= ctx.th.respawns_min:
            out.append("DataLoader(persistent_workers=True): keep the workers alive between epochs instead of "
                       "re-spawning them (and their slow start) every epoch")
        if ge_share(ctx):
            out.append("every core is busy preparing input: make preprocessing lighter (decode once, resize "
                       "offline, faster image decoder) or move augmentation to the GPU (DALI, torchvision v2 on cuda)")
        if ctx.workers is not None and mech not in ("h2d_copy", "in_process_loader"):
            out.append(ctx.workers.line())
        if mech != "h2d_copy":
            out.append("pin_memory=True and prefetch_factor=2..4 so batches are ready before the GPU asks")
        if pf.respawns < ctx.th.respawns_min and mech not in ("h2d_copy", "in_process_loader"):
            out.append("persistent_workers=True so workers survive the epoch boundary")
        if ctx.n_gpus >= 2:
            out.append("drop_last=True with several cards, so no rank waits on a short last batch")
    elif bottleneck == "storage_io":
        if mech == "rank_blocked_on_storage":
            out.append("write checkpoints asynchronously (torch.distributed.checkpoint async_save, or a thread) or "
                       "from every rank's shard, so one rank's fsync does not stop all the others")
            out.append("write to local NVMe and copy to shared storage in the background")
        else:
            out.append("read fewer, larger files: a sharded sequential format (WebDataset tar shards, TFRecord, "
                       "Parquet) instead of many small random reads")
            out.append("cache the dataset in memory (or on local NVMe) after the first epoch if it fits")
            out.append("more DataLoader workers and prefetch_factor=4 to keep more reads in flight")
    elif bottleneck == "communication":
        if mech == "hung_collective":
            out.extend(HANG_ADVICE)
            destructive.append("once the missing rank is known, restart the job from its last checkpoint")
        else:
            out.append("check the topology (nvidia-smi topo -m / gpu-triage doctor): cards talking over PHB/SYS "
                       "instead of NVLink pay for every all-reduce")
            out.append("set NCCL_P2P_LEVEL to what the topology allows (NVL, PIX, PHB) and check NCCL_DEBUG=INFO")
            out.append("mixed precision (bf16) halves gradient traffic; larger batches or gradient accumulation "
                       "all-reduce less often")
            if ctx.pattern == "imbalanced":
                out.append("a straggler holds the others: balance the work per rank (drop_last=True, equal shard "
                           "sizes) and look for a slow card or a busy host core next to it")
    elif bottleneck == "launch_overhead":
        out.append("capture the step in CUDA graphs (torch.cuda.graphs / torch.compile(mode='reduce-overhead'))")
        out.append("torch.compile to fuse the many small kernels into few large ones")
        out.append("larger batches so each kernel does more work per launch")
        if mech == "in_process_or_launch":
            out.append("if the process loads data itself: DataLoader(num_workers=2 or more)")
    elif bottleneck == "memory_idle":
        out.append("a process holds GPU memory without running kernels: see which one in the process list and "
                   "whether it should still be waiting")
        destructive.append("if it should not: finish or kill it, or free the memory with del + "
                           "torch.cuda.empty_cache() if it is yours")
    elif bottleneck == "stall_unexplained":
        out.append("the job itself pauses: look for time.sleep, synchronous checkpoints or evaluation, "
                   "logging with .item()/.cpu() every step, or waits on another service")
        out.append("profile one period with torch.profiler to see what the GPU waits on")
    if ctx.pattern == "single_card_busy" and bottleneck in ("none", "data_pipeline", "launch_overhead",
                                                               "stall_unexplained"):
        if pf.ranks_on_first_card >= 2:
            out.insert(0, f"{pf.ranks_on_first_card} processes share one card while the others idle: call "
                          "torch.cuda.set_device(local_rank) (or use cuda:{local_rank}) in every rank")
        else:
            out.insert(0, "one card works and the rest idle: launch one process per card (torchrun "
                          "--nproc_per_node=N) and call torch.cuda.set_device(local_rank)")
    return out, destructive


def ge_share(ctx: Context) -> bool:
    return ctx.hf.cpu_saturated_share >= ctx.th.cpu_saturated_share
