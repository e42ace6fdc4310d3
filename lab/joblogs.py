"""Short real trainings that print progress the way people's jobs do, for issue #12's log parsers.

usage: python3 joblogs.py {tqdm,hf,lightning,imagenet} [--secs S]
Each writes its progress to stdout/stderr exactly as the library does (capture both, raw), and ends with one
line of its own: `TRUE samples/s: X (N samples in T s)` counted by this script around the training loop, so
that what a parser reads from the log can be checked against it. Pin the card with CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

import torch


def true_rate(n: int, t: float) -> None:
    print(f"TRUE samples/s: {n / t:.1f} ({n} samples in {t:.1f} s)", flush=True)


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()


class Synthetic(torch.utils.data.Dataset):
    """Random features with a little CPU work per sample, so that the bar moves at a human-readable pace."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return torch.randn(1024, generator=g), torch.randint(0, 10, (), generator=g)


def run_tqdm(secs: float) -> None:
    from tqdm import tqdm

    model, batch = mlp(), 128
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Synthetic(128 * 2000), batch_size=batch, num_workers=2)
    n, t0 = 0, time.time()
    epoch = 0
    while time.time() - t0 < secs * 0.7:
        bar = tqdm(loader, desc=f"Epoch {epoch}")
        for x, y in bar:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            n += x.shape[0]
            bar.set_postfix(loss=f"{loss.item():.4f}")
            if time.time() - t0 >= secs * 0.7:
                break
        bar.close()
        epoch += 1
    torch.cuda.synchronize()
    true_rate(n, time.time() - t0)
    # A slow phase: steps longer than a second, where tqdm switches to s/it.
    w = torch.randn(8192, 8192, device="cuda")
    n2, t2 = 0, time.time()
    for _ in tqdm(range(8), desc="slow steps", unit="it"):
        t = time.time()
        while time.time() - t < 1.3:
            w = torch.tanh(w @ w)
            torch.cuda.synchronize()
        n2 += 1
    print(f"TRUE slow phase: {(time.time() - t2) / n2:.2f} s/it ({n2} steps)", flush=True)


def run_hf(secs: float) -> None:
    import transformers
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 100_000

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.randint(0, 1000, (128,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids.clone()}

    class Count(TrainerCallback):
        def __init__(self, batch: int) -> None:
            self.batch, self.n, self.t0 = batch, 0, 0.0

        def on_train_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            self.t0 = time.time()

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            self.n += self.batch
            if time.time() - self.t0 > secs * 2.4:  # a guard only: max_steps ends the run
                control.should_training_stop = True

        def on_train_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            true_rate(self.n, time.time() - self.t0)

    print(f"transformers {transformers.__version__}", flush=True)
    batch = 32
    model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_positions=128, n_embd=256, n_layer=4, n_head=4))
    args = TrainingArguments(output_dir="/tmp/hf-out", max_steps=int(os.environ.get("HF_STEPS", "1000")),
                             per_device_train_batch_size=batch, logging_steps=50, learning_rate=3e-4,
                             save_strategy="no", report_to="none", disable_tqdm=False, dataloader_num_workers=2)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Count(batch)])
    out = trainer.train()
    print(out, flush=True)


def run_lightning(secs: float) -> None:
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))

        def training_step(self, b, i):  # type: ignore[no-untyped-def]
            x, y = b
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Count(L.Callback):
        def __init__(self, batch: int) -> None:
            self.batch, self.n, self.t0 = batch, 0, 0.0

        def on_train_start(self, trainer, pl_module):  # type: ignore[no-untyped-def]
            self.t0 = time.time()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # type: ignore[no-untyped-def]
            self.n += batch[0].shape[0]

        def on_train_end(self, trainer, pl_module):  # type: ignore[no-untyped-def]
            true_rate(self.n, time.time() - self.t0)

    print(f"lightning {L.__version__}", flush=True)
    batch = 128
    loader = torch.utils.data.DataLoader(Synthetic(128 * 300), batch_size=batch, num_workers=2)
    callbacks: list = [Count(batch)]
    logger: bool = False
    root = None
    if os.environ.get("LIGHTNING_BAR") == "tqdm":  # the bar where rich is not installed, or chosen explicitly
        import tempfile

        from lightning.pytorch.callbacks import TQDMProgressBar

        callbacks.append(TQDMProgressBar())
        # Lightning's default logger, as a user has it: it puts the run's version in the bar ("v_num=0")
        logger, root = True, tempfile.mkdtemp(prefix="joblogs-lightning-")
    trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=1000, max_time={"seconds": secs},
                        enable_checkpointing=False, logger=logger, default_root_dir=root, log_every_n_steps=10,
                        callbacks=callbacks)
    trainer.fit(Module(), loader)


# The PyTorch ImageNet example's progress lines (pytorch/examples, imagenet/main.py), reproduced: that script is
# not installed on the machine, so its AverageMeter/ProgressMeter output format is written out here.
class AverageMeter:
    def __init__(self, name: str, fmt: str = ":f") -> None:
        self.name, self.fmt = name, fmt
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val: float, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self) -> str:
        return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(**self.__dict__)


class ProgressMeter:
    def __init__(self, num_batches: int, meters: list[AverageMeter], prefix: str = "") -> None:
        digits = len(str(num_batches))
        self.batch_fmt = "[{:" + str(digits) + "d}/" + ("{:" + str(digits) + "d}").format(num_batches) + "]"
        self.meters, self.prefix = meters, prefix

    def display(self, batch: int) -> None:
        print("\t".join([self.prefix + self.batch_fmt.format(batch)] + [str(m) for m in self.meters]), flush=True)


def accuracy(output: torch.Tensor, target: torch.Tensor, topk: tuple[int, ...]) -> list[float]:
    maxk = max(topk)
    _, pred = output.topk(maxk, 1, True, True)
    correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
    return [float(correct[:k].reshape(-1).float().sum() * 100.0 / target.size(0)) for k in topk]


def run_imagenet(secs: float) -> None:
    import torchvision
    from torchvision import transforms

    # The example's --dummy data: FakeData of ImageNet's size, so len(loader) is 5005 at batch 256.
    data = torchvision.datasets.FakeData(1281167, (3, 224, 224), 1000, transforms.ToTensor())
    batch = 256
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True, num_workers=8, pin_memory=True)
    model = torchvision.models.resnet18().cuda()
    crit = torch.nn.CrossEntropyLoss().cuda()
    opt = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    batch_time, data_time = AverageMeter("Time", ":6.3f"), AverageMeter("Data", ":6.3f")
    losses, top1, top5 = AverageMeter("Loss", ":.4e"), AverageMeter("Acc@1", ":6.2f"), AverageMeter("Acc@5", ":6.2f")
    epoch = 0
    progress = ProgressMeter(len(loader), [batch_time, data_time, losses, top1, top5], prefix=f"Epoch: [{epoch}]")
    model.train()
    n, t0 = 0, time.time()
    end = time.time()
    for i, (images, target) in enumerate(loader):
        data_time.update(time.time() - end)
        images, target = images.cuda(non_blocking=True), target.cuda(non_blocking=True)
        output = model(images)
        loss = crit(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1, images.size(0))
        top5.update(acc5, images.size(0))
        opt.zero_grad()
        loss.backward()
        opt.step()
        batch_time.update(time.time() - end)
        end = time.time()
        n += images.size(0)
        if i % 10 == 0:
            progress.display(i + 1)
        if time.time() - t0 >= secs:
            break
    true_rate(n, time.time() - t0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("which", choices=["tqdm", "hf", "lightning", "imagenet"])
    p.add_argument("--secs", type=float, default=25)
    a = p.parse_args()
    print(f"joblogs {a.which}: python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    {"tqdm": run_tqdm, "hf": run_hf, "lightning": run_lightning, "imagenet": run_imagenet}[a.which](a.secs)


if __name__ == "__main__":
    main()
