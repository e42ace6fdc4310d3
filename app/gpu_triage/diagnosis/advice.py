"""Advice in the user's terms: what to change in the training script or the machine, per bottleneck.

Starting points are the method's (field notes): ``num_workers`` from cores/4 to cores/2 per process,
``pin_memory=True``, ``prefetch_factor`` 2-4, ``persistent_workers=True``, ``drop_last=True`` with several
cards; sharded formats or caching for storage; topology, ``NCCL_P2P_LEVEL`` and mixed precision for
communication; CUDA graphs, ``torch.compile`` and larger batches for launch overhead.
"""

from __future__ import annotations

from gpu_triage.diagnosis.causes import HostFacts, ProcFacts


def workers_range(cores: int, processes: int) -> tuple[int, int]:
    """num_workers per training process: cores/4 to cores/2, shared among the processes on the host."""
    per = max(cores, 1) / max(processes, 1)
    return max(1, int(per // 4)), max(1, int(per // 2))


def advise(bottleneck: str, pattern: str, hf: HostFacts, pf: ProcFacts, n_gpus: int, n_procs: int) -> list[str]:
    out: list[str] = []
    lo, hi = workers_range(hf.cores, max(n_procs, 1))
    if bottleneck == "data_pipeline":
        if pf.respawns >= 2:
            out.append("DataLoader(persistent_workers=True): keep the workers alive between epochs instead of "
                       "re-spawning them (and their slow start) every epoch")
        if hf.cpu_saturated_share >= 0.5:
            out.append("every core is busy preparing input: make preprocessing lighter (decode once, resize "
                       "offline, faster image decoder) or move augmentation to the GPU (DALI, torchvision v2 on cuda)")
            out.append(f"num_workers between {lo} and {hi} per process; more workers than cores only adds contention")
        else:
            have = f" (now {pf.workers})" if pf.seen else ""
            out.append(f"DataLoader(num_workers={lo}..{hi}){have}: between cores/4 and cores/2 per process on "
                       f"{hf.cores} cores")
        out.append("pin_memory=True and prefetch_factor=2..4 so batches are ready before the GPU asks")
        if pf.respawns < 2:
            out.append("persistent_workers=True so workers survive the epoch boundary")
        if n_gpus >= 2:
            out.append("drop_last=True with several cards, so no rank waits on a short last batch")
    elif bottleneck == "storage_io":
        out.append("read fewer, larger files: a sharded sequential format (WebDataset tar shards, TFRecord, "
                   "Parquet) instead of many small random reads")
        out.append("cache the dataset in memory (or on local NVMe) after the first epoch if it fits")
        out.append("more DataLoader workers and prefetch_factor=4 to keep more reads in flight")
    elif bottleneck == "communication":
        out.append("check the topology (nvidia-smi topo -m / gpu-triage doctor): cards talking over PHB/SYS "
                   "instead of NVLink pay for every all-reduce")
        out.append("set NCCL_P2P_LEVEL to what the topology allows (NVL, PIX, PHB) and check NCCL_DEBUG=INFO")
        out.append("mixed precision (bf16) halves gradient traffic; larger batches or gradient accumulation "
                   "all-reduce less often")
        if pattern == "imbalanced":
            out.append("a straggler holds the others: balance the work per rank (drop_last=True, equal shard "
                       "sizes) and look for a slow card or a busy host core next to it")
    elif bottleneck == "launch_overhead":
        out.append("capture the step in CUDA graphs (torch.cuda.graphs / torch.compile(mode='reduce-overhead'))")
        out.append("torch.compile to fuse the many small kernels into few large ones")
        out.append("larger batches so each kernel does more work per launch")
    elif bottleneck == "memory_idle":
        out.append("a process holds GPU memory without running kernels: finish or kill it (see the process "
                   "list), or free it with del + torch.cuda.empty_cache() if it is yours and waiting")
    elif bottleneck == "stall_unexplained":
        out.append("the job itself pauses: look for time.sleep, synchronous checkpoints or evaluation, "
                   "logging with .item()/.cpu() every step, or waits on another service")
        out.append("profile one period with torch.profiler to see what the GPU waits on")
    if pattern == "single_card_busy":
        if pf.ranks_on_first_card >= 2:
            out.insert(0, f"{pf.ranks_on_first_card} processes share one card while the others idle: call "
                          "torch.cuda.set_device(local_rank) (or use cuda:{local_rank}) in every rank")
        else:
            out.insert(0, "one card works and the rest idle: launch one process per card (torchrun "
                          "--nproc_per_node=N) and call torch.cuda.set_device(local_rank)")
    return out
