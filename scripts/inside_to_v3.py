"""Trace v3 versions of the inside recordings: the v2 recording with the lab's real py-spy dumps in ``stacks``.

usage: PYTHONPATH=app python scripts/inside_to_v3.py [NAME ...]   (default: the four h200-inside recordings)

Reads ``tests/data/NAME.parquet`` (trace v2, by our recorder) and the dumps its labels name
(``tests/data/inside-stacks/*.jsonl.gz``, written beside the recording by lab/stack_sampler.py every 2 s), and
writes ``tests/data/NAME-stacks.parquet`` through the project's writer, with its labels beside it
(``NAME-stacks.labels.json``: the same windows, each with ``stacks_column`` saying where its stacks come
from). Each dump becomes one :class:`~gpu_triage.model.StackSample` on the tick whose interval holds the
moment it finished (``t`` + its ``took_s``: a tick carries the dumps finished during it, as the live sampler
records them):

- ``main``: the training process's dump, its phase by ``sources.phases.process_phase`` with the threads /proc
  gave at the same moment; its busy threads from the CPU ticks each thread used since the previous dump of the
  same process (≥ 20 % of a core, as ``sources.threads.busy_threads`` counts them); a failed dump (py-spy's
  return code not 0) is a sample with ``error`` set to py-spy's last line and phase ``unknown``;
- ``worker``: each DataLoader worker the sampler dumped (``children``), its phase by ``classify``; a child that
  is not a DataLoader worker (a helper, a service the job talks to) is not one.

Nothing is made up: the phases are the classifier's reading of the real stacks, and every other column is the
v2 recording's. The provenance goes into tests/data/inside-stacks/README.md.
"""

from __future__ import annotations

import gzip
import json
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from gpu_triage.model import StackSample, Tick
from gpu_triage.sources.phases import Phase, classify, process_phase
from gpu_triage.sources.stacks import StackDump, ThreadStack, parse_dump
from gpu_triage.sources.threads import ThreadInfo
from gpu_triage.trace.reader import open_trace
from gpu_triage.trace.writer import TraceWriter

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
NAMES = ("h200-inside-a-2s", "h200-inside-a-0.5s", "h200-inside-b-2s", "h200-inside-b-0.5s")
CLK_TCK = 100  # /proc's CPU ticks per second on the lab machine (Linux's USER_HZ)
BUSY_PCT = 20.0  # sources.threads.busy_threads' default
FRAMES = 3  # innermost frames kept, as "fn (file)" joined by " < "
WORKER_PHASES = (Phase.WORKER_BUSY, Phase.WORKER_WAITING, Phase.WORKER_IDLE)


def _threads(proc: dict[str, Any]) -> list[ThreadInfo]:
    return [ThreadInfo(t["tid"], t["comm"], t["state"], None if t["wchan"] in (None, "0") else t["wchan"], None)
            for t in proc["threads"]]


def _frames(stack: ThreadStack | None) -> str | None:
    if stack is None or not stack.frames:
        return None
    return " < ".join(f"{fr.name} ({fr.file.rsplit('/', 1)[-1]})" for fr in stack.frames[:FRAMES])


def _naming_thread(dump: StackDump, phase: Phase) -> ThreadStack | None:
    """The thread whose stack named ``phase``: the main thread, or the busy one it waits on (process_phase)."""
    main = dump.main
    if main is None or main.active:
        return main
    for th in dump.threads:
        if th.tid != dump.pid and th.active and classify(th) is phase:
            return th
    return main


def _busy(prev: dict[str, Any] | None, rec: dict[str, Any]) -> int | None:
    if prev is None or not rec["procs"] or not prev["procs"]:
        return None
    secs = rec["t"] - prev["t"]
    before = {t["tid"]: t["utime"] + t["stime"] for t in prev["procs"][0]["threads"]}
    used = {t["tid"]: (t["utime"] + t["stime"] - before[t["tid"]]) / CLK_TCK / secs * 100
            for t in rec["procs"][0]["threads"] if t["tid"] in before}
    return sum(1 for pct in used.values() if pct >= BUSY_PCT)


def _error(rec: dict[str, Any]) -> str:
    lines = [ln.strip() for ln in (rec.get("err") or "").splitlines() if ln.strip() and not ln.startswith(" ")]
    first = next((ln for ln in (rec.get("err") or "").splitlines() if "Failed" in ln or "Check" in ln), None)
    text = (first or (lines[0] if lines else "")).strip().lstrip("0123456789: ")
    return f"py-spy exited {rec.get('rc')}: {text}" if text else f"py-spy exited {rec.get('rc')}"


def samples(rec: dict[str, Any], prev: dict[str, Any] | None) -> list[StackSample]:
    """The StackSamples of one sampler record: the main process's, then its workers'."""
    pid, n_threads = rec["pid"], len(rec["procs"][0]["threads"]) if rec["procs"] else None
    if rec.get("dump") is None:
        return [StackSample(pid, "main", Phase.UNKNOWN.value, None, None, None, n_threads, _error(rec))]
    dump = parse_dump(pid, rec["t"], rec["took_s"], json.dumps(rec["dump"]))
    phase = process_phase(dump, _threads(rec["procs"][0]) if rec["procs"] else None)
    out = [StackSample(pid, "main", phase.value, None, _frames(_naming_thread(dump, phase)), _busy(prev, rec),
                       n_threads, dump.error)]
    for child in rec.get("children") or []:
        if child.get("dump") is None:
            continue
        cd = parse_dump(child["pid"], rec["t"], child.get("took_s", 0.0), json.dumps(child["dump"]))
        cphase = classify(cd.main)
        if cphase in WORKER_PHASES:
            out.append(StackSample(child["pid"], "worker", cphase.value, pid, _frames(cd.main), None,
                                   len(cd.threads), None))
    return out


def _records(labels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = []
    for path in sorted({lab["stacks"] for lab in labels if lab.get("stacks")}):
        with gzip.open(DATA / path, "rt") as f:
            recs += [json.loads(line) for line in f]
    return sorted(recs, key=lambda r: r["t"])


def convert(name: str) -> tuple[Path, int, int]:
    """Write NAME-stacks.parquet; (its path, dumps placed, ticks holding one)."""
    tf = open_trace(DATA / f"{name}.parquet")
    ticks: list[Tick] = list(tf.ticks(0, tf.n))
    ends = [t.ts.timestamp() for t in ticks]
    labels = json.loads((DATA / f"{name}.labels.json").read_text())
    per_tick: dict[int, list[StackSample]] = {}
    last: dict[int, dict[str, Any]] = {}
    placed = 0
    for rec in _records(labels):
        done = rec["t"] + (rec.get("took_s") or 0.0)
        i = next((k for k, e in enumerate(ends) if e >= done), None)
        if i is None or (i > 0 and ends[i - 1] >= done) or (i == 0 and done < ends[0] - tf.interval_s):
            continue
        per_tick.setdefault(i, []).extend(samples(rec, last.get(rec["pid"])))
        if rec.get("dump") is not None:
            last[rec["pid"]] = rec
        placed += 1
    out = DATA / f"{name}-stacks.parquet"
    writer = TraceWriter(out, tf.host, tf.interval_s, overwrite=True, convert_in_child=False)
    for k, t in enumerate(ticks):
        writer.append(replace(t, stacks=per_tick.get(k, [])))
    writer.close()
    note = (f"the stacks column holds the dumps of {{stacks}} (lab/stack_sampler.py, every 2 s), each on the tick "
            f"its dump finished in, classified by sources/phases.py: scripts/inside_to_v3.py from {name}.parquet")
    for lab in labels:
        lab["stacks_column"] = note.format(stacks=lab["stacks"])
    (DATA / f"{name}-stacks.labels.json").write_text(json.dumps(labels, indent=1, ensure_ascii=False) + "\n")
    return out, placed, len(per_tick)


def main(argv: list[str]) -> int:
    for name in argv or NAMES:
        out, placed, ticks = convert(name)
        print(f"{out.name}: {placed} dumps on {ticks} ticks ({datetime.now():%Y-%m-%d})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
