"""One rank of ``gpu-triage baseline``: run as ``python -m gpu_triage.checkup.baseline_rank CONFIG_JSON``.

Started by :mod:`gpu_triage.checkup.baseline` with the environment torchrun would set (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``). It builds the model on its device, makes
fixed random tensors there once, runs forward-backward-optimizer steps (no input pipeline, no IO), warms up,
then times steps until ``seconds`` have passed. With several ranks the last step is decided together: every
few steps the ranks all-reduce a stop flag (MAX), so no rank is left waiting in a collective for one that
already stopped. Rank 0 writes the result as one JSON object to ``result_path``.

SIGINT is ignored here (the parent owns Ctrl-C and ends the ranks with SIGTERM); SIGTERM stops the loop at
the next agreed check, or ends the process if it is stuck.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any

# model sizes: (width, hidden layers, per-rank batch). "tiny" is for a CPU check (CI); "small" and "medium"
# are for GPUs: medium is ~540M parameters, enough work per step that gradient traffic is a fair share.
MODEL_SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (128, 2, 64),
    "small": (2048, 4, 1024),
    "medium": (8192, 8, 2048),
}
CLASSES = 16
CHECK_EVERY_S = 0.2  # how often the ranks agree whether to stop


def _log(rank: int, text: str) -> None:
    print(f"[rank {rank}] {text}", file=sys.stderr, flush=True)


def build_model(torch: Any, size: str) -> Any:
    width, layers, _batch = MODEL_SIZES[size]
    mods: list[Any] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
    mods.append(torch.nn.Linear(width, CLASSES))
    return torch.nn.Sequential(*mods)


def _die_with_parent() -> None:
    """Linux: the kernel kills this rank if `gpu-triage baseline` dies without ending it (kill -9, OOM)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError) as exc:
        _log(int(os.environ.get("RANK", "0")), f"cannot tie this rank to its parent ({exc})")
    if os.getppid() == 1:  # the parent died before the call above
        os._exit(1)


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    stop_requested = [False]

    def on_term(_signum: int, _frame: Any) -> None:
        if stop_requested[0]:  # a second SIGTERM: stuck somewhere, leave now
            os._exit(143)
        stop_requested[0] = True

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)
    _die_with_parent()

    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = cfg["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        torch.set_float32_matmul_precision("high")  # TF32 matmuls, as training scripts set them
    else:
        device = torch.device("cpu")
        torch.set_num_threads(int(cfg["threads"]))
    if world > 1:
        dist.init_process_group(
            backend="nccl" if cuda else "gloo",
            init_method="env://",
            timeout=timedelta(seconds=float(cfg["init_timeout_s"])),
        )
    torch.manual_seed(0)
    width, _layers, batch = MODEL_SIZES[cfg["model_size"]]
    model = build_model(torch, cfg["model_size"]).to(device)
    params = sum(p.numel() for p in model.parameters())
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    amp_dtype = torch.bfloat16 if cfg["amp"] else None

    from gpu_triage import pulse  # the job's own pulse: a recorder beside us sees our samples/s

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        pulse.step(batch, data_wait_s=0.0)  # fixed tensors on the card: no input pipeline, no wait

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def agree(value: float, op: Any) -> float:
        if world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=op)
        return float(t.item())

    # warm-up: allocator, kernels chosen, NCCL channels set up; its step time picks how often to check
    sync()
    began = time.perf_counter()
    for _ in range(int(cfg["warmup_steps"])):
        step()
    sync()
    warm_step_s = agree((time.perf_counter() - began) / max(1, int(cfg["warmup_steps"])), dist.ReduceOp.MAX)
    check_every = max(1, int(CHECK_EVERY_S / max(warm_step_s, 1e-6)))

    seconds = float(cfg["seconds"])
    steps = 0
    interrupted = False
    sync()
    began = time.perf_counter()
    while True:
        for _ in range(check_every):
            step()
        steps += check_every
        sync()
        elapsed = time.perf_counter() - began
        flag = 2.0 if stop_requested[0] else (1.0 if elapsed >= seconds else 0.0)
        flag = agree(flag, dist.ReduceOp.MAX)  # the last step, decided together
        if flag:
            interrupted = flag >= 2.0
            break
    elapsed = agree(time.perf_counter() - began, dist.ReduceOp.MAX)  # the slowest rank's clock
    result = {
        "world_size": world,
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "backend": ("nccl" if cuda else "gloo") if world > 1 else None,
        "model_size": cfg["model_size"],
        "parameters": params,
        "batch_per_rank": batch,
        "amp": bool(cfg["amp"]),
        "steps": steps,
        "elapsed_s": elapsed,
        "step_ms": 1000.0 * elapsed / steps,
        "samples_per_s": world * batch * steps / elapsed,
        "interrupted": interrupted,
        "torch": torch.__version__,
    }
    if rank == 0:  # written before the teardown: a rank that crashes while leaving loses nothing measured
        tmp = cfg["result_path"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, cfg["result_path"])
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
