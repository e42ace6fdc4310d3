"""Write tests/data/h200-inside-<part>-<interval>.labels.json for lab/inside_family2.py's runs, from what the
cost benchmark and the jobs wrote on the machine (a one-off script (in git history)), and copy the recordings beside.

usage: python3 lab/family2_labels.py RESULTS_DIR tests/data lab/runs/inside-<part>-<date>-cost.json

Each label's window is the run's sampled segment (benchmarks/bench_stacks_cost.py's windows.json: from the moment
the sampler's recorder was continued to the job's end), for both recordings. What is right comes from the
mechanism that ran and the job's own readings (its step time alone and with the mechanism, the share of its loop
the host part took: ``host_share``), never from what gpu-triage says. The vocabulary is lab/inside_labels.py's:
beyond today's bottlenecks, host_step, external_wait, compile and checkpoint are the ones the inside-evidence work
proposes. ``phase`` is what the training process's main-thread samples should lead with, read by
gpu_triage.sources.phases.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

MACHINE = ("gpu-triage record (this project, trace v4: every Python thread of each dump, a burst when a card starts "
           "waiting, the 45/55 % band) on 1 NVIDIA H200 (driver 580.159.04, torch 2.11.0+cu130, py-spy 0.4.2, 16 "
           "cores): at 2 s with its py-spy sampler on, at 0.5 s with --no-stacks; benchmarks/bench_stacks_cost.py ran "
           "each job, its first seconds unsampled; the machine in the run's machine.txt")
ONE_CARD = "one card, nobody to talk to"
NO_LOADER = "num_workers / pin_memory advice: there is no DataLoader"
IDLES = "the card idles behind its host: something to fix"

TRUTH: dict[str, dict[str, object]] = {
    "gil_thread": dict(
        what_ran="3 Python threads (a metrics aggregator in pure Python) beside an MLP 4x4096 loop at batch 4096: a "
                 "step alone took 3.0 ms, with them 566-700 ms; the main thread waits for the GIL they hold",
        bottleneck=["host_step"], phase="waiting", without_stacks=["host_step", "unexplained"],
        wrong={"data_pipeline": NO_LOADER, "communication": ONE_CARD, "none": IDLES}),
    "pin_memory_thread": dict(
        what_ran="DataLoader, 4 workers returning a ready 3x512x512 tensor (their only work the collate copy), "
                 "pin_memory=True, batches of 32 (100 MB) copied into pinned memory by its one thread at 98 % of a "
                 "core; a tiny conv net; the loop waits for batches (90 % of its time)",
        bottleneck=["data_pipeline"], phase="dataloader_wait", without_stacks=["data_pipeline", "unexplained"],
        wrong={"communication": ONE_CARD, "none": IDLES, "host_step": "the step's own host work is small: the "
                                                                      "loop waits for its input"}),
    "sync_checkpoint": dict(
        what_ran="torch.save of an MLP 4x4096's weights and AdamW state (768 MB) every 5 steps, synchronously: "
                 "98 % of the loop in the save",
        bottleneck=["checkpoint", "storage_io", "host_step"], phase="checkpoint",
        without_stacks=["storage_io", "unexplained", "host_step"],
        wrong={"data_pipeline": NO_LOADER, "communication": ONE_CARD, "none": IDLES}),
    "cpu_tokenize": dict(
        what_ran="regex and dict tokenization of 256 texts of 200 words in the main loop each step, no DataLoader; "
                 "87 % of the loop",
        bottleneck=["host_step", "data_pipeline"], phase="python",
        without_stacks=["host_step", "data_pipeline", "unexplained"],
        wrong={"communication": ONE_CARD, "none": IDLES}),
    "sync_tiny_kernels": dict(
        what_ran="200 tiny kernels a step (1,024 elements), torch.cuda.synchronize() after each: the host launches "
                 "and waits, the card runs microseconds (GPU-Util 12-18 %)",
        bottleneck=["launch_overhead", "host_step"], phase="python",
        without_stacks=["launch_overhead", "host_step", "unexplained"],
        wrong={"data_pipeline": NO_LOADER, "communication": ONE_CARD, "none": IDLES}),
    "logging_hook": dict(
        what_ran="600 metrics a step read back (.tolist()) and written through logging to a file and a stream, "
                 "each with a JSON dump: 87 % of the loop",
        bottleneck=["host_step"], phase="logging", without_stacks=["host_step", "unexplained"],
        wrong={"data_pipeline": NO_LOADER, "communication": ONE_CARD, "none": IDLES}),
    "cpu_augment_accum": dict(
        what_ran="gradient accumulation over 4 micro-batches of 32x3x224x224, each cropped, flipped, noised and "
                 "normalised in numpy in the main thread (95 % of the loop); a small conv net",
        bottleneck=["host_step", "data_pipeline"], phase="python",
        without_stacks=["host_step", "data_pipeline", "unexplained"],
        wrong={"communication": ONE_CARD, "none": IDLES}),
    "cpu_embedding_lookup": dict(
        what_ran="65,536 random rows gathered each step from a 2M x 256 fp32 table kept on the CPU (39 % of the "
                 "loop), then copied to the card from pageable memory (most of the rest)",
        bottleneck=["host_step", "data_pipeline"], phase="python",
        without_stacks=["host_step", "data_pipeline", "unexplained"],
        wrong={"communication": ONE_CARD, "none": IDLES}),
    "slow_collate": dict(
        what_ran="num_workers=0 with a pure-Python collate_fn padding 256 lists of 64-255 ints into floats (83 % "
                 "of the loop); an MLP 4x256",
        bottleneck=["data_pipeline"], phase="loading", without_stacks=["data_pipeline", "unexplained"],
        wrong={"communication": ONE_CARD, "none": IDLES}),
    "autograd_hook": dict(
        what_ran="a gradient hook on each of 16 parameters reading the gradient's norm (.item()) and sorting its "
                 "history in Python, on autograd's thread during backward; the main thread waits in backward",
        bottleneck=["host_step"], phase="backward", without_stacks=["host_step", "unexplained"],
        wrong={"data_pipeline": NO_LOADER, "communication": ONE_CARD, "none": IDLES}),
}


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def main() -> None:
    res, dest, cost_out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    marks = {f"{m['name']}-{m['setting']}": m for m in json.loads((res / "marks.json").read_text())}
    cost = json.loads((res / "cost.json").read_text())
    runs = {r["run"]: r for r in cost["runs"] if "error" not in r}
    labels = []
    for w in json.loads((res / "windows.json").read_text()):
        m, r = marks[w["run"]], runs[w["run"]]
        truth = TRUTH[m["name"]]
        labels.append({
            "scenario": w["run"].replace("-", "_"), "start": iso(w["start_s"]), "end": iso(w["end_s"]),
            **{k: truth[k] for k in ("what_ran", "bottleneck", "without_stacks", "wrong", "phase")},
            "true_samples_per_s": m["samples_per_s"],
            "settings": {k: v for k, v in m.items() if k not in {"name", "setting", "start", "end", "start_s", "end_s",
                                                                   "samples_per_s", "spent"}},
            "step_ms": {"unsampled": r["unsampled"]["mean_ms"], "sampled": r["sampled"]["mean_ms"]},
            "stacks": "recorded", "recorded_by": MACHINE})
    for rec in sorted(res.glob("h200-inside-*-*s.parquet")):
        shutil.copyfile(rec, dest / rec.name)
        (dest / rec.name.replace(".parquet", ".labels.json")).write_text(json.dumps(labels, indent=1) + "\n")
        print(dest / rec.name, len(labels), "windows")
    machine = (res / "machine.txt").read_text().splitlines()
    cost_out.write_text(json.dumps({"machine": [ln for ln in machine if ln.strip()][-8:], **cost}, indent=1) + "\n")


if __name__ == "__main__":
    main()
