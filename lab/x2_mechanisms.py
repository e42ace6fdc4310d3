"""Issue #11's mechanisms as real PyTorch jobs on a 2-card H200 machine, one known cause each.

usage:
  python3 x2_mechanisms.py h2d     MARKS.json --batch B --secs S            (one process per card, CUDA_VISIBLE_DEVICES)
  python3 x2_mechanisms.py loader0 MARKS.json --batch B --rounds R --secs S (likewise)
  torchrun --nproc_per_node 2 x2_mechanisms.py ddp_ckpt MARKS.json --dim D --layers L --every E --secs S
  torchrun --nproc_per_node 2 x2_mechanisms.py stuck    MARKS.json --numel N --hang-rank R --warm S

Each run appends its own window (UTC start/end, what ran, its settings and its true samples/s) to MARKS.json;
A one-off script (in git history) ran gpu-triage's recorder beside them and the labels are written from these marks.
torchrun ranks write their pid to $PIDDIR/<mode>-rank<R>.pid so that the calling script can end a hung rank by
its pid (torchrun starts ranks in sessions of their own: they outlive the launcher).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import time
from datetime import UTC, datetime, timedelta

# NVLink multicast stays off on the lent machines (it can take the host's GPUs out of service).
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

import numpy as np
import torch


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def mark(path: str, **kw: object) -> None:
    """Append one window to the marks file (several processes may write it: take a lock)."""
    with open(path + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        marks = []
        if os.path.exists(path):
            with open(path) as f:
                marks = json.load(f)
        marks.append(kw)
        with open(path, "w") as f:
            json.dump(marks, f, indent=1)
    print("MARK", json.dumps(kw), flush=True)


def card() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0")


# 1. Host-to-device copy bound: big batches from pageable host memory into a small model.
def h2d(a: argparse.Namespace) -> None:
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(16, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pool = [torch.rand(a.batch, 3, 224, 224) for _ in range(2)]  # pageable: no pin_memory
    y_host = torch.randint(0, 10, (a.batch,))
    nbytes = pool[0].numel() * 4

    def step(x_host: torch.Tensor) -> None:
        x = x_host.to(dev)  # synchronous copy through the driver's staging buffer, by one CPU thread
        loss = torch.nn.functional.cross_entropy(model(x), y_host.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(3):
        step(pool[i % 2])
    torch.cuda.synchronize()
    t0 = time.time()
    n = k = 0
    while time.time() - t0 < a.secs:
        step(pool[k % 2])
        n += a.batch
        k += 1
    torch.cuda.synchronize()
    t1 = time.time()
    print(f"h2d card {card()} batch {a.batch}: {n / (t1 - t0):.1f} samples/s, "
          f"{k * nbytes / (t1 - t0) / 1e9:.2f} GB/s host->device, {k} steps", flush=True)
    mark(a.marks, mode="h2d", card=card(), batch=a.batch, batch_mb=round(nbytes / 1e6), start=iso(t0),
         end=iso(t1), samples_per_s=round(n / (t1 - t0), 1), gb_per_s=round(k * nbytes / (t1 - t0) / 1e9, 2))


# 2. The input pipeline inside the training process: DataLoader(num_workers=0), CPU-heavy __getitem__.
class HeavyCPU(torch.utils.data.Dataset):
    """Each sample costs real CPU (decode-and-augment stand-in): numpy on the calling thread."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng(i)
        img = rng.random((256, 256, 3), dtype=np.float32)
        for _ in range(self.rounds):
            img = np.sqrt(img * 1.0001 + 0.5)
        return torch.from_numpy(img.reshape(-1)[:4096].copy())


class HeavyImages(HeavyCPU):
    """Like HeavyCPU, but whole 3x224x224 images, for a real vision model."""

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng(i)
        img = rng.random((224, 224, 3), dtype=np.float32)
        for _ in range(self.rounds):
            img = np.sqrt(img * 1.0001 + 0.5)
        return torch.from_numpy(img.transpose(2, 0, 1).copy())


def loader0(a: argparse.Namespace) -> None:
    dev = "cuda"
    if a.model == "resnet50":  # a real step of tens of ms on the card (torchvision, fp32 like most examples)
        import torchvision

        model = torchvision.models.resnet50().to(dev)
        data: torch.utils.data.Dataset = HeavyImages(a.rounds)
    else:  # a small MLP: the card is nearly idle (the first recording)
        model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).to(dev)
        data = HeavyCPU(a.rounds)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, num_workers=0)  # the default
    it = iter(loader)
    for _ in range(2):
        next(it)
    t0 = time.time()
    n = k = 0
    for x in it:
        x = x.to(dev, non_blocking=True)
        if a.model == "resnet50":
            loss = model(x).float().pow(2).mean()
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        n += x.shape[0]
        k += 1
        if time.time() - t0 >= a.secs:
            break
    torch.cuda.synchronize()
    t1 = time.time()
    print(f"loader0 {a.model} card {card()} batch {a.batch} rounds {a.rounds}: {n / (t1 - t0):.1f} samples/s, "
          f"{(t1 - t0) / k * 1000:.0f} ms/step", flush=True)
    mark(a.marks, mode="loader0", model=a.model, card=card(), batch=a.batch, rounds=a.rounds, start=iso(t0), end=iso(t1),
         samples_per_s=round(n / (t1 - t0), 1), ms_per_step=round((t1 - t0) / k * 1000))


def _dist_init(a: argparse.Namespace, timeout_s: float) -> tuple[int, int]:
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    os.makedirs(a.piddir, exist_ok=True)
    with open(os.path.join(a.piddir, f"{a.mode}-rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=timedelta(seconds=timeout_s), device_id=torch.device("cuda", local))
    return rank, local


# 3. DDP on 2 cards; rank 0 writes a large checkpoint with fsync every E s; rank 1 waits at the next all-reduce.
def ddp_ckpt(a: argparse.Namespace) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, local = _dist_init(a, 300)
    model = torch.nn.Sequential(*[torch.nn.Linear(a.dim, a.dim) for _ in range(a.layers)]).cuda()
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-5)
    x = torch.randn(a.batch, a.dim, device="cuda")
    stop = torch.zeros(1, device="cuda")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = last = time.time()
    steps = 0
    ckpts = []
    while True:
        step()
        steps += 1
        stop.fill_(1.0 if time.time() - t0 >= a.secs else 0.0)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item() > 0:
            break
        if rank == 0 and time.time() - last >= a.every:
            c0 = time.time()
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": steps}
            with open(a.ckpt, "wb") as f:
                torch.save(state, f)
                c1 = time.time()
                f.flush()
                os.fsync(f.fileno())
            c2 = time.time()
            size = os.path.getsize(a.ckpt)
            ckpts.append({"start": iso(c0), "save_s": round(c1 - c0, 2), "fsync_s": round(c2 - c1, 2),
                          "gb": round(size / 1e9, 2)})
            print(f"rank 0 checkpoint {size / 1e9:.2f} GB: torch.save {c1 - c0:.2f} s, fsync {c2 - c1:.2f} s",
                  flush=True)
            last = time.time()
    torch.cuda.synchronize()
    t1 = time.time()
    sps = steps * a.batch * dist.get_world_size() / (t1 - t0)
    print(f"ddp_ckpt rank {rank}: {steps} steps, {sps:.1f} samples/s over both ranks", flush=True)
    if rank == 0:
        mark(a.marks, mode="ddp_ckpt", dim=a.dim, layers=a.layers, batch_per_rank=a.batch, every_s=a.every,
             start=iso(t0), end=iso(t1), steps=steps, samples_per_s=round(sps, 1), checkpoints=ckpts)
        if os.path.exists(a.ckpt):
            os.remove(a.ckpt)
    dist.destroy_process_group()


# 4. A stuck collective: one rank stops calling collectives, the other spins in all_reduce until killed.
def stuck(a: argparse.Namespace) -> None:
    import torch.distributed as dist

    rank, _ = _dist_init(a, 600)  # the watchdog must not end it first: the script kills both ranks by pid
    x = torch.ones(a.numel, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    k = 0
    while time.time() - t0 < a.warm:
        dist.all_reduce(x)
        x.mul_(0.5)
        for _ in range(4):
            w = torch.tanh(w @ w)
        k += 1
        if k % 10 == 0:
            torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t1 = time.time()
    print(f"stuck rank {rank}: {k} all-reduces of {a.numel * 2 / 1e6:.0f} MB in {t1 - t0:.1f} s", flush=True)
    if rank == a.hang_rank:
        mark(a.marks, mode="stuck", hang_rank=a.hang_rank, numel=a.numel, warm_start=iso(t0), start=iso(t1),
             spinning_rank=1 - a.hang_rank)
        with open(os.path.join(a.piddir, "stuck-started"), "w") as f:
            f.write(f"{t1}\n")
        print(f"rank {rank} stops calling collectives (sleeps, as a hung rank does)", flush=True)
        time.sleep(3600)
    else:
        print(f"rank {rank} enters all_reduce; its peer never will", flush=True)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        print("unexpected: all_reduce returned", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["h2d", "loader0", "ddp_ckpt", "stuck"])
    p.add_argument("marks")
    p.add_argument("--secs", type=float, default=25)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--model", choices=["mlp", "resnet50"], default="mlp")
    p.add_argument("--dim", type=int, default=4096)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--every", type=float, default=8)
    p.add_argument("--ckpt", default="/var/tmp/lab-ckpt.pt")
    p.add_argument("--numel", type=int, default=32 * 2**20)
    p.add_argument("--hang-rank", type=int, default=1)
    p.add_argument("--warm", type=float, default=8)
    p.add_argument("--piddir", default=os.environ.get("PIDDIR", "/tmp/lab-pids"))
    a = p.parse_args()
    {"h2d": h2d, "loader0": loader0, "ddp_ckpt": ddp_ckpt, "stuck": stuck}[a.mode](a)


if __name__ == "__main__":
    main()
