"""A real PyTorch training for the pulse proof on the GPU machine (issue 12's pulse proof, 2 H200s, 2026-11-30; docs/h200.md).

usage: python3 lab/pulse_train.py --mode starved|fixed --seconds S --progress FILE.json
       torchrun --standalone --nproc_per_node=2 lab/pulse_train.py ...   (DDP, one card per rank)

An MLP (4096 -> 8192 -> 6 x 8192, bf16 autocast, AdamW) trained on a dataset whose every sample costs real
CPU (~2 ms: a decode-and-augment stand-in), through ``gpu_triage.pulse.watch`` (the two lines a user adds).
``starved``: one DataLoader worker per rank, far slower than the card. ``fixed``: 12 workers, pinned memory,
prefetch 4, persistent workers. Rank 0 draws a tqdm bar (to stderr: the job log the recorder follows) and
keeps its own count, the reference the recorded samples/s is checked against: after every step the time and
the job's cumulative samples (steps x batch x world size), written to --progress at the end. With several
ranks the last step is decided together (``stop_together``: an all-reduce of a stop flag), so no rank waits in
a collective its peers have left. Each rank
writes its pid to $RANK_PID_DIR so that the driver script can end leftover ranks by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from gpu_triage import pulse

try:
    from tqdm import tqdm
except ImportError:  # the proof needs real tqdm output: say so loudly in the log instead of faking a bar
    tqdm = None

BATCH = 64


class HeavyCPU(Dataset):
    """Each sample costs real CPU (about 2 ms on the H200 machine's cores)."""

    def __init__(self, n: int = 10**9) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng(i)
        img = rng.random((256, 256, 3), dtype=np.float32)
        for _ in range(8):
            img = np.sqrt(img * 1.0001 + 0.5)
        return torch.from_numpy(img.reshape(-1)[:4096].copy())


class Model(torch.nn.Module):
    def __init__(self, d_in: int = 4096, d: int = 8192, layers: int = 6, rows: int = 128) -> None:
        super().__init__()
        self.rows = rows  # each sample becomes `rows` tokens: enough work per step for an H200
        self.inp = torch.nn.Linear(d_in, d)
        self.body = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.GELU())
                                          for _ in range(layers)])
        self.head = torch.nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, f = x.shape
        x = x.unsqueeze(1).expand(b, self.rows, f).reshape(b * self.rows, f)
        return self.head(self.body(self.inp(x)))


def stop_together(stop: bool, world: int, dev: torch.device) -> bool:
    """Whether every rank leaves the loop after this step: the ranks decide the last step together.

    Each rank's deadline runs on its own clock, started after its own first step, so with a rank-local
    test one rank can leave the loop while its peer starts one more step and waits forever in that step's
    gradient all-reduce (the 2-card starved run of 2026-11-30 hung so: rank 0 sat in the barrier after the
    loop, rank 1 in backward(), until the timeout killed torchrun). An all-reduce (MAX) of the stop flag
    makes the first rank past its deadline stop them all at the same step. It costs one tiny collective and
    one sync per step: nothing beside a starved step of ~130 ms, well under 1 % of a fixed step of ~40 ms.
    """
    if world == 1:
        return stop
    import torch.distributed as dist

    flag = torch.tensor([1 if stop else 0], dtype=torch.int32, device=dev)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("starved", "fixed"), required=True)
    ap.add_argument("--seconds", type=float, default=35.0)
    ap.add_argument("--progress", required=True, help="rank 0 writes its own count here (JSON)")
    args = ap.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    pid_dir = os.environ.get("RANK_PID_DIR")
    if pid_dir:
        os.makedirs(pid_dir, exist_ok=True)
        with open(os.path.join(pid_dir, f"rank-{rank}.pid"), "w") as fh:
            fh.write(str(os.getpid()))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl")
    torch.manual_seed(0)
    model: torch.nn.Module = Model().to(dev)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    if args.mode == "starved":
        loader = DataLoader(HeavyCPU(), batch_size=BATCH, num_workers=1, persistent_workers=True)
    else:
        loader = DataLoader(HeavyCPU(), batch_size=BATCH, num_workers=12, pin_memory=True, prefetch_factor=4,
                            persistent_workers=True)

    bar = None
    if rank == 0:
        if tqdm is None:
            print("pulse_train: tqdm is not installed: no progress bar (carry its wheel in .whl/)",
                  file=sys.stderr, flush=True)
        else:
            bar = tqdm(desc=f"train {args.mode} x{world}", unit="it", file=sys.stderr, mininterval=0.2)
    own: list[tuple[float, int]] = []  # (time after the step, the job's cumulative samples)
    steps = 0
    deadline = None
    for x in pulse.watch(loader, batch_size=BATCH):
        x = x.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        if steps % 10 == 0:
            value = loss.item()  # a sync every 10 steps, as logging code does
            if bar is not None:
                bar.set_postfix(loss=f"{value:.4f}", refresh=False)
        if bar is not None:
            bar.update(1)
        now = time.time()
        if rank == 0:
            own.append((now, steps * BATCH * world))
        if deadline is None:
            deadline = now + args.seconds  # the clock starts after the first (warm-up) step
        if stop_together(now >= deadline, world, dev):
            break
    torch.cuda.synchronize()
    if bar is not None:
        bar.close()
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        (t0, n0), (t1, n1) = own[0], own[-1]
        rate = (n1 - n0) / (t1 - t0) if t1 > t0 else float("nan")
        print(f"pulse_train: {args.mode} x{world}: {n1} samples in {steps} steps; "
              f"{rate:.1f} samples/s after the first step (the training's own count)", flush=True)
        with open(args.progress, "w") as fh:
            json.dump({"mode": args.mode, "world": world, "batch": BATCH, "tqdm": tqdm is not None,
                       "points": own}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
