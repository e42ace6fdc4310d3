"""What the stack sampler costs the recorder in its own Python, beside py-spy's CPU: the real `gpu-triage record`
over a storm of waiting jobs, with stacks and with ``--no-stacks``, on any machine (no GPU needed).

usage: python benchmarks/bench_sampler_overhead.py [--secs 120] [--every 6] [--lasts 24] [--threads 4]
           [--interval 2] [--mode both|stacks|control] [--profile] [--pyspy PATH]

The storm: a launcher process (not the recorder's child, so its jobs' CPU never reaches the recorder's
RUSAGE_CHILDREN) starts a new job every ``--every`` s, each a real multi-threaded Python process (a pure-Python
main loop some 30 frames deep, numpy and pure-Python threads, a sleeper, a thread on a queue, a 16-thread
OpenBLAS pool) that ends after ``--lasts`` s. Each job sits on a card of its own of a fake NVML (tests/fake_nvml.py)
whose GPU-Util reads 20 %: every job waits from its first tick, and each earns a burst (the H200's worst case,
"a new waiting job every 22 s", at a faster pace). The recorder is the real command, in this process, run through
``gpu_triage.cli.main``: its ticks, its diagnosis of each tick, its stack sampler and its recording; py-spy is the
real one (``--pyspy``, default: the one beside this interpreter) wherever it may attach (root, or
``kernel.yama.ptrace_scope`` 0 for the same user).

Each mode runs in a fresh process. It prints, per mode: the recorder's own CPU (``resource.getrusage``
RUSAGE_SELF, all its threads, less the storm-driving thread's own), py-spy's CPU (RUSAGE_CHILDREN: py-spy is the
one child the recorder waits for), the py-spy runs, the stack samples recorded, and each as a share of a core;
then, with both modes, the stacks' own cost per py-spy run: (own with stacks - own without) / runs. ``--profile``
profiles every thread of the stacks mode (cProfile per thread, merged) and prints the top 20 by own time and by
cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(1, os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or str(ROOT / "app"))

JOB = r"""
import os, queue, sys, threading, time
import numpy as np

def deep(n, f):
    return deep(n - 1, f) if n else f()

def busy_then_rest(work_s, rest_s):
    def f():
        while True:
            end = time.perf_counter() + work_s
            while time.perf_counter() < end:
                sum(i * i for i in range(500))
            time.sleep(rest_s)
    return f

def matmul():
    a = np.random.rand(96, 96)
    while True:
        a @ a
        time.sleep(0.05)

def sleeper():
    parent = int(sys.argv[2])  # the launcher's pid, given: a job orphaned while it imported must go too
    while os.getppid() == parent:  # the launcher gone (killed with the benchmark): this job goes too
        time.sleep(0.2)
    os._exit(0)

def on_queue(q):
    while True:
        try:
            q.get(timeout=1.0)
        except queue.Empty:
            pass

q = queue.Queue()
extra = int(sys.argv[1])
targets = [("numpy", matmul), ("tokenize", lambda: deep(12, busy_then_rest(0.004, 0.05))), ("sleeper", sleeper),
           ("queue", lambda: on_queue(q))]
for i in range(extra):
    name, fn = targets[i % len(targets)]
    threading.Thread(target=fn, name=f"{name}-{i}", daemon=True).start()
deep(30, busy_then_rest(0.01, 0.04))
"""

LAUNCHER = r"""
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
job, every, lasts, threads, total = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
env = dict(os.environ, OPENBLAS_NUM_THREADS="16", OMP_NUM_THREADS="16")
running = []  # (end, proc)
start = time.monotonic()
k = 0
try:
  while True:
    now = time.monotonic() - start
    if now >= total:
        break
    if now >= k * every:
        p = subprocess.Popen([sys.executable, "-c", job, threads, str(os.getpid())], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        running.append((now + lasts, p))
        print("+", p.pid, flush=True)
        k += 1
    for end, p in [r for r in running if r[0] <= now]:
        running.remove((end, p))
        print("-", p.pid, flush=True)
        p.kill()
        p.wait()
    time.sleep(0.05)
finally:
  for _, p in running:
    p.kill()
    p.wait()
"""


class Storm:
    """Reads the launcher's "+ PID" / "- PID" lines and puts each job on a free card of the fake NVML, waiting."""

    def __init__(self, fake: object, cards: list[object], launcher: subprocess.Popen[str]) -> None:
        self.fake, self.cards, self.launcher = fake, cards, launcher
        self.on: dict[int, object] = {}
        self.jobs = 0
        self.thread = threading.Thread(target=self._run, name="bench-storm", daemon=True)

    def _run(self) -> None:
        from fake_nvml import FakeProcess  # noqa: PLC0415

        assert self.launcher.stdout is not None
        for line in self.launcher.stdout:
            sign, pid_text = line.split()
            pid = int(pid_text)
            if sign == "+":
                card = next(c for c in self.cards if not c.processes)  # type: ignore[attr-defined]
                card.processes = [FakeProcess(pid, usedGpuMemory=2 << 30)]  # type: ignore[attr-defined]
                self.on[pid] = card
                self.jobs += 1
            else:
                self.on.pop(pid).processes = []  # type: ignore[attr-defined]


def _profile_threads() -> list[cProfile.Profile]:
    """Every thread started from now on runs under a cProfile of its own (cProfile follows one thread)."""
    profiles: list[cProfile.Profile] = []
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        if self.name == "bench-storm":
            run(self)
            return
        p = cProfile.Profile()
        profiles.append(p)
        p.enable()
        try:
            run(self)
        finally:
            p.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]
    return profiles


def _cpu_of(thread: threading.Thread) -> float:
    """A thread's own CPU seconds so far (0 before it starts)."""
    if thread.ident is None:
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


class Meter:
    """Waits for the recorder's first ticks, starts the storm, lets it run ``warm`` seconds (the recorder's
    start-up and the first bursts are not the steady state), then reads the recorder's CPU over ``secs``."""

    def __init__(self, a: argparse.Namespace, fake: object, cards: list[object]) -> None:
        self.a, self.fake, self.cards = a, fake, cards
        self.readers: list[object] = []
        self.storm: Storm | None = None
        self.launcher: subprocess.Popen[str] | None = None
        self.result: dict[str, float] = {}
        self.threads: dict[str, float] = {}
        self.thread = threading.Thread(target=self._run, name="bench-storm", daemon=True)

    def _snapshot(self) -> tuple[float, float, float, int, float, dict[str, float]]:
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        bench = _cpu_of(self.thread) + (_cpu_of(self.storm.thread) if self.storm is not None else 0.0)
        runs = sum(int(getattr(r, "runs", 0)) for r in self.readers)
        # each thread's own CPU by name (the tick's thread, the stack sampler's, the main thread...), and the
        # kernel's share of the whole process
        threads = {t.name: _cpu_of(t) for t in threading.enumerate() if not t.name.startswith("bench-")}
        threads["(system time, all threads)"] = s.ru_stime
        return time.monotonic(), s.ru_utime + s.ru_stime - bench, c.ru_utime + c.ru_stime, runs, bench, threads

    def _run(self) -> None:
        from gpu_triage.sources.stacks import StackReader  # noqa: PLC0415

        a = self.a
        calls = self.fake.calls  # type: ignore[attr-defined]
        while calls["nvmlDeviceGetComputeRunningProcesses"] < 2:  # primed, then one tick
            time.sleep(0.05)
        self.readers = [o for o in gc.get_objects() if isinstance(o, StackReader)]
        self.launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, JOB, str(a.every), str(a.lasts),
                                          str(a.threads), str(a.warm + a.secs + 4 * a.interval)],
                                         stdout=subprocess.PIPE, text=True)
        self.storm = Storm(self.fake, self.cards, self.launcher)
        self.storm.thread.start()
        time.sleep(a.warm)
        t0, own0, kids0, runs0, _, th0 = self._snapshot()
        time.sleep(a.secs)
        t1, own1, kids1, runs1, bench, th1 = self._snapshot()
        self.result = {"wall_s": t1 - t0, "own_cpu_s": own1 - own0, "pyspy_cpu_s": kids1 - kids0,
                       "pyspy_runs": runs1 - runs0, "bench_cpu_s": bench}
        self.threads = {k: round(v - th0.get(k, 0.0), 3) for k, v in th1.items()}


def _profile_threads() -> list[cProfile.Profile]:
    """Every thread started from now on runs under a cProfile of its own (cProfile follows one thread), timed by
    its own CPU clock: what a thread waits for costs nothing."""
    profiles: list[cProfile.Profile] = []
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        if self.name == "bench-storm":
            run(self)
            return
        p = cProfile.Profile(time.thread_time)
        profiles.append(p)
        p.enable()
        try:
            run(self)
        finally:
            p.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]
    return profiles


def child(a: argparse.Namespace) -> dict[str, object]:
    import fake_nvml  # noqa: PLC0415
    from gpu_triage.cli import main  # noqa: PLC0415

    n_cards = int(a.lasts // a.every) + 2
    cards = [fake_nvml.FakeCard(util=20.0, uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
                                pci_bus_id=f"00000000:{i + 1:02x}:00.0") for i in range(n_cards)]
    fake = fake_nvml.FakeNvml(cards)
    sys.modules["pynvml"] = fake  # type: ignore[assignment]
    os.environ["GPU_TRIAGE_PYSPY"] = a.pyspy
    profiles = _profile_threads() if a.profile else []
    meter = Meter(a, fake, cards)
    meter.thread.start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-sampcost-"))
    out = tmp / "run.parquet"
    duration = a.warm + a.secs + 3 * a.interval
    args = ["record", "-o", str(out), "--interval", str(a.interval), "--duration", str(duration),
            "--log-file", str(tmp / "log"), "--log-level", "info"]
    if a.mode == "control":
        args.append("--no-stacks")
    main_prof = cProfile.Profile(time.thread_time) if a.profile else None
    if main_prof is not None:
        main_prof.enable()
    rc = main(args)
    if main_prof is not None:
        main_prof.disable()
    meter.thread.join()
    if meter.launcher is not None:
        meter.launcher.terminate()  # it ends its jobs
        meter.launcher.wait()
    from gpu_triage.trace.reader import open_trace  # noqa: PLC0415

    trace = open_trace(out)
    stacks = [s for t in trace.ticks(0, trace.n) for s in t.stacks]
    m = meter.result
    wall, own, kids, runs = m["wall_s"], m["own_cpu_s"], m["pyspy_cpu_s"], int(m["pyspy_runs"])
    res: dict[str, object] = {
        "mode": a.mode, "rc": rc, "measured_s": round(wall, 1), "ticks": trace.n,
        "jobs": meter.storm.jobs if meter.storm else 0,
        "own_cpu_s": round(own, 3), "own_pct_of_core": round(100 * own / wall, 3),
        "pyspy_cpu_s": round(kids, 3), "pyspy_pct_of_core": round(100 * kids / wall, 3),
        "pyspy_runs": runs, "runs_per_min": round(60 * runs / wall, 1),
        "pyspy_ms_per_run": round(1000 * kids / runs, 2) if runs else None,
        "samples_recorded": len(stacks), "samples_with_threads": sum(1 for s in stacks if s.thread_list),
        "bench_cpu_s": round(m["bench_cpu_s"], 3), "cpu_s_by_thread": meter.threads,
    }
    if main_prof is not None:
        stats = pstats.Stats(main_prof)
        for p in profiles:
            stats.add(p)
        stats.dump_stats(tmp / "profile.pstats")
        res["profile_file"] = str(tmp / "profile.pstats")  # for a closer look: python -m pstats FILE
        for key, only in (("tottime", ()), ("cumulative", ("gpu_triage",))):
            buf = io.StringIO()
            stats.stream = buf  # type: ignore[attr-defined]
            stats.sort_stats(key).print_stats(*only, 20)
            res[f"profile_{key}"] = buf.getvalue()
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--secs", type=float, default=120.0, help="seconds measured, after --warm")
    p.add_argument("--warm", type=float, default=12.0, help="seconds of the storm before the measurement")
    p.add_argument("--every", type=float, default=6.0, help="a new waiting job every this many seconds")
    p.add_argument("--lasts", type=float, default=24.0, help="each job ends after this many seconds")
    p.add_argument("--threads", type=int, default=4, help="Python threads of each job beside its main thread")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--mode", choices=("both", "stacks", "control"), default="both")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--pyspy", default=str(Path(sys.executable).parent / "py-spy"))
    p.add_argument("--app", default=str(ROOT / "app"), help="the gpu_triage tree to measure (a before/after pair)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(a)), flush=True)
        return
    modes = ("control", "stacks") if a.mode == "both" else (a.mode,)
    results: dict[str, dict[str, object]] = {}
    for mode in modes:
        argv = [sys.executable, __file__, "--child", "--mode", mode, "--secs", str(a.secs), "--warm", str(a.warm),
                "--every", str(a.every), "--lasts", str(a.lasts), "--threads", str(a.threads),
                "--interval", str(a.interval), "--pyspy", a.pyspy] + (["--profile"] if a.profile else [])
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=a.app))
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{mode}: no result (rc {done.returncode})\n{done.stderr[-3000:]}", file=sys.stderr)
            raise SystemExit(1)
        r = results[mode] = json.loads(line[len("RESULT "):])
        for key in ("profile_tottime", "profile_cumulative"):
            if key in r:
                print(f"--- {mode}: cProfile, every thread, by {key[len('profile_'):]} ---\n{r.pop(key)}")
        print(json.dumps(r), flush=True)
    if "control" in results and "stacks" in results:
        s, c = results["stacks"], results["control"]
        runs = int(s["pyspy_runs"])  # type: ignore[call-overload]
        extra = (float(s["own_cpu_s"]) - float(c["own_cpu_s"]) * float(s["measured_s"])  # type: ignore[arg-type]
                 / float(c["measured_s"]))  # type: ignore[arg-type]
        print(f"py-spy runs {runs} ({s['runs_per_min']}/min), samples {s['samples_recorded']}; "
              f"py-spy {s['pyspy_ms_per_run']} ms CPU a run ({s['pyspy_pct_of_core']} % of a core); "
              f"own CPU with stacks {s['own_pct_of_core']} % vs control {c['own_pct_of_core']} %: "
              f"+{100 * extra / float(s['measured_s']):.3f} % of a core, "  # type: ignore[arg-type]
              f"{1000 * extra / runs if runs else float('nan'):.2f} ms a run")


if __name__ == "__main__":
    main()
