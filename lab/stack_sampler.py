"""Samples a running job from outside, as the inside-evidence work needs it: every --every seconds the Python
stacks of the job and its child processes (py-spy dump --nonblocking --json -s) and every thread of each
(/proc/PID/task: comm, state, wchan, CPU seconds); with --native-every, a native dump of the main process
(py-spy --native, which pauses it), to see what C++ a Python frame is in. Standard library only; one JSON object a line.

usage: python3 stack_sampler.py PIDFILE OUT.jsonl [--every 2] [--native-every 0] [--workers-per-sample 2]

At the end it prints its own CPU cost and that of the py-spy processes it ran (resource.getrusage).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import time


def read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(65536).decode("utf-8", "replace")
    except OSError:
        return None


def family(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo and len(out) < 512:
        p = todo.pop()
        out.append(p)
        for tid in os.listdir(f"/proc/{p}/task") if os.path.isdir(f"/proc/{p}/task") else []:
            kids = read(f"/proc/{p}/task/{tid}/children") or ""
            todo.extend(int(k) for k in kids.split())
    return out


def threads(pid: int) -> list[dict[str, object]]:
    rows = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return rows
    for tid in tids:
        stat = read(f"/proc/{pid}/task/{tid}/stat")
        if not stat:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        f = stat[stat.rindex(")") + 2 :].split()
        rows.append({"tid": int(tid), "comm": comm, "state": f[0], "utime": int(f[11]), "stime": int(f[12]),
                     "wchan": (read(f"/proc/{pid}/task/{tid}/wchan") or "").strip() or None})
    return rows


def dump(pid: int, native: bool, timeout: float) -> dict[str, object]:
    # --native needs the process paused (py-spy refuses it with --nonblocking), so it is off by default; -s does
    # not reach DataLoader workers in dump mode (seen with py-spy 0.4.3): each worker is dumped by its own pid.
    cmd = ["py-spy", "dump", "--pid", str(pid), "--json"] + (["--native"] if native else ["--nonblocking"])
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return {"took_s": round(time.time() - t0, 3), "rc": None, "err": "timeout"}
    res: dict[str, object] = {"took_s": round(time.time() - t0, 3), "rc": r.returncode}
    try:
        res["dump"] = json.loads(r.stdout) if r.returncode == 0 else None
    except json.JSONDecodeError:
        res["dump"] = None
    if r.returncode != 0 or res["dump"] is None:
        res["err"] = r.stderr[-600:]
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pidfile")
    p.add_argument("out")
    p.add_argument("--every", type=float, default=2.0)
    p.add_argument("--native-every", type=float, default=0.0)
    p.add_argument("--workers-per-sample", type=int, default=2, help="child processes dumped per sample, in turn")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the pid file")
    a = p.parse_args()
    t_end = time.time() + a.wait
    pid = None
    while time.time() < t_end:
        txt = read(a.pidfile)
        if txt and txt.strip().isdigit() and os.path.isdir(f"/proc/{txt.strip()}"):
            pid = int(txt)
            break
        time.sleep(0.2)
    if pid is None:
        print("no pid", flush=True)
        return
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # SIGTERM ends the loop and still prints the cost
    cpu0 = os.times()
    last_native = 0.0
    n = 0
    with open(a.out, "a") as out:
        while os.path.isdir(f"/proc/{pid}") and not stop:
            t = time.time()
            rec: dict[str, object] = {"t": t, "pid": pid,
                                      "procs": [{"pid": q, "cmdline": (read(f"/proc/{q}/cmdline") or "").replace("\0", " ")[:300],
                                                 "threads": threads(q)} for q in family(pid)]}
            rec.update(dump(pid, native=False, timeout=max(a.every * 2, 4)))
            kids = [q["pid"] for q in rec["procs"]][1:]  # type: ignore[index]
            rec["children"] = []
            for k in range(min(a.workers_per_sample, len(kids))):
                q = kids[(n * a.workers_per_sample + k) % len(kids)]
                rec["children"].append({"pid": q, **dump(q, native=False, timeout=4)})  # type: ignore[union-attr]
            out.write(json.dumps(rec) + "\n")
            if a.native_every and t - last_native >= a.native_every:
                last_native = t
                nat = {"t": time.time(), "pid": pid, "native": True}
                nat.update(dump(pid, native=True, timeout=20))
                out.write(json.dumps(nat) + "\n")
            out.flush()
            n += 1
            if not stop:
                time.sleep(max(0.0, a.every - (time.time() - t)))
    cpu1 = os.times()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"samples": n, "sampler_cpu_s": round(cpu1.user + cpu1.system - cpu0.user - cpu0.system, 3),
                      "pyspy_cpu_s": round(kids.ru_utime + kids.ru_stime, 3)}), flush=True)


if __name__ == "__main__":
    main()
