"""The one tool for runs on the lent H200 machine: bundle what the run needs here, run a named plan there, unpack
what came back here.

    python3 lab/h200.py bundle [--into DIR] [--wheel WHEEL ...]     here
    python3 lab/h200.py run PLAN [--secs S]                          there, from the bundle's root, $OUT set
    python3 lab/h200.py unpack RESULT.tgz [--into DIR]               here
    python3 lab/h200.py pairs-data DIR [--date YYYY-MM-DD]           here: a pairs plan's results into tests/data

The device tool sends the session's checkout (not a helper's worktree) and no network reaches the machine, so
``bundle`` copies this tree's ``app/``, ``lab/`` and ``benchmarks/`` and the wheels the machine lacks (py-spy,
for the recorder's stack sampler) into DIR (default: ``.devrun/`` of the checkout the session started in,
ignored there through ``.git/info/exclude``). The device command is then, with ``.devrun`` carried:

    cd .devrun && python3 lab/h200.py run PLAN

``run`` installs the wheels into /tmp/site, writes what machine this is (``machine.txt``), runs the plan with
every job and recorder bounded by a timeout and ended by its pid, and packs its folder into
``$OUT/<plan>.tgz`` every 30 s, so that a call cut short still returns what it finished. NVLink multicast
stays off (KINDS.md). Plans:

- ``pairs-a``, ``pairs-b``: lab/pairs.py's before/after pairs (issue 37's headroom check), each run recorded
  by our own ``gpu-triage record`` at 1 s with its stack sampler on, the job's pulse read beside it. ``pairs-a``
  holds host_python, loader0, h2d_pageable and service_wait; ``pairs-b`` recompile and host_python again
  (the rerun that measures the run-to-run noise).
- ``stacks-cost``: the stack sampler's cost over ``--no-stacks`` (benchmarks/bench_stacks_cost.py over
  lab/inside_family2.py): four jobs of 75 s, the first 15 s unsampled, three recorders beside them.
- ``family``: issue 34's held-out family (ten runs of 32 s through the same benchmark), the h200-inside-f data.

Earlier sessions' one-off scripts are in the git history; docs/h200.md says what each session measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SESSION_CHECKOUT = Path("/work/main")  # the checkout the device tool sends (its README, "Notes")
PAIRS = {"pairs-a": [("host_python", ""), ("loader0", ""), ("h2d_pageable", ""), ("service_wait", "")],
         "pairs-b": [("recompile", ""), ("host_python", "-rerun")]}
# what each pair's BEFORE run is bottlenecked on, from its mechanism (the labels' expectation)
PAIR_BOTTLENECK = {"host_python": "host_step launch_overhead", "loader0": "data_pipeline", "h2d_pageable": "data_pipeline",
                   "service_wait": "external_wait", "recompile": "compile"}
COST_RUNS = {"stacks-cost": ("pin_memory_thread:b32 cpu_tokenize:n256 gil_thread:t3 autograd_hook:p16", 75, 15),
             "family": ("gil_thread:t3 pin_memory_thread:b32 sync_checkpoint:every5 cpu_tokenize:n256 "
                        "sync_tiny_kernels:k200 logging_hook:n600 cpu_augment_accum:a4 cpu_embedding_lookup:r65536 "
                        "slow_collate:b256 autograd_hook:p16", 32, 10)}
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def bundle(into: Path, wheels: list[Path], src: Path) -> None:
    """Copy what a run needs into ``into`` (replacing what was there) and keep it out of that repo's git.
    ``src``: the tree whose code runs (another branch's worktree, to measure its commit); this tool comes along."""
    if into.exists():
        shutil.rmtree(into)
    for part in ("app", "lab", "benchmarks"):
        shutil.copytree(src / part, into / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(Path(__file__), into / "lab" / "h200.py")
    (into / "whl").mkdir()
    for w in wheels:
        shutil.copy2(w, into / "whl" / w.name)
    exclude = into.parent / ".git" / "info" / "exclude"
    line = f"/{into.name}/"
    if exclude.parent.is_dir() and line not in exclude.read_text().split():
        with exclude.open("a") as f:
            f.write(line + "\n")
    size = sum(p.stat().st_size for p in into.rglob("*") if p.is_file())
    print(f"bundle: {into} ({size / 1e6:.1f} MB, {len(wheels)} wheel(s)); carry {into.name!r}, then run "
          f"`cd {into.name} && python3 lab/h200.py run PLAN`")


def _sh(cmd: str) -> str:
    got = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60)
    return got.stdout + got.stderr


def _setup(res: Path) -> dict[str, str]:
    """Install the carried wheels, return the environment of every child, write machine.txt."""
    wheels = sorted(str(p) for p in Path("whl").glob("*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", "/tmp/site", *wheels], check=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", **NO_MULTICAST)
    env["PYTHONPATH"] = os.pathsep.join(["/tmp/site", str(Path("app").resolve()), str(Path("lab").resolve())])
    env["PATH"] = "/tmp/site/bin" + os.pathsep + env.get("PATH", "")
    info = _sh("date -u; nvidia-smi; uname -r; nproc; free -g; id; py-spy --version; "
               "echo ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>&1)".replace(
                   "py-spy", "/tmp/site/bin/py-spy"))
    info += _sh(f"{sys.executable} -c \"import sys, torch; print(sys.version); "
                "print('torch', torch.__version__, 'cuda', torch.version.cuda)\"")
    (res / "machine.txt").write_text(info)
    print(info, flush=True)
    return env


def _packer(res: Path, out: Path, name: str, stop: threading.Event) -> None:
    """Pack ``res`` into $OUT/<name>.tgz every 30 s and once at the end (a cut call returns what finished)."""
    while True:
        done = stop.wait(30)
        part = out / f"{name}.part"
        with tarfile.open(part, "w:gz") as tf:
            tf.add(res, arcname=".")
        part.replace(out / f"{name}.tgz")
        if done:
            return


def _end(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT, wait_s: float = 60) -> None:
    """End ``proc`` (one we started) by its pid: ``sig``, then SIGKILL after ``wait_s``."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _pair_run(res: Path, env: dict[str, str], mech: str, phase: str, tag: str, secs: float) -> None:
    stem = f"h200-pairs-{mech}-{phase}{tag}"
    pulse = Path(f"/tmp/pulse-{stem}")
    shutil.rmtree(pulse, ignore_errors=True)
    pulse.mkdir()
    renv = dict(env, GPU_TRIAGE_PULSE_DIR=str(pulse))
    rec = subprocess.Popen([sys.executable, "-m", "gpu_triage", "record", "-o", str(res / f"{stem}-1s.parquet"),
                            "--interval", "1", "--log-file", str(res / f"{stem}.debug")], env=renv,
                           stdout=open(res / f"{stem}.rec.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    time.sleep(3)  # the recorder's first ticks come before the job's
    print(f"== {stem} {datetime.now(UTC):%H:%M:%S}", flush=True)
    with open(res / f"{stem}.log", "wb") as log:
        job = subprocess.Popen([sys.executable, "lab/pairs.py", mech, phase, str(res / "marks.json"), "--secs",
                                str(secs), "--progress", str(res / f"{stem}-progress.json")], env=renv,
                               stdout=log, stderr=subprocess.STDOUT)
        try:
            job.wait(timeout=secs + 150)
        except subprocess.TimeoutExpired:
            print(f"{stem}: over its time, ended", flush=True)
            _end(job, signal.SIGTERM, 10)
    time.sleep(2)
    _end(rec)
    print(f"{stem}: job rc {job.returncode}, recorder rc {rec.returncode}; "
          f"{(res / f'{stem}.log').read_text()[-400:]}", flush=True)


def run(plan: str, secs: float | None, budget_s: float, only: str | None) -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    res = Path(f"/tmp/{plan}")
    if res.exists():  # a second call on a warm machine: its recorders refuse the first call's files
        shutil.rmtree(res)
    res.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    env = _setup(res)
    stop = threading.Event()
    packer = threading.Thread(target=_packer, args=(res, out, plan, stop), daemon=True)
    packer.start()
    try:
        if plan in PAIRS:
            s = secs or 42.0
            for mech, tag in PAIRS[plan]:
                for phase in ("before", "after"):
                    if time.time() - t_start > budget_s - (s + 25):
                        print(f"== {mech}-{phase}{tag}: left out, too little time left", flush=True)
                        continue
                    _pair_run(res, env, mech, phase, tag, s)
        elif plan in COST_RUNS:
            runs, run_s, off_s = COST_RUNS[plan]
            runs = only or runs
            prefix = "h200-inside-" + ("g" if plan == "stacks-cost" else "f")
            bench = subprocess.Popen([sys.executable, "benchmarks/bench_stacks_cost.py", str(res), "--runs", runs,
                                      "--secs", str(secs or run_s), "--off-s", str(off_s), "--prefix", prefix, "--",
                                      sys.executable, "lab/inside_family2.py"], env=env)
            try:
                bench.wait(timeout=budget_s - (time.time() - t_start))
            except subprocess.TimeoutExpired:  # SIGINT: it stops its recorders; cost.json holds the runs done
                print(f"{plan}: out of time, ended after the runs it finished", flush=True)
                _end(bench, signal.SIGINT, 90)
        else:
            print(f"unknown plan {plan!r}: one of {', '.join([*PAIRS, *COST_RUNS])}", file=sys.stderr)
            return 2
    finally:
        stop.set()
        packer.join()
    return 0


def unpack(tgz: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as tf:
        tf.extractall(into, filter="data")
    print(f"unpacked {tgz} into {into}")


def pairs_data(src: Path, date: str) -> None:
    """A pairs plan's results into tests/data (recordings, progress, labels) and lab/runs (marks, machine)."""
    marks = json.loads((src / "marks.json").read_text())
    data = ROOT / "tests" / "data"
    for rec in sorted(src.glob("h200-pairs-*-1s.parquet")):
        stem = rec.name.removesuffix("-1s.parquet")
        mech, phase = stem.removeprefix("h200-pairs-").split("-")[:2]
        mine = [m for m in marks if m["name"] == mech and m["phase"] == phase
                and (src / f"{stem}-progress.json").exists()
                and abs(m["start_s"] - json.loads((src / f"{stem}-progress.json").read_text())["points"][0][0]) < 60]
        if not mine:
            print(f"{rec.name}: no marks, left out")
            continue
        m = mine[0]
        label = [{"scenario": "pairs_" + stem.removeprefix("h200-pairs-").replace("-", "_"), "start": m["start"], "end": m["end"],
                  "bottleneck": PAIR_BOTTLENECK[mech].split() if phase == "before" else ["none"],
                  "what_ran": f"lab/pairs.py {mech} {phase}: {m['spent']}; the job's own count "
                              f"{m['samples_per_s']} samples/s over its timed loop",
                  "recorded_by": "gpu-triage record (stacks on, the job's pulse), 1 s ticks"}]
        shutil.copy2(rec, data / rec.name)
        (data / f"{stem}-1s.labels.json").write_text(json.dumps(label, indent=1) + "\n")
        shutil.copy2(src / f"{stem}-progress.json", data / f"{stem}-progress.json")
        print(f"{rec.name}: {rec.stat().st_size // 1024} KB, {m['samples_per_s']} samples/s")
    runs = ROOT / "lab" / "runs"
    (runs / f"pairs-{date}-{src.name}-marks.json").write_text(json.dumps(marks, indent=1) + "\n")
    if (src / "machine.txt").exists():
        shutil.copy2(src / "machine.txt", runs / f"pairs-{date}-machine.txt")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bundle")
    b.add_argument("--into", type=Path, default=SESSION_CHECKOUT / ".devrun")
    b.add_argument("--wheel", type=Path, action="append", default=[])
    b.add_argument("--from", dest="src", type=Path, default=ROOT, help="the tree whose code runs (default: this one)")
    r = sub.add_parser("run")
    r.add_argument("plan")
    r.add_argument("--secs", type=float, default=None, help="each job's timed seconds (the plan's own by default)")
    r.add_argument("--budget-s", type=float, default=560, help="start no job that would end after this")
    r.add_argument("--runs", default=None, help="stacks-cost, family: the runs (NAME:SETTING ...) instead")
    u = sub.add_parser("unpack")
    u.add_argument("tgz", type=Path)
    u.add_argument("--into", type=Path, default=Path("/tmp/h200-results"))
    d = sub.add_parser("pairs-data")
    d.add_argument("src", type=Path)
    d.add_argument("--date", default=datetime.now(UTC).strftime("%Y-%m-%d"))
    a = p.parse_args()
    if a.cmd == "bundle":
        bundle(a.into, a.wheel, a.src)
    elif a.cmd == "run":
        return run(a.plan, a.secs, a.budget_s, a.runs)
    elif a.cmd == "unpack":
        unpack(a.tgz, a.into)
    else:
        pairs_data(a.src, a.date)
    return 0


if __name__ == "__main__":
    sys.exit(main())
