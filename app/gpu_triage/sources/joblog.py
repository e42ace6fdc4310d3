"""Read a training job's progress lines (the lines :mod:`gpu_triage.sources.logfollower` follows).

:func:`parse_line` turns one line into a :class:`Reading` with the first format that recognises it
(the user's regex from the config first, then the built-in formats in :data:`FORMATS`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_triage.model import job_figure

MAX_PARSE_CHARS = 8192  # longer lines are kept out of the parsers (the log's longest real progress lines: < 1 KiB)
PARSE_BUDGET_CHARS = 512 * 1024  # characters parsed per tick at most, newest line first (see LogTracker)
MAX_USER_REGEX = 4096  # characters of a [job] log_regex


@dataclass(slots=True)
class Reading:
    """What one log line says about progress. ``step``/``total``: the job's own counter and its end."""

    fmt: str
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    step_time_s: float | None = None
    data_time_s: float | None = None  # time of this step spent loading data (ImageNet example's "Data")
    step: int | None = None
    total: int | None = None
    batch: int | None = None  # samples per step the line itself says (Megatron's global batch size)
    loss: float | None = None
    epoch: float | None = None
    avg_step_time_s: float | None = None  # the job's running means since the epoch began (ImageNet example's
    avg_data_time_s: float | None = None  # "( 0.401)"): two of them give exact figures for the span between


# -- formats ------------------------------------------------------------------------------------------
# Every pattern takes time linear in the line: each line is someone else's text (a job can print anything:
# 8192 '1's through a tqdm pattern that backtracks take seconds), Python's engine backtracks, and the
# sampler parses on its tick. Three rules keep them linear: a number has one way to match
# ("[0-9]*\.?[0-9]+" has n ways for n digits, n² with search), a pattern that starts with a repeat starts
# only where that repeat begins (the (?<![0-9]) lookbehinds: without them search restarts inside every run
# of digits), and no ".*" between two parts (a part found once, the next searched from there).
# tests/test_joblog.py checks the scaling on the inputs that break each rule; benchmarks/bench_joblog.py
# prints the time.
_NUM = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
_SAMPLE_UNITS = {"samples", "sample", "img", "imgs", "images", "image", "ex", "examples", "example", "seq",
                 "seqs", "sequences", "tok", "tokens"}

# tqdm: "  3%|▎         | 10/313 [00:01<00:30,  9.87it/s]" or "[00:05<01:00,  1.23s/it, loss=0.5]"; without a
# total: "train: 123it [00:10, 12.30it/s]"
_TQDM = re.compile(
    rf"(?<![0-9])(?P<n>[0-9]+)(?:/(?P<total>[0-9]+))?(?:[A-Za-z]+)?\s*\[(?P<elapsed>[\d:]+)(?:<(?P<left>[\d:?]+))?,\s*"
    rf"(?:(?P<rate>{_NUM})(?P<prefix>[kKMG]?)(?P<unit>[A-Za-z]+)/s|(?P<inv>{_NUM})s/(?P<iunit>[A-Za-z]+))"
)
# rich progress (Lightning's RichProgressBar): "Epoch 0/9 ━━━━━━━ 450/1000 0:00:10 • 0:00:12 44.12it/s loss: 0.1";
# written to a file (not a terminal) Rich prints only its final frame, wrapped: the time left may go to the
# next line ("Epoch 15/999 ━━━━   84/300 0:00:00 •        228.96it/s train_loss:", real lightning 2.6.6 log)
_RICH = re.compile(rf"(?<![0-9])(?P<n>[0-9]+)/(?P<total>[0-9]+)\s+[\d:]+\s+•\s+(?:[\d:-]+\s+)?(?P<rate>{_NUM})it/s")
# Lightning's tqdm bar carries its logger's version in the postfix ("v_num=0"); a bare "Epoch 0:" is any tqdm desc
_LIGHTNING_POSTFIX = re.compile(r"[\s,]v_num=")
_POSTFIX_LOSS = re.compile(rf"(?:^|[\s,])(?:train_)?loss(?:_step)?[=:]\s*(?P<loss>{_NUM})")
# PyTorch ImageNet example: "Epoch: [0][ 10/5005]\tTime  0.312 ( 0.401)\tData  0.002 ( 0.089)\tLoss ..."
_IMAGENET = re.compile(
    rf"Epoch: \[(?P<epoch>\d+)\]\[\s*(?P<n>\d+)/(?P<total>\d+)\]"
    rf"\s+Time\s+(?P<time>{_NUM})\s*\(\s*(?P<avg_time>{_NUM})\)"
    rf"\s+Data\s+(?P<data>{_NUM})\s*\(\s*(?P<avg_data>{_NUM})\)(?:\s+Loss\s+(?P<loss>{_NUM}))?"
)
# Megatron-LM: " iteration       10/    1000 | consumed samples: 640 | elapsed time per iteration (ms): 312.5 |
#   learning rate: ... | global batch size:    64 | lm loss: 7.1E+00 | ..."
_MEGATRON = re.compile(r"iteration\s+(?P<n>\d+)\s*/\s*(?P<total>\d+)\s*\|")
_MEG_TIME = re.compile(rf"elapsed time per iteration \(ms\):\s*(?P<ms>{_NUM})")
_MEG_BATCH = re.compile(r"global batch size:\s*(?P<gbs>\d+)")
_MEG_LOSS = re.compile(rf"lm loss:\s*(?P<loss>{_NUM})")
# DeepSpeed ThroughputTimer: "epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=123.4,
#   CurrSamplesPerSec=125.1, MemAllocated=..."; and its "samples/sec: X" in wall-clock breakdowns
_DS_GLOBAL_STEP = re.compile(r"global_step=(?P<n>[0-9]+)")
_DS_AVG = re.compile(rf"RunningAvgSamplesPerSec=(?P<avg>{_NUM})")
_DS_CUR = re.compile(rf"CurrSamplesPerSec=(?P<cur>{_NUM})")
_DS_SAMPLES = re.compile(rf"samples/sec:\s*(?P<sps>{_NUM})")
_DS_STEP = re.compile(r"\bsteps?[:=]\s*(?P<n>\d+)")
# Hugging Face Trainer: "{'loss': 0.6931, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.5}" and the
# end-of-training "{'train_runtime': 10.2, 'train_samples_per_second': 98.0, 'train_steps_per_second': 12.3, ...}"
_DICT_START = re.compile(r"\{'[a-z_]+': ")  # to the line's last "}": found by rfind, not by ".*\}"


def _f(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_tqdm(line: str) -> Reading | None:
    m = _TQDM.search(line)
    if not m:
        return None
    fmt = "lightning" if _LIGHTNING_POSTFIX.search(line, m.end()) else "tqdm"
    r = Reading(fmt, step=int(m["n"]), total=int(m["total"]) if m["total"] else None)
    if m["rate"] is not None:
        value = float(m["rate"]) * _PREFIX[m["prefix"]]
        if m["unit"] in _SAMPLE_UNITS:
            r.samples_per_s = value
        else:
            r.steps_per_s = value
    else:
        inv = float(m["inv"])
        if inv <= 0:
            return None
        if m["iunit"] in _SAMPLE_UNITS:
            r.samples_per_s = 1.0 / inv
        else:
            r.step_time_s = inv
            r.steps_per_s = 1.0 / inv
    lm = _POSTFIX_LOSS.search(line[m.end():])
    if lm:
        r.loss = _f(lm["loss"])
    return r


def parse_rich(line: str) -> Reading | None:
    m = _RICH.search(line)
    if not m:
        return None
    r = Reading("lightning", steps_per_s=float(m["rate"]), step=int(m["n"]), total=int(m["total"]))
    lm = _POSTFIX_LOSS.search(line[m.end():])
    if lm:
        r.loss = _f(lm["loss"])
    return r


def parse_imagenet(line: str) -> Reading | None:
    m = _IMAGENET.search(line)
    if not m:
        return None
    t = float(m["time"])
    return Reading(
        "imagenet",
        step_time_s=t if t > 0 else None,
        steps_per_s=1.0 / t if t > 0 else None,
        data_time_s=float(m["data"]),
        step=int(m["n"]),
        total=int(m["total"]),
        loss=_f(m["loss"]),
        epoch=float(m["epoch"]),
        avg_step_time_s=float(m["avg_time"]),
        avg_data_time_s=float(m["avg_data"]),
    )


def parse_megatron(line: str) -> Reading | None:
    m = _MEGATRON.search(line)
    if not m:
        return None
    tm = _MEG_TIME.search(line)
    if not tm:
        return None
    t = float(tm["ms"]) / 1000.0
    bm = _MEG_BATCH.search(line)
    lm = _MEG_LOSS.search(line)
    r = Reading("megatron", step_time_s=t if t > 0 else None, steps_per_s=1.0 / t if t > 0 else None,
                step=int(m["n"]), total=int(m["total"]), loss=_f(lm["loss"]) if lm else None)
    if bm:
        r.batch = int(bm["gbs"])
        if t > 0:
            r.samples_per_s = r.batch / t
    return r


def parse_deepspeed(line: str) -> Reading | None:
    m = _DS_GLOBAL_STEP.search(line)
    avg = _DS_AVG.search(line, m.end()) if m else None
    cur = _DS_CUR.search(line, avg.end()) if avg else None
    if m and cur:
        return Reading("deepspeed", samples_per_s=float(cur["cur"]), step=int(m["n"]))
    m2 = _DS_SAMPLES.search(line)
    if m2:
        sm = _DS_STEP.search(line)
        return Reading("deepspeed", samples_per_s=float(m2["sps"]), step=int(sm["n"]) if sm else None)
    return None


def parse_hf_trainer(line: str) -> Reading | None:
    m = _DICT_START.search(line)
    end = line.rfind("}") + 1 if m else 0
    if not m or end <= m.end() or end - m.start() > 4096:
        return None
    try:
        obj = ast.literal_eval(line[m.start() : end])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    keys = ("loss", "train_loss", "train_samples_per_second", "train_steps_per_second", "epoch")
    if not any(k in obj for k in keys):
        return None

    def num(key: str) -> float | None:
        v = obj.get(key)
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            return float(v)
        return _f(v) if isinstance(v, str) else None

    return Reading(
        "hf_trainer",
        samples_per_s=num("train_samples_per_second"),
        steps_per_s=num("train_steps_per_second"),
        loss=num("loss") if "loss" in obj else num("train_loss"),
        epoch=num("epoch"),
    )


Parser = Callable[[str], "Reading | None"]

# (name, parser) in the order they are tried: the most specific first. tqdm's covers Lightning's bar too
# (Lightning draws with tqdm; a bar starting "Epoch N:" is reported as lightning).
FORMATS: tuple[tuple[str, Parser], ...] = (
    ("imagenet", parse_imagenet),
    ("megatron", parse_megatron),
    ("deepspeed", parse_deepspeed),
    ("hf_trainer", parse_hf_trainer),
    ("lightning-rich", parse_rich),
    ("tqdm", parse_tqdm),
)
FORMAT_NAMES = ("user regex", "imagenet", "megatron", "deepspeed", "hf_trainer", "lightning", "tqdm")

USER_GROUPS = ("samples_per_s", "steps_per_s", "step_time_s", "data_time_s", "step", "total", "loss", "epoch")


class UserRegex(Protocol):
    """A compiled ``[job] log_regex`` (RE2's; the built-in patterns use Python's ``re``)."""

    groupindex: Mapping[str, int]

    def search(self, text: str) -> Any: ...


def compile_user_regex(pattern: str) -> UserRegex:
    """The config's ``[job] log_regex``: a regex whose named groups are among USER_GROUPS, compiled by RE2.

    RE2 matches in time linear in the line, whatever the pattern: with Python's engine a pattern such as
    ``(a+)+$`` takes exponential time on a line the job prints, and the sampler would hang on it. The price
    is RE2's syntax: Python's, less lookaround and backreferences (the features that cannot be linear);
    ``\\d`` and ``\\s`` are ASCII (a progress line's digits and spaces are). A pattern RE2 refuses is a
    config error that says so."""
    import re2  # noqa: PLC0415 - only when a log_regex is set

    options = re2.Options()
    options.log_errors = False  # its own message went to stderr, under the dashboard
    if len(pattern) > MAX_USER_REGEX:
        raise ValueError(f"is {len(pattern)} characters long: at most {MAX_USER_REGEX}")
    try:
        rx: UserRegex = re2.compile(pattern, options)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"{why}: the pattern is matched by RE2 (linear time), which has no lookaround or backreferences"
        ) from exc
    names = set(rx.groupindex)
    unknown = names - set(USER_GROUPS)
    if unknown:
        raise ValueError(f"unknown group name(s) {', '.join(sorted(unknown))}: use {', '.join(USER_GROUPS)}")
    if not names & {"samples_per_s", "steps_per_s", "step_time_s", "step"}:
        raise ValueError("needs one of the groups samples_per_s, steps_per_s, step_time_s or step")
    return rx


def parse_user(rx: UserRegex, line: str) -> Reading | None:
    m = rx.search(line)
    if not m:
        return None
    g = m.groupdict()
    st = _f(g.get("step_time_s"))
    step = g.get("step")
    total = g.get("total")
    r = Reading(
        "user regex",
        samples_per_s=_f(g.get("samples_per_s")),
        steps_per_s=_f(g.get("steps_per_s")) or (1.0 / st if st else None),
        step_time_s=st,
        data_time_s=_f(g.get("data_time_s")),
        step=int(step) if step and step.isdigit() else None,
        total=int(total) if total and total.isdigit() else None,
        loss=_f(g.get("loss")),
        epoch=_f(g.get("epoch")),
    )
    if r.samples_per_s is None and r.steps_per_s is None and r.step is None:
        return None
    return r


def parse_line(line: str, user: UserRegex | None = None) -> Reading | None:
    """The first format that recognises ``line``, or None. A line longer than MAX_PARSE_CHARS is not
    parsed: no progress line is that long, and parsing costs time proportional to the line. Its rates and
    times are measured figures: one that is no finite number within its physical range (a rate of 330
    digits reads as infinity) is left out (:func:`measured`)."""
    if len(line) > MAX_PARSE_CHARS:
        return None
    if user is not None:
        r = parse_user(user, line)
        if r is not None:
            return measured(r)
    for _name, parser in FORMATS:
        r = parser(line)
        if r is not None:
            return measured(r)
    return None


# each timed figure of a Reading, and the trace field whose physical range it has
_TIMED = (("samples_per_s", "samples_per_s"), ("steps_per_s", "steps_per_s"), ("step_time_s", "step_time_s"),
          ("data_time_s", "step_time_s"), ("avg_step_time_s", "step_time_s"), ("avg_data_time_s", "step_time_s"))


def measured(r: Reading) -> Reading:
    """``r`` with each rate or time that is not a finite number within its physical range
    (:data:`~gpu_triage.model.JOB_RANGES`) set to None."""
    for attr, name in _TIMED:
        setattr(r, attr, job_figure(name, getattr(r, attr)))
    return r
