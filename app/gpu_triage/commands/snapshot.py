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

from gpu_triage import proc_columns
from gpu_triage.config import Config, inside_settings, stacks_wanted
from gpu_triage.diagnosis.engine import COLLECTING, format_confidence
from gpu_triage.diagnosis.vocab import GPU_FAULT
from gpu_triage.diagnosis.worth import Headroom
from gpu_triage.errors import UserError
from gpu_triage.model import GpuSample, ProcSample, Tick, throttle_names
from gpu_triage.proc_control import ProcControl
from gpu_triage.sources.base import HostProcesses, SourceStatus
from gpu_triage.sources.inside import InsideReport, InsideSampler, report_json
from gpu_triage.sources.spec import make_source
from gpu_triage.sources.stacks import ACCESS_PROBLEMS
from gpu_triage.trace.row_codec import host_to_json
from gpu_triage.units import short_bytes
from gpu_triage.verdicts.judge import Judge

DEFAULT_SECONDS = 6.0  # the shortest window the diagnosis judges (before it: "collecting")
DEFAULT_INTERVAL_S = 1.0  # a one-shot reading should not take the dashboard's 2 s a tick
TOP_PROCS = 10
EXIT_GPU_FAULT = 3  # the reading was taken and printed, and the cards are faulty (2 is bad input, 1 a failure)


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
    # what is wrong with the cards themselves (a broken driver, a lost or missing card): EXIT_GPU_FAULT
    fault: dict[str, Any] | None = None
    # what only this machine says of its processes (none for a simulated source): pid -> facts
    here: dict[int, ProcHere] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class ProcHere:
    """A process of this machine beyond its tick: its user and command line, host memory and run time."""

    user: str | None = None
    command: str | None = None  # shortened as the COMMAND column shows it
    cmdline: str | None = None  # whole, cleaned
    rss_bytes: int | None = None
    elapsed_s: float | None = None


def read_here(procs: Sequence[ProcSample], control: ProcControl | None = None,
              now: float | None = None) -> dict[int, ProcHere]:
    """Each process's :class:`ProcHere`, read from this machine now."""
    control = control or ProcControl()
    now = time.time() if now is None else now
    out = {}
    for p in procs:
        d = control.details(p.pid)
        out[p.pid] = ProcHere(d.user, d.command, d.cmdline, control.rss(p.pid),
                              None if d.created is None else max(0.0, now - d.created))
    return out


def _fault_of(status: SourceStatus) -> dict[str, Any] | None:
    """The cards' fault as the reading carries it, or None when they answer."""
    fault = status.fault()
    if fault is None:
        return None
    return {"kind": str(fault), "line": status.fault_line(), "lost": sorted(status.lost_gpus),
            "gpus_expected": status.gpus_expected, "gpus_missing": status.gpus_missing}


def _processes(source: object, last: Tick, status: SourceStatus) -> tuple[list[ProcSample], bool]:
    """The newest tick's GPU processes; with no card to read, the host's busiest (and True)."""
    procs = list(last.procs)
    if not procs and not status.gpu_available and isinstance(source, HostProcesses):
        return list(source.busiest_processes())[:TOP_PROCS], True
    return procs, False


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
        inside = (None if simulated or not stacks
                  else InsideSampler(every_s=interval_s, settings=inside_settings(config)))
        for k in range(n):
            if k and not simulated:  # the simulator keeps its own clock: no need to wait for it
                sleep(interval_s)
            tick = source.sample()
            judge.add(tick)
            ticks.append(tick)
            if inside is not None:
                inside.follow(tick)
                inside.step()
        status = source.status()
        view = judge.window.view()
        judged = judge.judge(view)
        if judged is None or judged.raw is None:
            raise UserError(f"the diagnosis of the reading failed ({judged.error if judged else 'no tick'}); "
                            "the log file says why: please report it")
        verdict = judged.raw
        procs, host_only = _processes(source, ticks[-1], status)
        return Reading(
            fault=_fault_of(status),
            source=source_spec,
            host=host_to_json(host),
            interval_s=interval_s,
            ticks=ticks,
            gpu_available=status.gpu_available,
            status=list(status.messages),
            procs=procs,
            host_only=host_only,
            here={} if simulated else read_here(procs),
            inside=inside.reports() if inside is not None else {},
            inside_note=None if inside is None or inside.available else _unavailable(inside),
            verdict={
                "pattern": verdict.pattern,
                "bottleneck": verdict.bottleneck,
                "gpus": list(verdict.gpus),
                # no card, no GPU verdict to rate: null rather than a figure that means nothing
                "confidence": round(verdict.confidence, 3) if view.n_gpus else None,
                "collecting": verdict.pattern == COLLECTING,
                "evidence": list(verdict.evidence),
                "advice": list(verdict.advice),
                "headroom": None if verdict.headroom is None else verdict.headroom.as_dict(),
            },
        )
    finally:
        source.close()


def _unavailable(inside: InsideSampler) -> str:
    """Why no stacks were read: py-spy missing, or the one found refused (naming it)."""
    return inside.stacks.refused or ACCESS_PROBLEMS["no_pyspy"]


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
        "processes": [_proc_json(p, r.here.get(p.pid)) for p in r.procs],
        # what each waiting GPU process was doing, from its stacks (py-spy) and threads (/proc)
        "inside": [report_json(rep) for rep in r.inside.values()],
        "inside_note": r.inside_note,
        "processes_are": "busiest on the host (no GPU)" if r.host_only else "GPU processes",
        "fault": r.fault,
        "verdict": r.verdict if r.fault is None else _fault_verdict(r.fault),
    }


def _proc_json(p: ProcSample, here: ProcHere | None) -> dict[str, Any]:
    """A process as recorded, with what this machine says of it (null for a simulated one): the whole
    command line (cleaned), host RSS, run time, and the one owner that answers "whose job is it"."""
    row = dataclasses.asdict(p)
    # its GPU-Util sample under a name of its own: its share of the card's time, not the card's SM activity
    row["gpu_util_pct"] = row.pop("sm_pct")
    if row["user"] is None and here is not None:
        row["user"] = here.user
    owner = p.owner() or (("user", row["user"]) if row["user"] else None)
    row.update({
        "command": here.cmdline if here else None,
        "rss_bytes": here.rss_bytes if here else None,
        "elapsed_s": round(here.elapsed_s, 1) if here and here.elapsed_s is not None else None,
        "owner": {"kind": owner[0], "id": owner[1]} if owner else None,
    })
    return row


def _proc_lines(r: Reading) -> list[str]:
    """The process table as the dashboard draws it, every column (no terminal width to fit)."""
    cols = proc_columns.choose(proc_columns.HOST_COLUMNS if r.host_only else proc_columns.GPU_COLUMNS, None)
    lines = [proc_columns.heading(cols) + " " + proc_columns.COMMAND]
    for p in r.procs:
        here = r.here.get(p.pid) or ProcHere()
        values = proc_columns.values(p, p.user or here.user, here.rss_bytes, here.elapsed_s)
        lines.append(proc_columns.line(cols, values, here.command or p.name or "n/a", None))
    return lines


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
    """The reading as a terminal reads it: what was read, the cards, the host, the processes, the verdict."""
    return "\n".join([*_head_lines(r), *_host_lines(r.ticks[-1]), *_process_lines(r), *_verdict_lines(r)])


def _head_lines(r: Reading) -> list[str]:
    """What was read (host, source, span), its notes and fault, then the cards' table."""
    last = r.ticks[-1]
    host = r.host.get("hostname") or "this host"
    span = (r.ticks[-1].ts - r.ticks[0].ts).total_seconds()
    lines = [f"{host} · {r.source} · {len(last.gpus)} GPU{'' if len(last.gpus) == 1 else 's'} · "
             f"{len(r.ticks)} ticks over {span:.0f} s at {r.interval_s:g} s · {last.ts.isoformat(timespec='seconds')}"]
    lines += [f"note: {m}" for m in r.status]
    if r.fault is not None:
        lines.append(r.fault["line"])
    if not r.gpu_available:
        if r.fault is None:  # a machine that never had a GPU: calm
            lines.append("no NVIDIA GPU/driver: host only (the verdict reads the host alone)")
    elif last.gpus:
        lines.append("GPU  UTIL SMACT        MEM  POWER  TEMP    CLOCK  FLAGS")
        lines += [_card_line(g) for g in last.gpus]
    return lines


def _host_lines(last: Tick) -> list[str]:
    """The CPU line and the three busiest disks."""
    cores = list(last.cpu_pct)
    n = len(cores)
    mem = (f"{short_bytes(last.host_mem_used_bytes)}/{short_bytes(last.host_mem_total_bytes)}"
           if last.host_mem_total_bytes else "n/a")
    hot = sum(1 for c in cores if c is not None and c >= 90)
    lines = [f"CPU {n} core{'' if n == 1 else 's'} avg {_pct(_mean(cores), 1).strip()} · {hot} ≥90% · "
             f"iowait {_pct(last.iowait_pct, 1).strip()} · mem {mem}"]
    for d in sorted(last.disks, key=lambda d: -(d.busy_pct or 0.0))[:3]:
        lines.append(f"DISK {d.name} busy {_pct(d.busy_pct, 1).strip()} await {_num(d.await_ms, '.1f')} ms")
    return lines


def _process_lines(r: Reading) -> list[str]:
    """The processes (the host's busiest when there is no card), and what the waiting ones are doing."""
    lines = []
    if r.procs:
        if r.host_only:  # no card: the GPU columns would be dashes
            lines.append("PROCESSES (busiest on the host, no GPU)")
            lines += _proc_lines(r)
        else:
            lines.append("PROCESSES")
            lines += _proc_lines(r)
            lines += [f"{pid:>7} inside: {rep.sentence()}" for pid, rep in r.inside.items()]
    if r.inside_note and any(not rep.share.samples for rep in r.inside.values()):
        lines.append(f"note: {r.inside_note}")
    return lines


def _verdict_lines(r: Reading) -> list[str]:
    """The verdict (the fault's, while the cards are faulty), its headroom, evidence and advice."""
    v = r.verdict if r.fault is None else _fault_verdict(r.fault)
    conf = f"  {format_confidence(v['confidence'])}" if v["confidence"] is not None else "  (no GPU)"
    gpus = f"  GPU {','.join(map(str, v['gpus']))}" if v["gpus"] else ""
    lines = [f"VERDICT {v['pattern']} · {v['bottleneck']}{gpus}{conf}"]
    if (hr := v.get("headroom")) is not None and hr["kind"] != "none":
        lines.append(f"  = {Headroom(**hr).line()}")
    lines += [f"  • {e}" for e in v["evidence"]]
    lines += [f"  → {a}" for a in v["advice"]]
    return lines


def _fault_verdict(fault: dict[str, Any]) -> dict[str, Any]:
    """The verdict while the cards are faulty: the fault, never a reading of waveforms that are not there (as
    ``export`` serves it: bottleneck ``gpu_fault``, the fault as its pattern)."""
    return {"pattern": fault["kind"], "bottleneck": GPU_FAULT, "gpus": fault["lost"], "confidence": 1.0,
            "collecting": False, "evidence": [fault["line"]], "advice": []}


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
    return EXIT_GPU_FAULT if reading.fault is not None else 0
