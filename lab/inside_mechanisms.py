"""Mechanisms that no outside rule names, as real PyTorch jobs on one GPU: what the job's own threads and
stacks are needed to tell apart (the evidence-from-inside work).

usage: python3 inside_mechanisms.py NAME SETTING MARKS.json --secs S

Each run writes its pid to $PIDFILE (for the stack sampler beside it) and appends its own window (UTC
start/end, name, setting, the true samples/s and what it really spent its time on) to MARKS.json.
DEV=cpu runs a mechanism on the CPU at small sizes, to check the script itself off the GPU machine.

Names and the settings of the first recordings (any number works: t8, w2l50, ms120, every3, ms200):
  cpu_offload_adamw  t16 | t4        AdamW on the CPU over host master weights (ZeRO-Offload style)
  latency_input      w4l5 | w8l20    DataLoader workers waiting on a high-latency fetch (sleep per sample)
  python_host_loop   ms60 | ms250    the training process's own Python work between GPU steps
  item_sync          every1 | every8 a .item() host sync after every op (or every 8th) for logging
  compile_recompile  each | every8   torch.compile recompiling on changing input shapes
  service_wait       ms100 | ms400   each step waits on another service over a local socket
  slow_start         parse | poll    CUDA context up, no step yet: indexing a dataset / waiting for a file
  cpu_model_part     t16 | t4        an EmbeddingBag kept on the CPU (fwd + bwd in CPU autograd), MLP on GPU
  h2d_copy_1card     pinned | pageable  host-to-device copies of big batches into a small model, one card
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from datetime import UTC, datetime

import numpy as np
import torch

DEV = os.environ.get("DEV", "cuda")
SMALL = DEV == "cpu"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def mark(path: str, **kw: object) -> None:
    with open(path + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        marks = json.load(open(path)) if os.path.exists(path) else []
        marks.append(kw)
        with open(path, "w") as f:
            json.dump(marks, f, indent=1)
    print("MARK", json.dumps(kw), flush=True)


def number(setting: str, prefix: str) -> int:
    """The number in a setting: t16 -> 16 threads, ms250 -> 250 ms, every8 -> every 8th."""
    if not (setting.startswith(prefix) and setting[len(prefix):].isdigit()):
        raise SystemExit(f"setting {setting!r}: expected {prefix}N")
    return int(setting[len(prefix):])


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def mlp(d: int, layers: int) -> torch.nn.Module:
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(d, d), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).to(DEV)


def gpu_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    with torch.autocast(DEV, dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


class Loop:
    """Runs step() until the time is up, counting samples, then marks the window."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.samples = 0
        self.t0 = time.time()

    def running(self) -> bool:
        return time.time() - self.t0 < self.a.secs

    def done(self, **truth: object) -> None:
        sync()
        t1 = time.time()
        mark(self.a.marks, name=self.a.name, setting=self.a.setting, start=iso(self.t0), end=iso(t1),
             start_s=self.t0, end_s=t1, samples_per_s=round(self.samples / (t1 - self.t0), 2), **truth)


# 1. Optimizer on the CPU: gradients down, AdamW over float32 host master weights, parameters up.
def cpu_offload_adamw(a: argparse.Namespace) -> None:
    torch.set_num_threads(number(a.setting, "t"))
    d, layers, batch = (512, 2, 64) if SMALL else (4096, 8, 256)
    model = mlp(d, layers)
    pin = DEV == "cuda"
    master = [p.detach().float().cpu().pin_memory() if pin else p.detach().float().cpu().clone() for p in model.parameters()]
    for m in master:
        m.grad = torch.zeros_like(m)
    opt = torch.optim.AdamW(master, lr=1e-4, foreach=True)
    x = torch.randn(batch, d, device=DEV)
    loop = Loop(a)
    while loop.running():
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        model.zero_grad(set_to_none=True)
        loss.backward()
        for m, p in zip(master, model.parameters(), strict=True):
            m.grad.copy_(p.grad, non_blocking=True)
        sync()
        opt.step()
        with torch.no_grad():
            for m, p in zip(master, model.parameters(), strict=True):
                p.copy_(m, non_blocking=True)
        loop.samples += batch
    loop.done(spent="AdamW.step on the CPU", threads=torch.get_num_threads())


# 2. Input bound by latency: each sample is a slow remote GET (a sleep), so workers wait, not compute.
class RemoteSamples(torch.utils.data.Dataset):
    def __init__(self, latency_s: float, d: int) -> None:
        self.latency_s, self.d = latency_s, d

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.latency_s)  # an object-store GET, a feature-store lookup: the worker waits
        return torch.full((self.d,), float(i % 7))


def latency_input(a: argparse.Namespace) -> None:
    workers, lat_ms = (int(n) for n in re.fullmatch(r"w(\d+)l(\d+)", a.setting).groups())  # type: ignore[union-attr]
    d, batch = (512, 32) if SMALL else (4096, 32)
    model = mlp(d, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ld = torch.utils.data.DataLoader(RemoteSamples(lat_ms / 1000, d), batch_size=batch, num_workers=workers,
                                     persistent_workers=True, pin_memory=DEV == "cuda")
    loop = Loop(a)
    for x in ld:
        gpu_step(model, opt, x.to(DEV, non_blocking=True))
        loop.samples += batch
        if not loop.running():
            break
    loop.done(spent="workers sleeping in __getitem__ (fetch latency)", workers=workers, latency_ms=lat_ms)


# 3. The training process's own Python between steps (metrics, bookkeeping in pure Python).
def python_bookkeeping(budget_s: float) -> float:
    t0 = time.perf_counter()
    acc = 0.0
    while time.perf_counter() - t0 < budget_s:
        rows = [{"k": i, "v": i * 0.5} for i in range(2000)]
        acc += sum(r["v"] for r in rows if r["k"] % 3)
    return acc


def python_host_loop(a: argparse.Namespace) -> None:
    ms = number(a.setting, "ms")
    d, batch = (512, 64) if SMALL else (8192, 512)
    model = mlp(d, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, d, device=DEV)
    loop = Loop(a)
    while loop.running():
        gpu_step(model, opt, x)
        sync()
        python_bookkeeping(ms / 1000)
        loop.samples += batch
    loop.done(spent="pure-Python bookkeeping in the main thread", python_ms_per_step=ms)


# 4. A host sync for logging after every op: the GPU waits on the CPU reading back each scalar.
def item_sync(a: argparse.Namespace) -> None:
    every = number(a.setting, "every")
    d = 256 if SMALL else 2048
    ws = [torch.randn(d, d, device=DEV) / d**0.5 for _ in range(64)]
    x = torch.randn(d, d, device=DEV)
    logged: list[float] = []
    loop = Loop(a)
    while loop.running():
        h = x
        for i, w in enumerate(ws):
            h = torch.tanh(h @ w)
            if i % every == 0:
                logged.append(h.norm().item())  # what a per-layer metric logger does
        loop.samples += d
        if len(logged) > 10000:
            logged.clear()
    loop.done(spent=".item() syncs for logging", every=every)


# 5. torch.compile recompiling because the input shapes keep changing.
def compile_recompile(a: argparse.Namespace) -> None:
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 256
    change_every = 1 if a.setting == "each" else number(a.setting, "every")
    d = 256 if SMALL else 2048
    model = mlp(d, 4)
    cmodel = torch.compile(model, dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loop = Loop(a)
    step = 0
    while loop.running():
        batch = 64 + 8 * ((step // change_every) % 200)
        x = torch.randn(batch, d, device=DEV)
        loss = cmodel(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loop.samples += batch
        step += 1
    loop.done(spent="dynamo/inductor recompiling", change_every=change_every, steps=step)


# 6. Each step waits on another service (a reward model, a rollout server, a feature store) over a socket.
def serve(sock: socket.socket, delay_s: float) -> None:
    while True:
        conn, _ = sock.accept()
        with conn:
            while conn.recv(64):
                time.sleep(delay_s)
                conn.sendall(b"ok")


def service_wait(a: argparse.Namespace) -> None:
    delay = number(a.setting, "ms") / 1000
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    if os.fork() == 0:  # the service is another process, as it would be
        signal.alarm(int(a.secs) + 30)  # and ends after the job, whatever happens to it
        serve(srv, delay)
        os._exit(0)
    srv.close()
    d, batch = (512, 64) if SMALL else (8192, 512)
    model = mlp(d, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, d, device=DEV)
    cli = socket.create_connection(("127.0.0.1", port))
    loop = Loop(a)
    while loop.running():
        cli.sendall(b"score this batch")
        cli.recv(64)
        gpu_step(model, opt, x)
        sync()
        loop.samples += batch
    cli.close()
    loop.done(spent="waiting on a socket for another service", delay_ms=int(delay * 1000))


# 7. The card is taken (CUDA context, weights loaded) but no step comes: indexing, or waiting for a file.
def slow_start(a: argparse.Namespace) -> None:
    model = mlp(256 if SMALL else 4096, 8)  # weights on the card: memory in use, no work
    sync()
    loop = Loop(a)
    if a.setting == "parse":
        line = json.dumps({"path": "/data/shard-000123/img-000456.jpg", "label": 17, "w": 640, "h": 480})
        n = 0
        while loop.running():
            for _ in range(5000):
                json.loads(line)
            n += 5000
        truth = {"spent": "json-parsing a dataset index", "records": n}
    else:
        flag = "/tmp/dataset-ready.flag"
        while loop.running() and not os.path.exists(flag):
            time.sleep(0.5)  # waiting for a download, a mount, another rank's preprocessing
        truth = {"spent": "polling for a file in sleep"}
    del model
    loop.done(**truth)


# 8. Part of the model on the CPU: an EmbeddingBag table in host memory, its forward and backward in CPU autograd.
def cpu_model_part(a: argparse.Namespace) -> None:
    torch.set_num_threads(number(a.setting, "t"))
    rows, dim, batch, bag = (10000, 64, 256, 8) if SMALL else (2_000_000, 256, 4096, 64)
    table = torch.nn.EmbeddingBag(rows, dim, mode="sum")  # stays on the CPU
    top = mlp(dim, 2)
    opt = torch.optim.SGD(list(table.parameters()) + list(top.parameters()), lr=1e-3)
    loop = Loop(a)
    while loop.running():
        idx = torch.randint(0, rows, (batch * bag,))
        off = torch.arange(0, batch * bag, bag)
        emb = table(idx, off)
        out = top(emb.to(DEV, non_blocking=True))
        loss = out.float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loop.samples += batch
    loop.done(spent="EmbeddingBag forward/backward in CPU autograd", threads=torch.get_num_threads())


# 9. Host-to-device copies of big batches into a small model, one card (nobody to talk to).
def h2d_copy_1card(a: argparse.Namespace) -> None:
    pinned = a.setting == "pinned"
    batch = 8 if SMALL else 256
    host = torch.randn(batch, 3, 224 if not SMALL else 32, 224 if not SMALL else 32)
    if pinned and DEV == "cuda":
        host = host.pin_memory()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(16, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loop = Loop(a)
    while loop.running():
        for _ in range(4):
            x = host.to(DEV, non_blocking=pinned)
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        loop.samples += batch
    loop.done(spent="host-to-device copies", pinned=pinned)


MECHANISMS = {f.__name__: f for f in (cpu_offload_adamw, latency_input, python_host_loop, item_sync, compile_recompile,
                                       service_wait, slow_start, cpu_model_part, h2d_copy_1card)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name", choices=sorted(MECHANISMS))
    p.add_argument("setting")
    p.add_argument("marks")
    p.add_argument("--secs", type=float, default=30)
    a = p.parse_args()
    if pidfile := os.environ.get("PIDFILE"):
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
    np.random.seed(0)
    torch.manual_seed(0)
    threading.current_thread().name = "MainThread"
    MECHANISMS[a.name](a)
    sys.stdout.flush()
    os._exit(0)  # the forked service and persistent workers end with us


if __name__ == "__main__":
    main()
