"""Write tests/data/h200-inside-<part>-<interval>.labels.json from the marks lab/inside_mechanisms.py wrote on the
machine, and copy each run's stack samples to tests/data/inside-stacks/<name>-<setting>.jsonl.gz.

usage: python3 lab/inside_labels.py RESULTS_DIR tests/data

Recordings of trace v3 (a one-off script (in git history): our own recorder took the stacks, they are in the file's
`stacks` column) have no separate stack files: their labels say so (`"stacks": "recorded"`).

The expected reading of each window comes from the mechanism that ran, not from what gpu-triage says. Each label
says what is right with the job's stacks (`bottleneck`, `phase` of the main thread), what an honest reading
without them may be (`without_stacks`), and the specific readings a mechanism-aware engineer would call wrong
(`wrong`, with the advice they would give). `phase` is what the training process's stacks should show most
(gpu_triage.sources.phases): what Python frames and /proc can see, so a copy made in C reads `python`
(pageable: the main thread copies) or `gpu_sync` (pinned: it waits for the card). The bottleneck names beyond today's vocabulary (host_step,
external_wait, compile, unexplained) are the ones the inside-evidence work proposes.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

MACHINE_V3 = ("gpu-triage record (this project, trace v3) on 1 NVIDIA H200: at 2 s with its py-spy sampler on "
              "(the stacks column), at 0.5 s with --no-stacks; the machine in the run's machine.txt")
MACHINE = ("gpu-triage record (this project) at 2 s and 0.5 s ticks on 1 NVIDIA H200, driver 580.159.04, "
           "torch 2.11.0+cu130, Python 3.12.3, 16 cores, Firecracker kernel 6.18.44; stacks: py-spy 0.4.3 dump "
           "--nonblocking --json every 2 s (lab/stack_sampler.py)")

#: name -> what ran, right reading, honest readings without stacks, wrong specific readings, main-thread phase
# a reading without stacks that names the pause, not its cause: accepted for a wait on another service
WAIT_WHY = ("stall_unexplained: from outside a steady-low card with every host figure quiet is the job pausing "
            "itself between its steps, which a wait on another service is; its evidence says the wait is in the "
            "job and its advice (look for sleeps and synchronous calls, profile one period) leads to the call. It "
            "names no wrong mechanism: no num_workers, no topology")

# a reading without stacks that names neither a loader nor a host step: accepted for the process's own Python
ONE_CORE_WHY = ("host_or_input: from outside a training process holding one core with no DataLoader workers while "
                "its card idles is what num_workers=0 looks like too (real h200x2-loader0: one core, no workers, no "
                "PCIe to speak of); the reading names neither a loader nor a host step, and its advice says how to "
                "tell them apart")

TRUTH: dict[str, dict[str, object]] = {
    "cpu_offload_adamw": dict(
        what_ran="MLP 8x4096 on the card, AdamW (foreach) over float32 master weights in pinned host memory: "
                 "gradients down, optimizer step on the CPU, parameters up every step; no DataLoader",
        bottleneck=["host_step"], phase="optimizer", without_stacks=["host_step", "unexplained"],
        wrong={"data_pipeline": "pin_memory / num_workers advice: there is no input pipeline",
               "communication": "one card, nobody to talk to"}),
    "latency_input": dict(
        what_ran="DataLoader workers whose __getitem__ sleeps per sample (an object-store GET), CPU idle",
        bottleneck=["data_pipeline"], phase="dataloader_wait", without_stacks=["data_pipeline", "unexplained"],
        wrong={"none": "the job is starved by its input: something to fix",
               "idle": "a job runs and waits on its loader"}),
    "python_host_loop": dict(
        what_ran="pure-Python bookkeeping in the training process's main thread between GPU steps, no DataLoader",
        bottleneck=["host_step"], phase="python", without_stacks=["host_step", "unexplained", "host_or_input"],
        without_stacks_why=ONE_CORE_WHY, wrong={"data_pipeline": "num_workers advice: there is no DataLoader"}),
    "item_sync": dict(
        what_ran="64 matmuls of 2048x2048 a step with a .item() after each (or every 8th): the card stays busy "
                 "(89-97 % GPU-Util, 84-92 % SM) since each op is long next to a sync",
        bottleneck=["none", "host_step"], phase="python", without_stacks=["none", "host_step", "unexplained"],
        wrong={"data_pipeline": "no input pipeline", "communication": "one card"}),
    "h2d_copy_1card": dict(
        what_ran="batches of 256x3x224x224 fp32 copied host-to-device 4 times a step into a tiny conv net, "
                 "from pinned (non_blocking) or pageable memory; one card",
        bottleneck=["data_pipeline"], phase={"pinned": "gpu_sync", "pageable": "python"}, without_stacks=["data_pipeline", "unexplained"],
        wrong={"communication": "one card: PCIe from the host during a step is a copy, not NCCL"}),
    "compile_recompile": dict(
        what_ran="torch.compile(dynamic=False) of an MLP whose batch size changes every step (or every 8th): "
                 "dynamo and inductor recompile; the card waits",
        bottleneck=["compile"], phase="compile", without_stacks=["unexplained", "start_up"],
        wrong={"none": "the job is stalled by its compiler", "data_pipeline": "no input pipeline"}),
    "service_wait": dict(
        what_ran="each step first waits on another local process over a socket (100 or 400 ms: a reward model, a "
                 "rollout server, a feature store), then one GPU step",
        bottleneck=["external_wait"], phase="wait_service", without_stacks=["unexplained", "stall_unexplained"],
        without_stacks_why=WAIT_WHY,
        wrong={"none": "the card idles because the job waits: something to fix", "data_pipeline": "no DataLoader"}),
    "slow_start": dict(
        what_ran="weights on the card, no step for the whole window: json-parsing a dataset index (parse), or "
                 "polling for a file in sleep (poll)",
        bottleneck=["start_up", "unexplained"], phase={"parse": "python", "poll": "sleep"}, without_stacks=["start_up", "unexplained"],
        wrong={"data_pipeline": "no DataLoader yet"}),
    "cpu_model_part": dict(
        what_ran="an EmbeddingBag of 2M x 256 kept on the CPU (forward and backward in CPU autograd, 16 or 4 "
                 "intra-op threads), a small MLP on the card",
        bottleneck=["host_step"], phase="backward", without_stacks=["host_step", "unexplained"],
        wrong={"start_up": "steps run all along", "none": "the card idles behind the CPU part of the model"}),
}


def main() -> None:
    res, dest = Path(sys.argv[1]), Path(sys.argv[2])
    marks = []
    for log in sorted(res.glob("*.log")):
        marks += [json.loads(line[5:]) for line in log.read_text().splitlines() if line.startswith("MARK ")]
    marks.sort(key=lambda m: m["start_s"])
    stacks = dest / "inside-stacks"
    stacks.mkdir(exist_ok=True)
    for rec in sorted(res.glob("h200-inside-*.parquet")):
        part = rec.name.split("-")[2]
        labels = []
        for m in marks:
            run = f"{m['name']}-{m['setting']}"
            v3 = not (res / f"{run}.stacks.jsonl").exists()
            if not (res / f"inside-{part}.runs").read_text().split().count(run):
                continue
            truth = TRUTH[m["name"]]
            labels.append({"scenario": f"{m['name']}_{m['setting']}", "start": m["start"], "end": m["end"],
                           **{k: truth[k] for k in ("what_ran", "bottleneck", "without_stacks", "without_stacks_why",
                                                    "wrong") if k in truth},
                           "phase": truth["phase"][m["setting"]] if isinstance(truth["phase"], dict) else truth["phase"],
                           "true_samples_per_s": m["samples_per_s"],
                           "settings": {k: v for k, v in m.items() if k not in {"name", "setting", "start", "end",
                                                                              "start_s", "end_s", "samples_per_s", "spent"}},
                           "stacks": "recorded" if v3 else f"inside-stacks/{run}.jsonl.gz",
                           "recorded_by": MACHINE_V3 if v3 else MACHINE})
        out = dest / rec.name
        shutil.copyfile(rec, out)
        out.with_name(out.name.replace(".parquet", ".labels.json")).write_text(json.dumps(labels, indent=1) + "\n")
        print(out, len(labels), "windows")
    for f in sorted(res.glob("*.stacks.jsonl")):
        with open(f, "rb") as src, gzip.open(stacks / (f.name.replace(".stacks", "") + ".gz"), "wb", 9) as gz:
            shutil.copyfileobj(src, gz)


if __name__ == "__main__":
    main()
