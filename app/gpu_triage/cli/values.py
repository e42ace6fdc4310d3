"""The argument types of the ``gpu-triage`` command line: each checks a value where it is typed and says in
one line what to give instead (argparse prints it and exits 2)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from gpu_triage.config import BATCH_SIZE_RANGE, INTERVAL_RANGE_S, WINDOW_RANGE_S

SPEED_RANGE = (0.01, 1000.0)  # times real time: slower is a frozen screen, faster than any tick can be drawn


def speed(text: str) -> float:
    v = positive_float(text)
    lo, hi = SPEED_RANGE
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"{text}: give {lo:g} to {hi:g} (times real time)")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    if not math.isfinite(v):  # --duration inf: an OverflowError further on
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number")
    return v


def seconds_between(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse type for --interval / --window: the config file's own bounds. --interval 1e-9 or
    --window 1e12 asked numpy for terabytes of ring buffer (a MemoryError traceback)."""

    def parse(text: str) -> float:
        v = positive_float(text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text} s: give {lo:g} to {hi:g} seconds")
        return v

    return parse


interval = seconds_between(*INTERVAL_RANGE_S)


window = seconds_between(*WINDOW_RANGE_S)


def gpu_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= v <= 16:
        raise argparse.ArgumentTypeError(f"{v} cards: the simulated server has 1 to 16")
    return v


def seed(text: str) -> int:
    """A simulation seed: a whole number from 0 (numpy refuses negative seeds with a traceback)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= v < 2**64:
        raise argparse.ArgumentTypeError(f"{v}: give a seed from 0 to 2**64 - 1")
    return v


def resolution(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (v >= 0 and v < 1e9):
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 (every tick) or a positive number of seconds")
    return v


def batch_size(text: str) -> int:
    lo, hi = BATCH_SIZE_RANGE
    v = positive_int(text, f"give the samples per step, {lo} to {hi:,}")
    if v > hi:
        raise argparse.ArgumentTypeError(f"{v}: give the samples per step, {lo} to {hi:,}")
    return v


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, e.g. 0,2,4") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers 0 or more, separated by commas")
    return values


def bool_list(text: str) -> list[bool]:
    words = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
    try:
        return [words[v.strip().lower()] for v in text.split(",") if v.strip()] or [False]
    except KeyError:
        raise argparse.ArgumentTypeError(f"{text!r}: give on, off or on,off") from None


def positive_int(text: str, hint: str = "give 1 or more") -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v}: {hint}")
    return v


def keep_days(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of days") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v}: give 1 or more days (0 or fewer would remove today's data)")
    return v
