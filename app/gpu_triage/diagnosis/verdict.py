"""What a verdict says, and how the engine composes one from the measurements and the cause."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.patterns import nanmean
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern
from gpu_triage.window import WindowView

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements
    from gpu_triage.diagnosis.mechanisms.base import Cause
    from gpu_triage.diagnosis.worth import Headroom

COLLECTING = Pattern.COLLECTING  # the pattern of a verdict given before the window can support one
START_UP = Mechanism.START_UP  # the mechanism of a verdict on a job that has run no kernel yet


@dataclass(slots=True)
class Finding:
    """What a verdict says, whoever says it: the engine for one tick (:class:`Verdict`), the offline reading
    for a stretch of a recording (``offline.Segment``). The dashboard shows a Verdict (``ui.verdict_pane.Shown``)."""

    pattern: str
    bottleneck: str
    gpus: list[int]
    confidence: float
    evidence: list[str]
    advice: list[str]
    period_s: float | None = None
    duty: float | None = None
    facts: dict[str, float] = field(default_factory=dict)
    evidence_facts: list[dict[str, Any]] = field(default_factory=list)  # beside each evidence sentence
    headroom: Headroom | None = None  # what removing the bottleneck can give back (diagnosis/headroom.py)

    @property
    def key(self) -> tuple[str, str]:
        return (self.pattern, self.bottleneck)


@dataclass(slots=True)
class Verdict(Finding):
    """The engine's reading of one window, with what only the live path uses."""

    per_gpu: dict[int, str] = field(default_factory=dict)
    destructive_advice: list[str] = field(default_factory=list)  # kill/free/restart: shown only when held
    mechanism: str = ""  # the rule that named the bottleneck (a Mechanism; "" before any rule ran)


# The confidences are set per rule (Thresholds.conf_*), not calibrated probabilities: words say how much to
# trust a reading without a percentage that reads like one. JSON keeps the number beside the word.
LIKELY_MIN, POSSIBLE_MIN = 0.7, 0.4


def confidence_word(confidence: float | None) -> str:
    """likely (a rule with its own evidence), possible (a weaker or indirect reading), unsure (below)."""
    if confidence is None or math.isnan(confidence):
        return "n/a"
    return "likely" if confidence >= LIKELY_MIN else "possible" if confidence >= POSSIBLE_MIN else "unsure"


def format_confidence(confidence: float) -> str:
    """The one way the dashboard, ``gpu-triage diagnose`` and ``snapshot`` write a confidence."""
    return f"confidence {confidence_word(confidence)}"


def no_data_verdict(reason: str, facts: dict[str, float] | None = None) -> Verdict:
    return Verdict(Pattern.IDLE, Bottleneck.NONE, [], 0.1, [reason], [], facts=facts or {},
                   evidence_facts=[Fact(reason).as_dict()])


def _per_card(util: np.ndarray, indexes: list[int]) -> str:
    """Each card's figure named by its card ("card 0 9 %, card 1 8 %"); with many cards the lowest and the
    highest (bare figures, "cards 9, 8, 8", would read as card numbers)."""
    got = sorted(((float(x), i) for x, i in zip(util, indexes, strict=False) if not math.isnan(x)), key=lambda v: v[1])
    if len(got) == 1:
        return f"card {got[0][1]}"
    if len(got) <= 4:
        return ", ".join(f"card {i} {x:.0f} %" for x, i in got)
    (lo, lo_i), (hi, hi_i) = min(got), max(got, key=lambda v: (v[0], -v[1]))
    if f"{lo:.0f}" == f"{hi:.0f}":
        return f"{len(got)} cards, each {lo:.0f} %"
    return f"{len(got)} cards, from {lo:.0f} % on card {lo_i} to {hi:.0f} % on card {hi_i}"


def collecting(view: WindowView, dt: float, th: Thresholds) -> Verdict:
    """No verdict yet: the window is shorter than warmup_s. The raw facts of the newest tick, no advice."""
    have = view.n * dt
    util = view.gpu["util_pct"][-1]
    sm = view.gpu["sm_active_pct"][-1]
    cpu = view.cpu[-1] if view.cpu.shape[1] else np.zeros(0)
    facts = [Fact(f"collecting ({have:.0f} s of {th.warmup_s:.0f} s): no verdict before the window can support one",
                  "collected_s", have)]
    u = float(nanmean(util))
    if not math.isnan(u):
        facts.append(Fact(f"GPU-Util now {u:.0f} % ({_per_card(util, view.gpu_indexes)})",
                          "gpu_util_pct", u, tuple(view.gpu_indexes)))
    s = float(nanmean(sm)) if sm.size else math.nan
    if not math.isnan(s):
        facts.append(Fact(f"SM activity now {s:.0f} %", "sm_active_pct", s))
    c = float(nanmean(cpu)) if cpu.size else math.nan
    if not math.isnan(c):
        facts.append(Fact(f"CPU now {c:.0f} % over {cpu.size} core{'' if cpu.size == 1 else 's'}", "cpu_busy_pct", c))
    return Verdict(COLLECTING, Bottleneck.NONE, [], 0.0, [x.text for x in facts], [], facts={"judged_s": have},
                   evidence_facts=[x.as_dict() for x in facts])


def pattern_fact(m: Measurements, pattern: Pattern) -> Fact | None:
    """The sentence that leads the evidence: what the pattern is, in figures."""
    sh = m.shape
    if pattern == Pattern.SAWTOOTH:
        if sh.period_s is not None:
            return Fact(f"sawtooth: period {sh.period_s:.1f} s, busy {sh.duty * 100:.0f} % of it"
                        if sh.duty is not None else f"sawtooth: period {sh.period_s:.1f} s", "period_s", sh.period_s)
        if sh.fast:
            return Fact(f"sawtooth faster than the tick ({m.dt:g} s): min near 0 and max near 100 inside "
                        "each tick while the mean sits between", "tick_s", m.dt)
        return Fact("GPU-Util swings between stalls and bursts without a steady period")
    if pattern == Pattern.SINGLE_CARD_BUSY:
        busy = sh.cards[0]
        idle_cards = [i for i, s in sh.shapes.items() if s.pattern == "idle"]
        return Fact(f"card {busy} busy ({sh.shapes[busy].mean:.0f} %) while {len(idle_cards)} "
                    "other cards idle", "gpu_util_mean_pct", sh.shapes[busy].mean, (busy,))
    if pattern == Pattern.IMBALANCED:
        means = {i: s.mean for i, s in sh.shapes.items()}
        hi_i = max(means, key=means.__getitem__)
        lo_i = min(means, key=means.__getitem__)
        return Fact(f"cards spread: card {hi_i} at {means[hi_i]:.0f} %, card {lo_i} at "
                    f"{means[lo_i]:.0f} %", "gpu_util_spread_pct", means[hi_i] - means[lo_i], (hi_i, lo_i))
    return None


def confidence(m: Measurements, cause: Cause) -> float:
    """The cause's confidence, less for a judged stretch too short to be sure of."""
    th, judged_ticks = m.th, m.view.n - m.start
    conf = cause.confidence
    if judged_ticks < 3:
        conf *= th.conf_tiny_factor
    elif judged_ticks * m.dt < th.short_judged_s:
        conf *= th.conf_short_factor
    # np.clip's Python layers only where it clips
    return float(conf) if 0.0 < conf < 1.0 else float(np.clip(conf, 0.0, 1.0))


def cards(m: Measurements, cause: Cause) -> list[int]:
    """The cards the verdict names: for memory held idle every card holding memory, else the cause's, else
    the pattern's."""
    if cause.bottleneck == Bottleneck.MEMORY_IDLE:
        hf = m.hf
        gpus = [hf.mem_card] if hf.mem_card is not None else m.shape.cards
        used, total = m.gpu["mem_used_bytes"], m.gpu["mem_total_bytes"]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.asarray(nanmean(used / total, axis=0))
        return [idx for j, idx in enumerate(m.view.gpu_indexes) if frac[j] >= m.th.mem_held_frac] or list(gpus)
    if cause.cards is not None:
        return list(cause.cards)
    return list(m.shape.cards)


def verdict_facts(m: Measurements) -> dict[str, float]:
    facts = m.hf.as_dict()
    sh, jd = m.shape, m.judged
    facts["period_s"] = float("nan") if sh.period_s is None else sh.period_s
    facts["duty"] = float("nan") if sh.duty is None else sh.duty
    facts["judged_s"] = (m.view.n - jd.start) * m.dt
    facts["regime_prior_run_s"] = jd.prior_run * m.dt
    facts["regime_fresh"] = 1.0 if jd.fresh else 0.0
    return facts
