"""Write tests/data/h200x2-<mechanism>-<interval>.labels.json from the marks the workloads wrote on the machine.

usage: python3 lab/x2_labels.py lab/runs/x2-2026-11-30-marks.json tests/data

The expected verdict of each window comes from the mechanism that ran (issue #11), not from what gpu-triage says:
  host-to-device copy bound, DataLoader(num_workers=0) in the training process  -> data_pipeline
  DDP with rank 0 writing a checkpoint with fsync, the other rank at its all-reduce -> storage_io
  one rank stops calling collectives, the other spins in all_reduce              -> communication (hung collective)
A window with both cards is the overlap of the two processes' own windows (each wrote its start and end).
A periodic checkpoint window says from when its mechanism can be seen (`visible_from`: the first save).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

MACHINE = ("gpu-triage record (this project, main at 4463928) on 2 NVIDIA H200 with NV18 between them, "
           "driver 580.159.04, torch 2.11.0+cu130, NCCL 2.28.9, 32 cores")

# num_workers=0 read from outside: the honest reading beside the mechanism (the Python loops of h200-inside look alike)
LOADER0_WHY = ("host_or_input: without the job's stacks or its own data-wait clock, nothing recorded from outside "
               "tells a DataLoader with num_workers=0 from the process's own Python on the same one core (the "
               "held-out Python loops of h200-inside-{a,c,e} look the same): honest, not the mechanism")


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def _overlap(marks: list[dict]) -> tuple[str, str]:
    return _iso(max(_t(m["start"]) for m in marks)), _iso(min(_t(m["end"]) for m in marks))


def windows(marks: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    h2d = [m for m in marks if m["mode"] == "h2d"]
    for batch in sorted({m["batch"] for m in h2d}):
        ms = [m for m in h2d if m["batch"] == batch]
        start, end = _overlap(ms)
        out.setdefault("h2d", []).append({
            "scenario": f"h2d_copy_bound_batch{batch}", "start": start, "end": end,
            "pattern": ["steady_low"], "bottleneck": ["data_pipeline"],
            "what_ran": (f"one process per card, each copying batches of {batch}x3x224x224 fp32 ({ms[0]['batch_mb']} MB) "
                         "from pageable host memory (no pin_memory, blocking .to(device)) into a tiny conv net; the "
                         "copy, done by one CPU thread per process, is the step"),
            "true_samples_per_s": {m["card"]: m["samples_per_s"] for m in ms},
            "true_host_to_device_gb_per_s": {m["card"]: m["gb_per_s"] for m in ms},
            "advice": "pin_memory=True, .to(device, non_blocking=True), smaller dtypes (uint8), decode/augment on the GPU",
        })
    for rec, note, pattern in (
            ("loader0", ("a 4-layer 4096-wide MLP: a step is well under 1 ms of the card's time, so GPU-Util stays "
                         "at 0-1 % (the card looks idle while the job runs flat out)"), ["steady_low", "idle"]),
            ("loader0rn50", ("ResNet-50 (fp32), torch's default intra-op threads: collating 600 KB images ran on "
                             "one thread per core, so each process showed ~1400 % CPU; GPU-Util 3-6 %"),
             ["steady_low", "idle"]),
            ("loader0rn50omp1", ("ResNet-50 (fp32), OMP_NUM_THREADS=1 as torchrun sets it: the process holds ~100 % "
                                 "of one core and the card shows GPU-Util ~19 %, SM ~15 %"), ["steady_low"])):
        lm = [m for m in marks if m["mode"] == "loader0" and m.get("recording", "loader0") == rec]
        for batch in sorted({m["batch"] for m in lm}):
            ms = [m for m in lm if m["batch"] == batch]
            start, end = _overlap(ms)
            out.setdefault(rec, []).append({
                "scenario": f"loader_in_process_batch{batch}", "start": start, "end": end,
                "pattern": pattern, "bottleneck": ["data_pipeline", "host_or_input"], "honest_why": LOADER0_WHY,
                "what_ran": (f"one process per card, DataLoader(num_workers=0) (PyTorch's default): each sample's "
                             f"__getitem__ costs real CPU (numpy, {ms[0]['rounds']} passes) inside the training "
                             f"process, batch {batch}; {note}"),
                "true_samples_per_s": {m["card"]: m["samples_per_s"] for m in ms},
                "true_ms_per_step": {m["card"]: m["ms_per_step"] for m in ms},
                "advice": "num_workers>0 (the data loading leaves the training process), pin_memory=True",
            })
    for m in (m for m in marks if m["mode"] == "ddp_ckpt"):
        gb = m["checkpoints"][0]["gb"]
        out.setdefault("ddp-ckpt", []).append({
            "scenario": f"ddp_periodic_checkpoint_{gb}GB_every{m['every_s']:.0f}s", "start": m["start"], "end": m["end"],
            "pattern": ["sawtooth", "imbalanced"], "bottleneck": ["storage_io"],
            "what_ran": (f"DDP on 2 cards (torchrun, NCCL), {m['layers']} Linear layers of {m['dim']}, AdamW; every "
                         f"{m['every_s']:.0f} s rank 0 writes model+optimizer ({gb} GB) with torch.save and fsync while "
                         "rank 1 waits at the next all-reduce; between checkpoints the job is compute-bound"),
            "true_samples_per_s": m["samples_per_s"], "checkpoints": m["checkpoints"],
            "cards": {"0": "rank 0: writes the checkpoint", "1": "rank 1: waits for rank 0 in the all-reduce"},
            # the job only computes until its first checkpoint (every_s after its start): no tick before the
            # first save can show a storage stall, so the window is judged from there (data.judged_ticks)
            "visible_from": m["checkpoints"][0]["start"],
        })
        for c in m["checkpoints"]:
            start = _t(c["start"])
            end = start + timedelta(seconds=c["save_s"] + c["fsync_s"])
            out["ddp-ckpt"].append({
                "scenario": f"ddp_checkpoint_stall_{c['start'][11:19]}", "start": _iso(start), "end": _iso(end),
                "event": True, "pattern": ["imbalanced", "sawtooth"], "bottleneck": ["storage_io"],
                "what_ran": (f"one checkpoint of {gb} GB by rank 0: torch.save {c['save_s']} s then fsync "
                             f"{c['fsync_s']} s; card 0 idle, card 1 spinning in NCCL (GPU-Util ~100 %, SM ~18 %, "
                             "no NVLink traffic)"),
                "cards": {"0": "rank 0: writes the checkpoint", "1": "rank 1: waits for rank 0 in the all-reduce"},
            })
    ends = {e["tag"]: e["end"] for e in marks if e["mode"] == "stuck_end"}
    for tag, m in zip("ab", (m for m in marks if m["mode"] == "stuck"), strict=False):
        out.setdefault("stuck", []).append({
            "scenario": f"stuck_collective_rank{m['hang_rank']}_hung", "start": m["start"], "end": ends[tag],
            "pattern": ["single_card_busy"], "bottleneck": ["communication"], "cause": "hung_collective",
            "what_ran": (f"2 ranks (torchrun, NCCL) all-reduced {m['numel'] * 2 // 2**20} MiB of bf16 for 6 s; then "
                         f"rank {m['hang_rank']} stopped calling collectives (sleeps, as a hung rank does) while "
                         f"rank {m['spinning_rank']} waits in all_reduce: card {m['spinning_rank']} GPU-Util 100 %, "
                         "SM ~18 %, no NVLink traffic, no progress; both ranks killed by pid after ~40 s"),
            "cards": {str(m["spinning_rank"]): "spinning in a collective its peer never joins",
                      str(m["hang_rank"]): "hung rank: no kernels"},
            "advice": ("a hung collective (no traffic, no progress): NCCL_DEBUG=INFO, a collective timeout "
                       "(init_process_group(timeout=...), TORCH_NCCL_ASYNC_ERROR_HANDLING), py-spy dump of each rank"),
        })
    return out


def main() -> None:
    marks = json.loads(Path(sys.argv[1]).read_text())
    dest = Path(sys.argv[2])
    for name, labels in windows(marks).items():
        for interval in (1, 2):
            for lab in labels:
                lab["recorded_by"] = f"{MACHINE}, {interval} s ticks"
            path = dest / f"h200x2-{name}-{interval}s.labels.json"
            path.write_text(json.dumps(labels, indent=1) + "\n")
            print(path, len(labels), "windows")


if __name__ == "__main__":
    main()
