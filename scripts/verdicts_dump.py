"""Every real recording's verdicts, tick by tick, through every path, to compare two versions of the code.

    PYTHONPATH=app python scripts/verdicts_dump.py dump before.json      (on the old commit)
    PYTHONPATH=app python scripts/verdicts_dump.py dump after.json       (on the new one)
    python scripts/verdicts_dump.py compare before.json after.json

Per recording (tests/data and the packaged ones): the raw verdict of every tick as ``diagnose`` streams it,
the raw and shown verdict of every tick through the one judge, the verdict a recorder stores, and
``diagnose``'s segments. ``compare`` says how many ticks differ per path and which segments changed their
times and verdicts or only their words."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _words(v: Any) -> list[Any]:
    return [str(v.pattern), str(v.bottleneck), str(v.mechanism), [int(g) for g in v.gpus],
            round(float(v.confidence), 6), list(v.evidence), list(v.advice)]


def dump(out: str) -> None:
    from gpu_triage.config import Config
    from gpu_triage.offline.judge import judge, load_trace, verdicts
    from gpu_triage.offline.timeline import diagnose_trace
    from gpu_triage.trace.batches import iter_batches
    from gpu_triage.verdicts.judge import Judge

    cfg = Config()
    result: dict[str, Any] = {}
    files = [*sorted((ROOT / "tests" / "data").glob("*.parquet")),
             *sorted((ROOT / "app" / "gpu_triage" / "data").glob("*.parquet"))]
    for f in files:
        lt = load_trace(f)
        both = verdicts(lt.ticks, lt.interval_s, cfg.thresholds, cfg.window_s, lt.host.cpu_count)
        stamp = Judge(cfg.thresholds, cfg.window_s, lt.interval_s, lt.host.cpu_count)
        stored = [stamp.take(t, fresh=i == 0).stamped().verdict for i, t in enumerate(lt.ticks)]
        result[f.name] = {
            "judge_raw": [_words(r) for r in judge(iter_batches(f), cfg.thresholds, cfg.window_s, stride=1).raws],
            "verdicts_raw": [_words(r) for _, r, _ in both],
            "verdicts_shown": [_words(s) for _, _, s in both],
            "stamp": [None if v is None else [v.pattern, v.bottleneck, v.mechanism or "", v.confidence, list(v.gpus)]
                      for v in stored],
            "segments": [s.to_json_obj()
                         for s in diagnose_trace(iter_batches(f), cfg.thresholds, cfg.window_s).segments],
        }
        print(f.name, len(lt.ticks), file=sys.stderr)
    Path(out).write_text(json.dumps(result))


def compare(before: str, after: str) -> None:
    b, a = json.loads(Path(before).read_text()), json.loads(Path(after).read_text())
    for path in ("judge_raw", "verdicts_raw", "verdicts_shown", "stamp"):
        ticks = sum(len(b[f][path]) for f in b if f in a)
        differ = sum(sum(1 for p, q in zip(b[f][path], a[f][path], strict=False) if p != q)
                     + abs(len(b[f][path]) - len(a[f][path])) for f in b if f in a)
        print(f"{path}: {differ} of {ticks} ticks differ")
    keys = ("start", "end", "pattern", "bottleneck", "ticks", "confidence")
    moved = [f for f in b if f in a and [[s[k] for k in keys] for s in b[f]["segments"]]
             != [[s[k] for k in keys] for s in a[f]["segments"]]]
    pairs = [(p, q) for f in b if f in a and f not in moved
             for p, q in zip(b[f]["segments"], a[f]["segments"], strict=True)]
    advice = sum(1 for p, q in pairs if p["advice"] != q["advice"])
    evidence = sum(1 for p, q in pairs if p["advice"] == q["advice"] and p["evidence"] != q["evidence"])
    print(f"segments: {len(moved)} recordings' segments changed times or verdicts {moved}; of the others' "
          f"{len(pairs)} segments, {advice} changed their advice, {evidence} only their evidence")


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"] and len(sys.argv) == 3:
        dump(sys.argv[2])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
