"""Print the diagnosis per labelled scenario (real H200 traces) and per simulated scenario: expected vs got,
judged in the middle of each window. Usage: python scripts/diagnosis_table.py [--ticks]

Real traces: the raw verdict and the shown verdict (after the tracker's hold) at each tick between the
window's 35 % and 90 % marks (the edges hold start-up and wind-down; a periodic checkpoint's window from its
first save on: gpu_triage.data.judged_ticks); a row gives how many of those ticks
are acceptable and the most common shown verdict; "offline segment ok" counts the same ticks judged by the
segment of `gpu-triage diagnose` that holds them (non-causal smoothing). The window before each scenario
holds the previous one.
Simulated: 8 cards, 32 cores, 2 s ticks, seed 3, 90 s; judged from 30 s on (after the first verdict settles).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.data import H200_TRACE_05S, H200_TRACE_2S, judged_ticks, labels_for
from gpu_triage.offline.judge import load_trace, verdicts
from gpu_triage.offline.timeline import segments

ROOT = Path(__file__).resolve().parents[1]
OWN_2S = ROOT / "tests" / "data" / "h200-own-2s.parquet"
OWN_05S = ROOT / "tests" / "data" / "h200-own-0.5s.parquet"
GEN_2S = ROOT / "tests" / "data" / "h200-gen-2s.parquet"
GEN_05S = ROOT / "tests" / "data" / "h200-gen-0.5s.parquet"
X2_COMM = ROOT / "tests" / "data" / "h200x2-comm-1s.parquet"
X2_CUDA0 = ROOT / "tests" / "data" / "h200x2-cuda0-1s.parquet"
# the lab's recordings of issue 11's mechanisms (docs/h200.md), each at 1 s and 2 s ticks
X2_LAB = [ROOT / "tests" / "data" / f"h200x2-{m}-{iv}.parquet"
          for m in ("h2d", "loader0", "loader0rn50", "loader0rn50omp1", "ddp-ckpt", "stuck") for iv in ("1s", "2s")]
# a third setting of each mechanism, recorded after the rules were set (validation: no threshold saw them)
# the 1-card inside jobs with their real stacks (trace v3): labels name a bottleneck (or start_up), any pattern
INSIDE = [ROOT / "tests" / "data" / f"h200-inside-{p}-{iv}-stacks.parquet" for p in ("a", "b") for iv in ("2s", "0.5s")]
# the held-out 1-card inside jobs of trace v3 (our recorder: stacks at 2 s, --no-stacks at 0.5 s): the 2 s ones
# judged against ``bottleneck``, the 0.5 s ones against ``without_stacks`` (what an honest reading without may be)
INSIDE_V3 = [(ROOT / "tests" / "data" / f"h200-inside-{p}-{iv}.parquet", key)
             for iv, key in (("2s", "bottleneck"), ("0.5s", "without_stacks")) for p in ("c", "d", "e")]
# the held-out family of trace v4 (every thread of each dump, a burst when a card starts waiting), read the same way
INSIDE_V4 = [(ROOT / "tests" / "data" / f"h200-inside-{p}-{iv}.parquet", key)
             for iv, key in (("2s", "bottleneck"), ("0.5s", "without_stacks")) for p in ("f", "g")]
NO_STACKS = [*INSIDE, *(p for p, key in (*INSIDE_V3, *INSIDE_V4) if key == "bottleneck")]
X2_VAL = [ROOT / "tests" / "data" / f"h200x2-val-{m}-{iv}.parquet"
          for m in ("h2d", "loader0", "ddp-ckpt", "stuck") for iv in ("1s", "2s")]

def _ok(lab: dict, v, mechanism: str, key: str = "bottleneck") -> bool:
    """The label's pattern (any where it names none) and bottleneck (or its ``key``'s list); a start-up
    (bottleneck none) is "start_up", as the inside labels write it, and "none" only where it is not one."""
    if mechanism == "start_up" and "start_up" in lab[key]:
        reading = True
    else:
        reading = v.bottleneck in lab[key] and not (mechanism == "start_up" and key != "bottleneck")
    return ("pattern" not in lab or v.pattern in lab["pattern"]) and reading


def real_rows(path, show_ticks: bool, key: str = "bottleneck", stripped: bool = False) -> list[tuple]:
    """``stripped``: the recording read without its stack samples (the outside alone), tagged "-nostacks"."""
    cfg = Config()
    trace = load_trace(path)
    if stripped:
        trace.ticks = [dataclasses.replace(t, stacks=[]) for t in trace.ticks]
    res = verdicts(trace.ticks, trace.interval_s, cfg.thresholds, cfg.window_s, trace.host.cpu_count)
    ts = [t.ts for t, _, _ in res]
    segs = segments(trace.ticks, trace.interval_s, cfg.thresholds, cfg.window_s, trace.host.cpu_count)
    seg_of = [s for s in segs for _ in range(s.ticks)]  # segments are contiguous runs of ticks, in order
    rows = []
    for lab in json.loads(labels_for(path).read_text()):
        idx = judged_ticks(lab, ts, trace.interval_s)
        ok_raw = [_ok(lab, res[i][1], res[i][1].mechanism, key) for i in idx]
        ok_shown = [_ok(lab, res[i][2], res[i][2].mechanism, key) for i in idx]
        # a segment keeps (pattern, bottleneck); a start-up is a raw tick's mechanism under "none"
        ok_seg = [_ok(lab, seg_of[i], res[i][1].mechanism if res[i][1].bottleneck == seg_of[i].bottleneck else "",
                      key) for i in idx]
        got = Counter(f"{res[i][2].pattern}/{res[i][2].bottleneck}" for i in idx).most_common(1)[0][0]
        if show_ticks:
            for i in idx:
                r, s = res[i][1], res[i][2]
                print(
                    lab["scenario"],
                    ts[i].strftime("%H:%M:%S.%f")[:-4],
                    r.pattern,
                    r.bottleneck,
                    "| shown",
                    s.pattern,
                    s.bottleneck,
                    f"{r.confidence:.2f}",
                    r.period_s,
                    "|",
                    "; ".join(r.evidence[:3]),
                    file=sys.stderr,
                )
        rows.append(
            (
                path.name.replace("h200-scenarios-", "").replace("h200-", "").replace(".parquet", "")
                + ("-nostacks" if stripped else ""),
                lab["scenario"],
                "/".join(lab.get("pattern", ["any"])) + " · " + "/".join(lab[key]),
                got,
                f"{sum(ok_raw)}/{len(idx)}",
                f"{sum(ok_shown)}/{len(idx)}",
                f"{sum(ok_seg)}/{len(idx)}",
            )
        )
    return rows


def sim_rows() -> list[tuple]:
    from datetime import UTC

    from gpu_triage.sources.sim import EXPECTED, SCENARIOS, SimulatedSource

    cfg = Config()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for sc in SCENARIOS:
        src = SimulatedSource(sc, gpus=8, cores=32, seed=3, interval_s=2.0, start=t0)
        ticks = [src.sample() for _ in range(45)]
        res = [
            r for r in verdicts(ticks, 2.0, cfg.thresholds, cfg.window_s, 32) if (r[0].ts - t0).total_seconds() >= 30
        ]
        exp = EXPECTED[sc]
        raw_ok = sum((r[1].pattern, r[1].bottleneck) == exp for r in res)
        shown_ok = sum((r[2].pattern, r[2].bottleneck) == exp for r in res)
        got = Counter(f"{r[2].pattern}/{r[2].bottleneck}" for r in res).most_common(1)[0][0]
        seg_keys = [(s.pattern, s.bottleneck) for s in segments(ticks, 2.0, cfg.thresholds, cfg.window_s, 32)
                    for _ in range(s.ticks)]
        seg_ok = sum(k == exp for k, tk in zip(seg_keys, ticks, strict=True) if (tk.ts - t0).total_seconds() >= 30)
        rows.append(("sim 8x2s", sc, f"{exp[0]} · {exp[1]}", got, f"{raw_ok}/{len(res)}", f"{shown_ok}/{len(res)}",
                     f"{seg_ok}/{len(res)}"))
    return rows


def main() -> None:
    show = "--ticks" in sys.argv
    rows = []
    for p in (H200_TRACE_2S, H200_TRACE_05S, OWN_2S, OWN_05S, GEN_2S, GEN_05S, X2_COMM, X2_CUDA0, *X2_LAB, *X2_VAL,
              *INSIDE):
        rows += real_rows(p, show)
    for p, key in (*INSIDE_V3, *INSIDE_V4):
        rows += real_rows(p, show, key)
    for p in NO_STACKS:  # every recording with stacks, read without them: right or honest (``without_stacks``)
        rows += real_rows(p, show, "without_stacks", stripped=True)
    rows += sim_rows()
    print("| trace | scenario | expected (pattern · bottleneck) | got (shown, most common) | raw ok | shown ok "
          "| offline segment ok |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
