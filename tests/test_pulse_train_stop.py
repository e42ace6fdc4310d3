"""The pulse proof's training decides its last step on all ranks together (lab/pulse_train.py).

On 2026-11-30 the 2-card starved run hung at its end: each rank tested its own deadline, rank 0 left the loop
and waited in the barrier while rank 1 started one more step and waited in its gradient all-reduce. Here two
CPU ranks (gloo) reach their deadlines at different steps; both must leave the loop at the same step.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from torch_needed import need_torch

SCRIPT = Path(__file__).resolve().parent.parent / "lab" / "pulse_train.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("pulse_train", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rank(rank: int, port: int, deadline_step: list[int], out: str) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(SCRIPT.parent))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    train = _load()
    steps = 0
    while steps < 50:
        steps += 1
        dist.all_reduce(torch.ones(1))  # the step's own collective (DDP's gradient all-reduce)
        if train.stop_together(steps >= deadline_step[rank], 2, torch.device("cpu")):
            break
    dist.barrier()
    dist.destroy_process_group()
    Path(out, f"rank{rank}").write_text(str(steps))


@pytest.mark.slow
def test_ranks_with_different_deadlines_leave_at_the_same_step(tmp_path: Path) -> None:
    need_torch()
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # forked, not spawned: each rank then starts with the torch this process has loaded instead of importing it
    # again (2.5 s of CPU a rank); the ranks run only gloo and one-element tensors, nothing a fork upsets
    ctx = mp.start_processes(_rank, args=(port, [3, 7], str(tmp_path)), nprocs=2, join=False, start_method="fork")
    for p in ctx.processes:
        p.join(60)
    alive = [p for p in ctx.processes if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "a rank hung: the ranks did not agree on the last step"
    assert [int((tmp_path / f"rank{r}").read_text()) for r in (0, 1)] == [3, 3]


def test_one_rank_stops_on_its_own_flag() -> None:
    need_torch()
    import torch

    train = _load()
    assert train.stop_together(True, 1, torch.device("cpu")) is True
    assert train.stop_together(False, 1, torch.device("cpu")) is False

