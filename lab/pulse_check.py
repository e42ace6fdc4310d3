"""Checks of the pulse proof (issue 12, 2 H200s, 2026-11-30; docs/h200.md): does what gpu-triage recorded match the training?

usage: python3 lab/pulse_check.py RUNDIR NAME [NAME...]
For each run NAME, RUNDIR holds NAME-pulse.parquet (recorded with the pulse), NAME-log.parquet (recorded
from the tqdm log only), NAME-progress.json (the training's own count). Over the training's steady stretch
(its first step and the first 2 s after it left out, and the last second), compares the mean of the recorded
per-tick samples/s with the training's own samples over the same span: they must agree within 2 %. The
data-wait share (pulse, slowest rank) must be > 50 % for *starved* runs and < 10 % for *fixed* ones.
Prints one line per check, PASS or FAIL, and exits 1 if any failed.
"""

from __future__ import annotations

import bisect
import json
import statistics
import sys
from pathlib import Path

from gpu_triage.trace.reader import open_trace


def own_samples_at(points: list[list[float]], t: float) -> float:
    """The training's cumulative samples at time t, interpolated between its steps."""
    times = [p[0] for p in points]
    i = bisect.bisect_left(times, t)
    if i <= 0:
        return points[0][1]
    if i >= len(points):
        return points[-1][1]
    (ta, na), (tb, nb) = points[i - 1], points[i]
    return na + (nb - na) * (t - ta) / (tb - ta) if tb > ta else nb


def check_run(rundir: Path, name: str) -> list[tuple[bool, str]]:
    """The checks of run NAME as the driver script leaves it in RUNDIR."""
    return check_files(name, rundir / f"{name}-progress.json",
                       {kind: rundir / f"{name}-{kind}.parquet" for kind in ("pulse", "log")})


def check_files(name: str, progress: Path, recordings: dict[str, Path]) -> list[tuple[bool, str]]:
    """(passed, line) per check of run NAME: its own count in ``progress``, its recordings by kind ("pulse":
    recorded with the pulse, "log": from the tqdm log only). tests/test_pulse_h200_proof.py runs the same
    checks on the recordings kept in tests/data."""
    out: list[tuple[bool, str]] = []
    prog = json.loads(progress.read_text())
    points = prog["points"]
    lo, hi = points[0][0] + 2.0, points[-1][0] - 1.0
    for kind, path in recordings.items():
        if not path.exists():
            out.append((False, f"{name} {kind}: {path.name} missing"))
            continue
        trace = open_trace(path)
        rows = []
        for t in trace.ticks():
            ts = t.ts.timestamp()
            if t.job is not None and lo + trace.interval_s <= ts <= hi and t.job.samples_per_s is not None:
                rows.append((ts, t.interval_s or trace.interval_s, t.job))
        if len(rows) < 5:
            out.append((False, f"{name} {kind}: only {len(rows)} ticks with job data in the steady stretch"))
            continue
        ours = statistics.fmean(j.samples_per_s for _, _, j in rows)
        t_a, t_b = rows[0][0] - rows[0][1], rows[-1][0]
        theirs = (own_samples_at(points, t_b) - own_samples_at(points, t_a)) / (t_b - t_a)
        err = 100.0 * (ours - theirs) / theirs
        out.append((abs(err) <= 2.0, (f"{name} {kind}: gpu-triage {ours:.1f} samples/s, the training's own count "
                                     f"{theirs:.1f} samples/s over the same {t_b - t_a:.0f} s: {err:+.2f} % "
                                     f"(source {rows[-1][2].source})")))
        if kind == "pulse":
            waits = [j.data_wait_pct for _, _, j in rows if j.data_wait_pct is not None]
            wait = statistics.median(waits) if waits else float("nan")
            ranks = {r.rank for _, _, j in rows for r in j.ranks}
            if prog["mode"] == "starved":
                out.append((wait > 50.0, (f"{name}: data wait {wait:.0f} % of each step (> 50 % expected), "
                                         f"ranks seen {sorted(ranks)}")))
            else:
                out.append((wait < 10.0, (f"{name}: data wait {wait:.1f} % of each step (< 10 % expected), "
                                         f"ranks seen {sorted(ranks)}")))
            out.append((len(ranks) == prog["world"], (f"{name}: {len(ranks)} rank(s) in the pulse, "
                                                     f"{prog['world']} in the job")))
    if not prog.get("tqdm"):
        out.append((False, f"{name}: tqdm was not installed on this machine: the log was not a tqdm log"))
    return out


def main() -> int:
    rundir = Path(sys.argv[1])
    failed = 0
    for name in sys.argv[2:]:
        try:
            results = check_run(rundir, name)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            results = [(False, f"{name}: could not be checked ({type(exc).__name__}: {exc})")]
        for ok, line in results:
            failed += not ok
            print(("PASS " if ok else "FAIL ") + line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
