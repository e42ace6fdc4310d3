"""Summarise a py-spy ``--format raw`` profile (collapsed stacks): where the on-CPU samples are.

    python benchmarks/pyspy_top.py PROFILE.txt [--top 30]

Prints the share of samples per function by own time (the innermost frame) and by inclusive time (any
frame), and per top-level area (NVML calls, psutil, numpy, textual/rich, pyarrow, our own modules), so a
profile taken on the GPU machine can be read without a flame-graph viewer. Samples taken while a module is
being imported are counted apart as start-up and left out of the rest: the steady state is what is read.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

AREAS = (
    ("pynvml", "NVML (driver calls)"),
    ("psutil", "psutil"),
    ("numpy", "numpy"),
    ("textual", "textual"),
    ("rich", "rich"),
    ("pyarrow", "pyarrow"),
    ("prometheus_client", "prometheus_client"),
    ("gpu_triage", "gpu_triage (own code)"),
)


def _area(frame: str) -> str | None:
    for needle, name in AREAS:
        if needle in frame:
            return name
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    startup = 0
    for line in args.profile.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if any("_find_and_load" in f for f in frames):
            startup += count
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
        # the area of a sample: the innermost frame that belongs to a known area
        area = next((a for f in reversed(frames) if (a := _area(f))), "other (stdlib, interpreter)")
        areas[area] += count
    print(f"== {args.profile.name}: {total} on-CPU samples in the steady state ({startup} more while importing)")
    if not total:
        return
    print("-- by area (innermost known frame)")
    for name, count in areas.most_common():
        print(f"  {100 * count / total:5.1f} %  {name}")
    print(f"-- top {args.top} by own time")
    for frame, count in own.most_common(args.top):
        print(f"  {100 * count / total:5.1f} %  {frame[:150]}")
    print(f"-- top {args.top} inclusive")
    for frame, count in inclusive.most_common(args.top):
        print(f"  {100 * count / total:5.1f} %  {frame[:150]}")


if __name__ == "__main__":
    main()
