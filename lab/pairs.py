"""Before/after pairs on one GPU for the headroom estimate (issue 37): each mechanism runs once bottlenecked
(``before``) and once with its fix (``after``), the same GPU work a step, the job's clock on.

usage: python3 lab/pairs.py NAME before|after MARKS.json --secs S --progress FILE.json

Every step goes through ``gpu_triage.pulse.watch`` (the recorder beside the job reads its samples/s and its
data wait), and the job keeps its own count too: after every timed step the time and its cumulative samples,
written to --progress at the end (the format of the h200x2 pulse pairs' progress files). The timed loop starts
after a warm-up (cuBLAS, the allocator, the first compile) and prints ``LOOP_START <epoch>``; the run appends
its window, its own samples/s and the share of the loop its host part took (``host_share``) to MARKS.json.
DEV=cpu runs a mechanism at small sizes, to check the script off the GPU machine.

The GPU work of a step is the same in both halves of a pair: a bf16 MLP (4 x 8192 wide) over 8192 rows, about
25 ms on an H200, so that the host part of a ``before`` step is of the same order and the card waits about half
the time. What each fix changes is the host side only:

  host_python   per-sample metrics in a Python loop over .tolist() | the same metrics with torch on the GPU
  h2d_pageable  each step copies a pageable host batch (.to(dev), blocking) | the batches kept on the GPU
  recompile     torch.compile(dynamic=False), the row count changes every 8 steps | padded to one shape
  loader0       DataLoader num_workers=0 over a CPU-heavy decode | 12 workers, pinned, prefetch 4
  service_wait  each step waits on another service over a socket | the next call in flight on a thread
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import torch
from inside_mechanisms import DEV, SMALL, iso, mark, sync

from gpu_triage import pulse

D, ROWS, LAYERS = (256, 256, 2) if SMALL else (8192, 8192, 4)


def mlp() -> torch.nn.Module:
    mods: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        mods += [torch.nn.Linear(D, D), torch.nn.GELU()]
    return torch.nn.Sequential(*mods).to(DEV)


def step_loss(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    """One training step; the per-row loss (on the device, not synchronised)."""
    with torch.autocast(DEV, dtype=torch.bfloat16):
        per_row = model(x).float().pow(2).mean(dim=1)
    opt.zero_grad(set_to_none=True)
    per_row.mean().backward()
    opt.step()
    return per_row.detach()


class Clock:
    """The timed loop's own count: the end time and cumulative samples of every step."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a, self.samples, self.host_s, self.points = a, 0, 0.0, []
        sync()
        self.t0 = time.time()
        print(f"LOOP_START {self.t0:.3f}", flush=True)

    def running(self) -> bool:
        return time.time() - self.t0 < self.a.secs

    def step(self, n: int) -> None:
        self.samples += n
        self.points.append((time.time(), self.samples))

    def host(self, t0: float) -> None:
        self.host_s += time.perf_counter() - t0

    def done(self, **truth: object) -> None:
        sync()
        t1 = time.time()
        with open(self.a.progress, "w") as f:
            json.dump({"mode": f"{self.a.name}-{self.a.phase}", "world": 1, "points": self.points}, f)
        mark(self.a.marks, name=self.a.name, phase=self.a.phase, start=iso(self.t0), end=iso(t1),
             start_s=self.t0, end_s=t1, samples_per_s=round(self.samples / (t1 - self.t0), 2),
             steps=len(self.points), host_share=round(self.host_s / (t1 - self.t0), 3), **truth)


def warm(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, n: int = 5) -> None:
    for _ in range(n):
        step_loss(model, opt, x)
    sync()


def forever(x: torch.Tensor) -> Iterator[torch.Tensor]:
    while True:
        yield x


# 1. Per-sample metrics in Python: the losses come back to the host each step and a loop buckets them.
def python_metrics(losses: list[float]) -> dict[str, float]:
    rows = [{"i": i, "loss": v, "bucket": min(9, int(v * 10))} for i, v in enumerate(losses)]
    hist = [0] * 10
    for r in rows:
        hist[r["bucket"]] += 1
    worst = sorted(rows, key=lambda r: -r["loss"])[:16]
    return {"mean": sum(r["loss"] for r in rows) / len(rows), "worst": worst[0]["loss"], "top": hist.index(max(hist))}


def host_python(a: argparse.Namespace) -> None:
    model, x = mlp(), torch.randn(ROWS, D, device=DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    warm(model, opt, x)
    edges = torch.linspace(0.1, 0.9, 9, device=DEV)
    kept: list[object] = []
    clock = Clock(a)
    for xb in pulse.watch(forever(x), batch_size=ROWS):
        per_row = step_loss(model, opt, xb)
        t0 = time.perf_counter()
        if a.phase == "before":
            kept.append(python_metrics(per_row.tolist()))
        else:  # the same metrics as tensor ops, queued behind the step: no sync, no Python per sample
            hist = torch.bincount(torch.bucketize(per_row.clamp(0, 0.99), edges), minlength=10)
            kept.append((per_row.mean(), per_row.max(), hist.argmax()))
        clock.host(t0)
        if len(kept) > 64:
            kept.clear()
        clock.step(ROWS)
        if not clock.running():
            break
    clock.done(spent="per-sample metrics in Python" if a.phase == "before" else "metrics as tensor ops")


# 2. A pageable host batch copied to the card each step (blocking), against the batches kept on the card.
def h2d_pageable(a: argparse.Namespace) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    pool = [torch.randn(ROWS, D) for _ in range(4)]  # pageable: torch.randn on the host is not pinned
    if a.phase == "after":
        pool = [p.to(DEV) for p in pool]
    warm(model, opt, pool[0].to(DEV))
    clock = Clock(a)
    for xb in pulse.watch(itertools.cycle(pool), batch_size=ROWS):
        t0 = time.perf_counter()
        x = xb.to(DEV)  # a no-op for a batch already on the card
        clock.host(t0)
        step_loss(model, opt, x)
        clock.step(ROWS)
        if not clock.running():
            break
    clock.done(spent="pageable host-to-device copy each step" if a.phase == "before" else "batches on the card",
               batch_mb=round(pool[0].numel() * 4 / 1e6, 1))


# 3. torch.compile recompiling as the row count changes (dynamic=False), against padding to one shape.
def recompile(a: argparse.Namespace) -> None:
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 1024
    model = mlp()
    cmodel = torch.compile(model, dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    every = 8

    def batches() -> Iterator[torch.Tensor]:
        for k in itertools.count():
            rows = ROWS - 8 * ((k // every) % 500 + 1)  # a new length every 8 steps, never seen before
            yield torch.randn(rows, D, device=DEV)

    def one(x: torch.Tensor) -> None:
        n = x.shape[0]
        if a.phase == "after":  # padded to ROWS rows; the pad rows are masked out of the loss
            x = torch.cat([x, x.new_zeros(ROWS - n, D)])
        with torch.autocast(DEV, dtype=torch.bfloat16):
            per_row = cmodel(x).float().pow(2).mean(dim=1)
        loss = per_row[:n].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    one(torch.randn(ROWS - 8, D, device=DEV))  # the first compile is the warm-up of both
    sync()
    clock = Clock(a)
    for x in pulse.watch(batches()):
        t0 = time.perf_counter()
        one(x)
        if a.phase == "before" and x.shape[0] != getattr(recompile, "last", None):
            clock.host(t0)  # the step that compiled: its host time is the compile (and the launch)
        recompile.last = x.shape[0]  # type: ignore[attr-defined]
        clock.step(x.shape[0])
        if not clock.running():
            break
    clock.done(spent="recompiling on a new shape every 8 steps" if a.phase == "before" else "one padded shape",
               every=every)


# 4. Decoding in the training process (num_workers=0), against 12 workers.
class Decode(torch.utils.data.Dataset):
    """Each sample costs real CPU (about 2 ms): a decode-and-augment stand-in."""

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng(i)
        side = 64 if SMALL else 256
        img = rng.random((side, side, 3), dtype=np.float32)
        for _ in range(8):
            img = np.sqrt(img * 1.0001 + 0.5)
        return torch.from_numpy(img.reshape(-1)[:D].copy())


def loader0(a: argparse.Namespace) -> None:
    batch, per = (8, ROWS // 8) if SMALL else (64, ROWS // 64)  # each sample becomes `per` rows: ROWS a step
    if a.phase == "before":
        ld = torch.utils.data.DataLoader(Decode(), batch_size=batch, num_workers=0)
    else:
        ld = torch.utils.data.DataLoader(Decode(), batch_size=batch, num_workers=2 if SMALL else 12,
                                         pin_memory=DEV == "cuda", prefetch_factor=4, persistent_workers=True)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    warm(model, opt, torch.randn(ROWS, D, device=DEV))
    it = iter(ld)
    next(it)  # the workers are up
    clock = Clock(a)
    for xb in pulse.watch(it, batch_size=batch):
        x = xb.to(DEV, non_blocking=True).repeat_interleave(per, dim=0)
        step_loss(model, opt, x)
        clock.step(batch)
        if not clock.running():
            break
    clock.done(spent="decoding in the training process" if a.phase == "before" else "12 decode workers",
               batch=batch)


# 5. Each step waits on another service (a reward model, a feature store) over a local socket.
def serve(sock: socket.socket, delay_s: float) -> None:
    while True:
        conn, _ = sock.accept()
        with conn:
            while conn.recv(64):
                time.sleep(delay_s)
                conn.sendall(b"ok")


def service_wait(a: argparse.Namespace) -> None:
    delay = 0.004 if SMALL else 0.025
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    if os.fork() == 0:  # the service is another process, as it would be
        signal.alarm(int(a.secs) + 60)  # and ends after the job, whatever happens to it
        serve(srv, delay)
        os._exit(0)
    srv.close()
    model, x = mlp(), torch.randn(ROWS, D, device=DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    warm(model, opt, x)
    cli = socket.create_connection(("127.0.0.1", port))

    def call() -> bytes:
        cli.sendall(b"score this batch")
        return cli.recv(64)

    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="service")
    ahead = pool.submit(call) if a.phase == "after" else None
    clock = Clock(a)
    for xb in pulse.watch(forever(x), batch_size=ROWS):
        t0 = time.perf_counter()
        if ahead is None:
            call()  # the reply this step needs, asked for now
        else:  # asked for during the previous step; the next one goes out at once
            ahead.result()
            ahead = pool.submit(call)
        clock.host(t0)
        per_row = step_loss(model, opt, xb)
        per_row.sum().item()  # the score goes back to the service with the next call: one sync a step
        clock.step(ROWS)
        if not clock.running():
            break
    if ahead is not None:
        ahead.result()
    cli.close()
    clock.done(spent="waiting on a socket for another service" if a.phase == "before" else "the call in flight "
               "during the step", delay_ms=int(delay * 1000))


MECHANISMS = {f.__name__: f for f in (host_python, h2d_pageable, recompile, loader0, service_wait)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name", choices=sorted(MECHANISMS))
    p.add_argument("phase", choices=("before", "after"))
    p.add_argument("marks")
    p.add_argument("--secs", type=float, default=45)
    p.add_argument("--progress", required=True)
    a = p.parse_args()
    if pidfile := os.environ.get("PIDFILE"):
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
    torch.manual_seed(0)
    threading.current_thread().name = "MainThread"
    MECHANISMS[a.name](a)
    sys.stdout.flush()
    os._exit(0)  # the forked service and persistent workers end with us


if __name__ == "__main__":
    main()
