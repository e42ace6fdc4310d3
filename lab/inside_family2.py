"""A second family of real 1-GPU mechanisms that no outside rule names: host-side work of many shapes that keeps a
card waiting, each a small PyTorch job that measures itself (issue 34's held-out family).

usage: python3 inside_family2.py NAME SETTING MARKS.json --secs S

As lab/inside_mechanisms.py: each run writes its pid to $PIDFILE and appends its window and its own readings to
MARKS.json. Besides, it prints ``LOOP_START <epoch>`` when its timed loop begins (the cost benchmark starts the
stack sampler's segment from it) and writes the end time of every step to $STEP_LOG (JSON), so that the step
time with and without sampling is read from the job's own clock. Each job also times the part of its step that
is the mechanism (``host_s``: the host-side work, measured around it in the main thread, or in the hook/thread
that does it) against its whole loop: ``host_share``, the lab's own reading of how much of a step the host holds.
DEV=cpu runs a mechanism at small sizes, to check the script off the GPU machine.

Names (the setting is a number with its unit prefix, as in inside_mechanisms.py):
  gil_thread           t3     another Python thread (a metrics aggregator) holds the GIL; the main loop starves
  pin_memory_thread    b32    DataLoader, 4 fast workers, pin_memory=True on 32 x 3x512x512 fp32 batches
  sync_checkpoint      every5 torch.save of the whole state dict, synchronously, every 5 steps
  cpu_tokenize         n256   regex + dict tokenization of 256 texts in the main loop, no DataLoader
  sync_tiny_kernels    k200   200 tiny kernels a step, torch.cuda.synchronize() after each
  logging_hook         n600   600 metrics a step formatted and written through logging (file + stream handlers)
  cpu_augment_accum    a4     4 micro-batches a step, each augmented with numpy in the main thread
  cpu_embedding_lookup r65536 65,536 random rows gathered from a 2M x 256 table on the CPU each step
  slow_collate         b256   num_workers=0 with a pure-Python collate_fn (padding lists)
  autograd_hook        p16    a gradient hook on each of 16 parameters doing Python statistics with .item()
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time

import numpy as np
import torch
from inside_mechanisms import DEV, SMALL, gpu_step, iso, mark, mlp, number, sync


class Steps:
    """The timed loop: runs while the time is left, keeps each step's end time and the host part's seconds."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.samples = 0
        self.host_s = 0.0
        self.ends: list[float] = []
        sync()
        self.t0 = time.time()
        print(f"LOOP_START {self.t0:.3f}", flush=True)

    def running(self) -> bool:
        return time.time() - self.t0 < self.a.secs

    def step(self, samples: int) -> None:
        self.samples += samples
        self.ends.append(time.time())

    def host(self, t0: float) -> None:
        self.host_s += time.perf_counter() - t0

    def done(self, **truth: object) -> None:
        sync()
        t1 = time.time()
        if path := os.environ.get("STEP_LOG"):
            with open(path, "w") as f:
                json.dump({"start": self.t0, "ends": self.ends}, f)
        mark(self.a.marks, name=self.a.name, setting=self.a.setting, start=iso(self.t0), end=iso(t1),
             start_s=self.t0, end_s=t1, samples_per_s=round(self.samples / (t1 - self.t0), 2), steps=len(self.ends),
             step_ms=round(1000 * (t1 - self.t0) / max(1, len(self.ends)), 2),
             host_share=round(self.host_s / (t1 - self.t0), 3), **truth)


D = 512 if SMALL else 4096


# 1. Another thread of the process holds the GIL (a metrics aggregator in pure Python): the main loop starves.
def gil_thread(a: argparse.Namespace) -> None:
    hogs = number(a.setting, "t")
    model, batch = mlp(D, 4), 64 if SMALL else 4096  # ~2.5 ms of the card a step: alone, the card is fed
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, D, device=DEV)
    for _ in range(5):  # warm: the first steps set up cuBLAS and the allocator
        gpu_step(model, opt, x)
    sync()
    base = time.perf_counter()
    for _ in range(20):  # the step alone, before the hogs start: the lab's baseline
        gpu_step(model, opt, x)
    sync()
    base_ms = (time.perf_counter() - base) / 20 * 1000
    spent = [0.0] * hogs

    def aggregate_metrics(k: int) -> None:
        while True:
            t0 = time.perf_counter()
            rows = [{"k": i, "v": i * 0.5} for i in range(5000)]
            sorted(rows, key=lambda r: -r["v"])
            spent[k] += time.perf_counter() - t0

    for k in range(hogs):
        threading.Thread(target=aggregate_metrics, args=(k,), name=f"metrics-{k}", daemon=True).start()
    loop = Steps(a)
    while loop.running():
        gpu_step(model, opt, x)
        sync()
        loop.step(batch)
    loop.done(spent="another Python thread holding the GIL; the main thread waits for it", hogs=hogs,
              alone_step_ms=round(base_ms, 2), hog_busy_s=round(sum(spent), 1))


# 2. The pin-memory thread copies every big batch into pinned memory; the workers have their batches ready.
class Frames(torch.utils.data.Dataset):
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.x = torch.rand(shape)

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x  # no decode, no augmentation: a worker's only work is the collate copy


def pin_memory_thread(a: argparse.Namespace) -> None:
    batch = number(a.setting, "b")
    side = 64 if SMALL else 512
    ld = torch.utils.data.DataLoader(Frames((3, side, side)), batch_size=batch, num_workers=4,
                                     pin_memory=DEV == "cuda", persistent_workers=True, prefetch_factor=2)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=8), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    it = iter(ld)
    next(it)
    loop = Steps(a)
    while loop.running():
        t0 = time.perf_counter()
        x = next(it)
        loop.host(t0)
        gpu_step(model, opt, x.to(DEV, non_blocking=True))
        sync()
        loop.step(batch)
    loop.done(spent=f"DataLoader with pin_memory: batches of {batch * 3 * side * side * 4 >> 20} MB copied into pinned memory by one thread", workers=4)


# 3. A synchronous checkpoint every N steps: the whole state dict copied off the card and written to disk.
def sync_checkpoint(a: argparse.Namespace) -> None:
    every = number(a.setting, "every")
    model, batch = mlp(D, 4), 64 if SMALL else 512
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, D, device=DEV)
    path = f"/tmp/family2-ckpt-{os.getpid()}.pt"
    loop = Steps(a)
    n = 0
    while loop.running():
        gpu_step(model, opt, x)
        n += 1
        if n % every == 0:
            t0 = time.perf_counter()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": n}, path)
            loop.host(t0)
        loop.step(batch)
    size = os.path.getsize(path) >> 20 if os.path.exists(path) else None
    if size is not None:
        os.unlink(path)
    loop.done(spent="torch.save of model and optimizer state, synchronously", every=every, checkpoint_mb=size)


# 4. Tokenizing raw text in the main loop (regex split, dict lookups, padding) before each step.
WORDS = [f"w{i}" for i in range(5000)]


def cpu_tokenize(a: argparse.Namespace) -> None:
    n = number(a.setting, "n")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 200)) + ", end." for _ in range(1024)]
    vocab = {w: i for i, w in enumerate(WORDS)}
    split = re.compile(r"\w+|[^\w\s]")
    emb = torch.nn.Embedding(len(WORDS) + 1, 256).to(DEV)
    model = mlp(256, 4)
    opt = torch.optim.SGD(list(emb.parameters()) + list(model.parameters()), lr=1e-3)
    loop = Steps(a)
    k = 0
    while loop.running():
        t0 = time.perf_counter()
        ids = [[vocab.get(tok, len(WORDS)) for tok in split.findall(texts[(k + j) % len(texts)].lower())][:192]
               for j in range(n)]
        batch = torch.tensor([row + [0] * (192 - len(row)) for row in ids])
        loop.host(t0)
        k += n
        loss = model(emb(batch.to(DEV))).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        loop.step(n)
    loop.done(spent="tokenizing text in the main loop (regex, dict lookups, padding)", texts_per_step=n)


# 5. A host sync after every tiny kernel: the card runs microseconds, then waits for the host's next launch.
def sync_tiny_kernels(a: argparse.Namespace) -> None:
    k = number(a.setting, "k")
    x = torch.randn(1024, device=DEV)
    loop = Steps(a)
    while loop.running():
        t0 = time.perf_counter()
        for _ in range(k):
            x = x * 1.0001 + 0.0001
            sync()
        loop.host(t0)
        loop.step(1)
    loop.done(spent="torch.cuda.synchronize() after each of many tiny kernels", kernels_per_step=k)


# 6. A Python-side metrics hook each step: many scalars read back, formatted and written through logging.
def logging_hook(a: argparse.Namespace) -> None:
    n = number(a.setting, "n")
    log = logging.getLogger("train.metrics")
    log.setLevel(logging.INFO)
    log.addHandler(logging.FileHandler(f"/tmp/family2-metrics-{os.getpid()}.log"))
    log.addHandler(logging.StreamHandler(open(os.devnull, "w")))  # noqa: SIM115 - the job's console
    for h in log.handlers:
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(funcName)s:%(lineno)d %(message)s"))
    model, batch = mlp(D, 4), 64 if SMALL else 512
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, D, device=DEV)
    stats = torch.zeros(n, device=DEV)
    loop = Steps(a)
    step = 0
    while loop.running():
        gpu_step(model, opt, x)
        t0 = time.perf_counter()
        values = stats.add_(0.001).tolist()
        for i, v in enumerate(values):
            log.info("step=%d metric/%03d=%.6f %s", step, i, v, json.dumps({"step": step, "i": i, "v": v}))
        loop.host(t0)
        step += 1
        loop.step(batch)
    loop.done(spent="formatting and writing metrics through logging each step", lines_per_step=n)


# 7. Gradient accumulation with the augmentation of each micro-batch done in numpy, in the main thread.
def cpu_augment_accum(a: argparse.Namespace) -> None:
    micro = number(a.setting, "a")
    side, batch = (32, 8) if SMALL else (224, 32)
    rng = np.random.default_rng(0)
    raw = rng.random((batch, 3, side + 32, side + 32), dtype=np.float32)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(32, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loop = Steps(a)
    while loop.running():
        opt.zero_grad(set_to_none=True)
        for _ in range(micro):
            t0 = time.perf_counter()
            dy, dx = rng.integers(0, 32, 2)
            crop = raw[:, :, dy:dy + side, dx:dx + side]
            if rng.random() < 0.5:
                crop = crop[:, :, :, ::-1]
            img = np.ascontiguousarray(crop) + rng.standard_normal(crop.shape, dtype=np.float32) * 0.05
            img = (img - img.mean(axis=(2, 3), keepdims=True)) / (img.std(axis=(2, 3), keepdims=True) + 1e-6)
            x = torch.from_numpy(img)
            loop.host(t0)
            model(x.to(DEV)).float().pow(2).mean().backward()
        opt.step()
        sync()
        loop.step(batch * micro)
    loop.done(spent="numpy augmentation (crop, flip, noise, normalise) of each micro-batch in the main thread",
              micro_batches=micro)


# 8. An embedding table kept on the CPU: random rows gathered there every step, then copied to the card.
def cpu_embedding_lookup(a: argparse.Namespace) -> None:
    rows = number(a.setting, "r")
    table = torch.randn(10_000 if SMALL else 2_000_000, 256)
    model = mlp(256, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loop = Steps(a)
    while loop.running():
        t0 = time.perf_counter()
        with torch.no_grad():
            idx = torch.randint(0, table.shape[0], (rows,))
            emb = table.index_select(0, idx)
        loop.host(t0)
        loss = model(emb.to(DEV)).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        loop.step(rows)
    loop.done(spent="gathering embedding rows from a table on the CPU", rows_per_step=rows,
              threads=torch.get_num_threads())


# 9. num_workers=0 with a pure-Python collate_fn: the loop makes each batch itself, in Python.
class Sequences(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> list[int]:
        return [(i * 7 + j) % 5000 for j in range(64 + i % 192)]


def pad_collate(items: list[list[int]]) -> torch.Tensor:
    width = max(len(s) for s in items)
    return torch.tensor([[float(v) / 5000 for v in s] + [0.0] * (width - len(s)) for s in items])[:, :256]


def slow_collate(a: argparse.Namespace) -> None:
    batch = number(a.setting, "b")
    ld = torch.utils.data.DataLoader(Sequences(), batch_size=batch, num_workers=0, collate_fn=pad_collate)
    model = mlp(256, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loop = Steps(a)
    it = iter(ld)
    while loop.running():
        t0 = time.perf_counter()
        x = next(it)
        loop.host(t0)
        x = torch.nn.functional.pad(x, (0, 256 - x.shape[1])).to(DEV)
        gpu_step(model, opt, x)
        sync()
        loop.step(batch)
    loop.done(spent="a pure-Python collate_fn in the training process (num_workers=0)", batch=batch)


# 10. A gradient hook on each parameter doing Python statistics with .item(): it runs on autograd's thread.
def autograd_hook(a: argparse.Namespace) -> None:
    n = number(a.setting, "p")
    model, batch = mlp(D, n // 2), 64 if SMALL else 256
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, D, device=DEV)
    history: dict[int, list[float]] = {}
    hook_s = [0.0]

    def grad_stats(k: int):  # noqa: ANN202
        def hook(g: torch.Tensor) -> None:
            t0 = time.perf_counter()
            h = history.setdefault(k, [])
            h.append(g.norm().item())
            del h[:-500]
            sorted(h)
            sum(v * v for v in h) / len(h)
            hook_s[0] += time.perf_counter() - t0
        return hook

    for k, p in enumerate(model.parameters()):
        p.register_hook(grad_stats(k))
    loop = Steps(a)
    while loop.running():
        gpu_step(model, opt, x)
        sync()
        loop.step(batch)
    loop.host_s = hook_s[0]
    loop.done(spent="a Python gradient hook per parameter (.item(), statistics) during backward", params=n)


MECHANISMS = {f.__name__: f for f in (gil_thread, pin_memory_thread, sync_checkpoint, cpu_tokenize, sync_tiny_kernels,
                                       logging_hook, cpu_augment_accum, cpu_embedding_lookup, slow_collate,
                                       autograd_hook)}


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
    MECHANISMS[a.name](a)
    sys.stdout.flush()
    os._exit(0)  # daemon threads and persistent workers end with us


if __name__ == "__main__":
    main()
