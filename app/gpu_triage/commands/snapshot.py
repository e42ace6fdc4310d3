"""``gpu-triage snapshot``: one reading, no screen, as ``gpustat`` or ``nvtop -s`` give one: every card, the
host, the processes and the verdict of the two-minute method over a short window (a few ticks at a short
interval), as text or as JSON for scripts.

The verdict needs a few seconds of ticks (the engine says "collecting" before it can support one), so the
default window is the shortest the method judges; a simulated source samples its own clock and answers at
once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

from gpu_triage.config import Config, stacks_wanted
from gpu_triage.diagnosis.engine import COLLECTING, format_confidence
from gpu_triage.errors import UserError
from gpu_triage.model import GpuSample, ProcSample, Tick, throttle_names
from gpu_triage.sources.base import HostProcesses
from gpu_triage.sources.inside import InsideReport, InsideSampler, report_json, waiting_processes
from gpu_triage.sources.spec import make_source
from gpu_triage.sources.stacks import ACCESS_PROBLEMS
from gpu_triage.units import short_bytes
from gpu_triage.verdicts.judge import Judge

DEFAULT_SECONDS = 6.0  # the shortest window the diagnosis judges (before it: "collecting")
DEFAULT_INTERVAL_S = 1.0  # a one-shot reading should not take the dashboard's 2 s a tick
TOP_PROCS = 10


@dataclasses.dataclass(slots=True)
class Reading:
    source: str
    host: dict[str, Any]
    interval_s: float
    ticks: list[Tick]
    gpu_available: bool
    status: list[str]
    procs: list[ProcSample]
    host_only: bool
    verdict: dict[str, Any]
    # what each waiting GPU process was doing, from its stacks (pid -> report); empty where no card waited,
    # for a simulated source, or without py-spy (``inside_note`` says which)
    inside: dict[int, InsideReport] = dataclasses.field(default_factory=dict)
    inside_note: str | None = None


def take(source_spec: str, *, seconds: float, interval_s: float, gpus: int = 8, seed: int = 0,
         config: Config | None = None, sleep: Any = time.sleep, stacks: bool = True) -> Reading:
    """Sample ``source_spec`` over ``seconds`` (at least two ticks) and judge the window; ``stacks``: look
    inside the processes whose card waits (py-spy), as the config and --no-stacks allow."""
    config = config or Config()
    source = make_source(source_spec, gpus=gpus, seed=seed, interval_s=interval_s)
    try:
        host = source.host_info()
        simulated = source_spec.startswith("sim:")
        n = max(2, math.ceil(seconds / interval_s) + 1)
        # the one judge, its window the reading's n ticks; judged once, at the newest (the engine's raw verdict)
        judge = Judge(config.thresholds, n * interval_s, interval_s, host.cpu_count, capacity=n)
        ticks: list[Tick] = []
        # a live reading also looks inside the processes whose card waits, once a tick (a one-shot reading
        # has no screen to keep fluid: the dumps run in line)
        inside = None if simulated or not stacks else InsideSampler(every_s=interval_s)
        for k in range(n):
            if k and not simulated:  # the simulator keeps its own clock: no need to wait for it
                sleep(interval_s)
            tick = source.sample()
            judge.add(tick)
            ticks.append(tick)
            if inside is not None:
                inside.want(waiting_processes(tick))
                inside.step()
        status = source.status()
        view = judge.window.view()
        judged = judge.judge(view)
        if judged is None or judged.raw is None:
            raise UserError(f"the diagnosis of the reading failed ({judged.error if judged else 'no tick'}); "
                            "the log file says why: please report it")
        verdict = judged.raw
        procs = list(ticks[-1].procs)
        host_only = False
        if not procs and not status.gpu_available and isinstance(source, HostProcesses):
            procs, host_only = list(source.busiest_processes()), True
        return Reading(
            source=source_spec,
            host=host.to_json_obj(),
            interval_s=interval_s,
            ticks=ticks,
            gpu_available=status.gpu_available,
            status=list(status.messages),
            procs=procs[:TOP_PROCS] if host_only else procs,
            host_only=host_only,
            inside=inside.reports() if inside is not None else {},
            inside_note=None if inside is None or inside.available else ACCESS_PROBLEMS["no_pyspy"],
            verdict={
                "pattern": verdict.pattern,
                "bottleneck": verdict.bottleneck,
                "gpus": list(verdict.gpus),
                # no card, no GPU verdict to rate: null rather than a figure that means nothing
                "confidence": round(verdict.confidence, 3) if view.n_gpus else None,
                "collecting": verdict.pattern == COLLECTING,
                "evidence": list(verdict.evidence),
                "advice": list(verdict.advice),
            },
        )
    finally:
        source.close()


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None and not math.isnan(v)]
    return sum(got) / len(got) if got else None


def to_json(r: Reading) -> dict[str, Any]:
    last = r.ticks[-1]
    cards = []
    for g in last.gpus:
        row = dataclasses.asdict(g)
        row["throttle"] = throttle_names(g.clock_event_reasons) if g.clock_event_reasons is not None else None
        row["util_window_mean_pct"] = _mean([c.util_pct for t in r.ticks for c in t.gpus if c.index == g.index])
        cards.append(row)
    return {
        "source": r.source,
        "time": last.ts.isoformat(),
        "window_s": round((r.ticks[-1].ts - r.ticks[0].ts).total_seconds(), 3),
        "ticks": len(r.ticks),
        "interval_s": r.interval_s,
        "host": r.host,
        "gpu_available": r.gpu_available,
        "messages": r.status,
        "gpus": cards,
        "cpu": {
            "cores_pct": last.cpu_pct,
            "mean_pct": _mean(list(last.cpu_pct)),
            "iowait_pct": last.iowait_pct,
            "mem_used_bytes": last.host_mem_used_bytes,
            "mem_total_bytes": last.host_mem_total_bytes,
            "swap_used_bytes": last.host_swap_used_bytes,
            "swap_total_bytes": last.host_swap_total_bytes,
        },
        "disks": [dataclasses.asdict(d) for d in last.disks],
        "nets": [dataclasses.asdict(n) for n in last.nets],
        "processes": [dataclasses.asdict(p) for p in r.procs],
        # what each waiting GPU process was doing, from its stacks (py-spy) and threads (/proc)
        "inside": [report_json(rep) for rep in r.inside.values()],
        "inside_note": r.inside_note,
        "processes_are": "busiest on the host (no GPU)" if r.host_only else "GPU processes",
        "verdict": r.verdict,
    }


def _pct(v: float | None, w: int = 4) -> str:
    return f"{v:{w - 1}.0f}%" if v is not None and not math.isnan(v) else "n/a".rjust(w)


def _num(v: float | None, fmt: str, na: str = "n/a") -> str:
    return format(v, fmt) if v is not None and not math.isnan(v) else na


def _card_line(g: GpuSample) -> str:
    mem = f"{short_bytes(g.mem_used_bytes)}/{short_bytes(g.mem_total_bytes)}" if g.mem_total_bytes else "n/a"
    flags = throttle_names(g.clock_event_reasons) if g.clock_event_reasons is not None else None
    flag = ("THR " + ",".join(flags)) if flags else ""
    if g.ecc_uncorrected:
        flag += f" ECC {g.ecc_uncorrected}"
    if g.xid_count:
        flag += f" XID {g.xid_last if g.xid_last is not None else ''}"
    return (f"{g.index:>3} {_pct(g.util_pct, 5)} {_pct(g.sm_active_pct, 5)} {mem:>10} {_num(g.power_w, '5.0f'):>5}W"
            f" {_num(g.temp_c, '3.0f'):>4}C {_num(g.sm_clock_mhz, '5.0f'):>5}MHz  {flag.strip()}").rstrip()


def to_text(r: Reading) -> str:
    last = r.ticks[-1]
    host = r.host.get("hostname") or "this host"
    span = (r.ticks[-1].ts - r.ticks[0].ts).total_seconds()
    lines = [f"{host} · {r.source} · {len(last.gpus)} GPU{'' if len(last.gpus) == 1 else 's'} · "
             f"{len(r.ticks)} ticks over {span:.0f} s at {r.interval_s:g} s · {last.ts.isoformat(timespec='seconds')}"]
    lines += [f"note: {m}" for m in r.status]
    if not r.gpu_available:
        lines.append("no NVIDIA GPU/driver: host only (the verdict reads the host alone)")
    elif last.gpus:
        lines.append("GPU  UTIL    SM        MEM  POWER  TEMP    CLOCK  FLAGS")
        lines += [_card_line(g) for g in last.gpus]
    cores = list(last.cpu_pct)
    n = len(cores)
    mem = (f"{short_bytes(last.host_mem_used_bytes)}/{short_bytes(last.host_mem_total_bytes)}"
           if last.host_mem_total_bytes else "n/a")
    hot = sum(1 for c in cores if c is not None and c >= 90)
    lines.append(f"CPU {n} core{'' if n == 1 else 's'} avg {_pct(_mean(cores), 1).strip()} · {hot} ≥90% · "
                 f"iowait {_pct(last.iowait_pct, 1).strip()} · mem {mem}")
    for d in sorted(last.disks, key=lambda d: -(d.busy_pct or 0.0))[:3]:
        lines.append(f"DISK {d.name} busy {_pct(d.busy_pct, 1).strip()} await {_num(d.await_ms, '.1f')} ms")
    if r.procs:
        if r.host_only:  # no card: the GPU columns would be dashes
            lines.append("PROCESSES (busiest on the host, no GPU)")
            lines.append(f"{'PID':>8} {'PROCESS':<15} {'CPU%':>5}")
            lines += [f"{p.pid:>8} {(p.name or 'n/a')[:15]:<15} {_pct(p.cpu_pct, 5)}" for p in r.procs]
        else:
            lines.append("PROCESSES")
            lines.append(f"{'PID':>8} {'PROCESS':<15} {'GPU':>3} {'GPU MEM':>8} {'SM%':>4} {'CPU%':>5}")
            lines += [
                f"{p.pid:>8} {(p.name or 'n/a')[:15]:<15} {p.gpu_index:>3} {short_bytes(p.gpu_mem_bytes):>8}"
                f" {_pct(p.sm_pct)} {_pct(p.cpu_pct, 5)}"
                for p in r.procs
            ]
            lines += [f"{pid:>8} inside: {rep.sentence()}" for pid, rep in r.inside.items()]
    if r.inside_note and any(not rep.share.samples for rep in r.inside.values()):
        lines.append(f"note: {r.inside_note}")
    v = r.verdict
    conf = f"  {format_confidence(v['confidence'])}" if v["confidence"] is not None else "  (no GPU)"
    gpus = f"  GPU {','.join(map(str, v['gpus']))}" if v["gpus"] else ""
    lines.append(f"VERDICT {v['pattern']} · {v['bottleneck']}{gpus}{conf}")
    lines += [f"  • {e}" for e in v["evidence"]]
    lines += [f"  → {a}" for a in v["advice"]]
    return "\n".join(lines)


def run_snapshot(args: argparse.Namespace, config: Config) -> int:
    seconds = float(getattr(args, "seconds", None) or DEFAULT_SECONDS)
    interval_s = float(getattr(args, "snapshot_interval", None) or DEFAULT_INTERVAL_S)
    if interval_s > seconds:
        raise UserError(f"--interval {interval_s:g} is longer than --seconds {seconds:g}: give a shorter interval")
    reading = take(args.source, seconds=seconds, interval_s=interval_s, gpus=args.gpus, seed=args.seed,
                   config=config, stacks=stacks_wanted(config, bool(getattr(args, "no_stacks", False))))
    if args.json:
        print(json.dumps(to_json(reading), indent=2, default=str))
    else:
        print(to_text(reading))
    sys.stdout.flush()
    return 0
