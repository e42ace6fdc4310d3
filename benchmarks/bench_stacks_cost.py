"""What the stack sampler costs, on a machine with a GPU: the monitor's CPU with its py-spy children counted, and
the job's step time with and without sampling, each job measured against itself.

usage: python3 benchmarks/bench_stacks_cost.py OUT_DIR --runs "NAME:SETTING ..." [--secs 34] [--off-s 10]
           [--prefix h200-inside-f] -- JOB_COMMAND...

Three `gpu-triage record` run for the whole session: the sampler's (2 s ticks, stacks on: the recording under
test), a neutral one (0.5 s, --no-stacks: what the outside alone sees) and a control (2 s, --no-stacks: the
same monitor at the same rate without stacks). Each run is ``JOB_COMMAND NAME SETTING MARKS --secs S`` (lab/
inside_family2.py's interface: it prints ``LOOP_START <epoch>`` and writes each step's end time to $STEP_LOG).
For its first ``off_s`` seconds the sampler's recorder is stopped (SIGSTOP: no tick, no dump, the job runs
unsampled), then continued for the rest: the job's own clock gives its step time in both segments, and the CPU
that the sampler's recorder (self and reaped children, /proc/PID/stat utime+stime+cutime+cstime: py-spy is a
child it waits for) and the control used over the sampled segments gives the cost of stacks at the same rate.

Writes OUT_DIR/cost.json (per run and in total), OUT_DIR/windows.json (each run's sampled window: the labelled
one) and the three recordings; prints one line per run. Needs a GPU for the sampler to dump anything (it looks
only inside processes whose card waits); on a machine without one every figure reads "no stacks".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of ``pid`` from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, (int(fields[13]) + int(fields[14])) / CLK_TCK


def segment(ends: list[float], lo: float, hi: float) -> dict[str, float | int | None]:
    """The steps that ended in [lo, hi): how many, their mean (the segment's length over its steps) and the
    median of the times between consecutive ends, in ms."""
    inside = [t for t in ends if lo <= t < hi]
    gaps = [b - a for a, b in zip(inside, inside[1:], strict=False)]
    return {"steps": len(inside), "mean_ms": round(1000 * (hi - lo) / len(inside), 3) if inside else None,
            "median_ms": round(1000 * statistics.median(gaps), 3) if gaps else None}


def recorder(out: Path, name: str, interval: float, stacks: bool) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "gpu_triage", "record", "-o", str(out / f"{name}.parquet"), "--interval",
           str(interval), "--log-file", str(out / f"{name}.debug"), "--log-level", "info"]
    if not stacks:
        cmd.append("--no-stacks")
    return subprocess.Popen(cmd, stdout=open(out / f"{name}.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115


def run_one(job: list[str], name: str, setting: str, out: Path, secs: float, off_s: float,
            sampler: subprocess.Popen[bytes], control: subprocess.Popen[bytes]) -> dict[str, object]:
    steps = out / f"{name}-{setting}.steps.json"
    env = dict(os.environ, STEP_LOG=str(steps))
    log = open(out / f"{name}-{setting}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([*job, name, setting, str(out / "marks.json"), "--secs", str(secs)], env=env,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    assert proc.stdout is not None
    t0 = None
    for line in proc.stdout:
        log.write(line)
        if line.startswith("LOOP_START"):
            t0 = float(line.split()[1])
            break
    if t0 is None:
        proc.wait()
        return {"run": f"{name}-{setting}", "error": f"no LOOP_START, rc={proc.returncode}"}
    time.sleep(max(0.0, t0 + off_s - time.time()))
    s0, c0 = cpu_s(sampler.pid), cpu_s(control.pid)
    t_on = time.time()
    os.kill(sampler.pid, signal.SIGCONT)
    for line in proc.stdout:
        log.write(line)
    proc.wait(timeout=secs + 60)
    s1, c1 = cpu_s(sampler.pid), cpu_s(control.pid)
    t_end = time.time()
    os.kill(sampler.pid, signal.SIGSTOP)
    log.close()
    ends = json.loads(steps.read_text())["ends"] if steps.exists() else []
    return {"run": f"{name}-{setting}", "rc": proc.returncode, "loop_start": t0, "sampled_from": t_on,
            "end": t_end, "unsampled": segment(ends, t0 + 1.0, t_on), "sampled": segment(ends, t_on, ends[-1] if ends
                                                                                       else t_end),
            "sampled_wall_s": round(t_end - t_on, 2),
            "sampler_own_cpu_s": round(s1[0] - s0[0], 3), "sampler_children_cpu_s": round(s1[1] - s0[1], 3),
            "control_cpu_s": round(sum(c1) - sum(c0), 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--runs", required=True)
    p.add_argument("--secs", type=float, default=34.0)
    p.add_argument("--off-s", type=float, default=10.0)
    p.add_argument("--prefix", default="h200-inside-f")
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("name the job after --: ... -- python3 lab/inside_family2.py")
    cut = argv.index("--")
    a = p.parse_args(argv[:cut])
    job = argv[cut + 1:]
    a.out.mkdir(parents=True, exist_ok=True)
    sampler = recorder(a.out, f"{a.prefix}-2s", 2.0, True)
    neutral = recorder(a.out, f"{a.prefix}-0.5s", 0.5, False)
    control = recorder(a.out, "control-2s", 2.0, False)
    time.sleep(6)  # the three have opened their files and taken their first ticks
    # a recorder that refused to start (an output file left by an earlier run, say) would read as 0 % CPU, a
    # cost of nothing: the run stops here instead, naming its log
    gone = [(n, r) for n, r in ((f"{a.prefix}-2s", sampler), (f"{a.prefix}-0.5s", neutral), ("control-2s", control))
            if r.poll() is not None]
    if gone:
        for rec in (sampler, neutral, control):
            if rec.poll() is None:
                rec.send_signal(signal.SIGINT)
                rec.wait(timeout=60)
        said = ", ".join(f"{n} (exit {r.returncode}, see {a.out / (n + '.log')})" for n, r in gone)
        sys.exit(f"bench_stacks_cost: recorder(s) {said} ended before the runs: nothing measured")
    os.kill(sampler.pid, signal.SIGSTOP)
    results = []
    try:
        for run in a.runs.split():
            name, setting = run.split(":")
            r = run_one(job, name, setting, a.out, a.secs, a.off_s, sampler, control)
            results.append(r)
            print(json.dumps(r), flush=True)
            (a.out / "cost.json").write_text(json.dumps({"runs": results}, indent=1))
            time.sleep(2)
    finally:
        os.kill(sampler.pid, signal.SIGCONT)
        for rec in (sampler, neutral, control):
            rec.send_signal(signal.SIGINT)
        for rec in (sampler, neutral, control):
            rec.wait(timeout=60)
    ok = [r for r in results if "error" not in r]
    wall = sum(float(r["sampled_wall_s"]) for r in ok)  # type: ignore[arg-type]
    own = sum(float(r["sampler_own_cpu_s"]) for r in ok)  # type: ignore[arg-type]
    kids = sum(float(r["sampler_children_cpu_s"]) for r in ok)  # type: ignore[arg-type]
    ctl = sum(float(r["control_cpu_s"]) for r in ok)  # type: ignore[arg-type]
    total = {"sampled_wall_s": round(wall, 1), "sampler_pct_of_core": round(100 * (own + kids) / wall, 3) if wall
             else None, "of_which_pyspy_pct": round(100 * kids / wall, 3) if wall else None,
             "control_pct_of_core": round(100 * ctl / wall, 3) if wall else None}
    total["stacks_cost_pct_of_core"] = (round(total["sampler_pct_of_core"] - total["control_pct_of_core"], 3)
                                        if wall else None)  # type: ignore[operator]
    (a.out / "cost.json").write_text(json.dumps({"runs": results, "total": total}, indent=1))
    (a.out / "windows.json").write_text(json.dumps(
        [{"run": r["run"], "start_s": r["sampled_from"], "end_s": r["end"]} for r in ok], indent=1))
    print("TOTAL", json.dumps(total), flush=True)


if __name__ == "__main__":
    main()
