"""The gain BEFORE's verdict promised beside the gain the fix measured (``compare BEFORE AFTER``).

BEFORE's promise is the headroom of its main bottleneck (the one that held most of its judged time, "none"
aside): the median of the bounds its raw verdicts with that bottleneck gave (diagnosis/headroom.py), one
verdict's bound being one judged moment's. The measured gain is AFTER over BEFORE in samples/s from
the job's own clock where both recordings have it, else in busy GPU time: the cards' mean SM activity where
both report it, else their mean GPU-Util. A measured gain above the bound is a finding, said with what it
means: the fix changed more than the bottleneck, or the bound read its evidence short; the BEFORE run's own
spread of samples/s says whether it lies inside the noise.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

# a measured gain above the bound by less than this share reads as at the bound: the figures are shown to 0.01x
_ROUNDING = 0.005


def promised(segments: list[Any], bounds: list[tuple[str, Any]]) -> dict[str, Any] | None:
    """BEFORE's promise from its timeline's segments (which bottleneck held most of its time) and its raw
    verdicts' bounds (``Timeline.bounds``: the median of that bottleneck's); None without a segment."""
    if not segments:
        return None
    held: dict[str, float] = {}
    for s in segments:
        if s.bottleneck != "none":
            held[s.bottleneck] = held.get(s.bottleneck, 0.0) + max((s.end - s.start).total_seconds(), 0.0)
    if not held:
        return {"bottleneck": "none", "kind": "none", "factor": None, "unit": None, "basis": "no bottleneck named",
                "assumes": "", "share_of_time_pct": None, "verdicts": 0}
    total = sum(max((s.end - s.start).total_seconds(), 0.0) for s in segments)
    main = max(held, key=lambda b: held[b])
    share = 100.0 * held[main] / total if total > 0 else None
    own = sorted((hr for b, hr in bounds if b == main), key=lambda hr: hr.factor)
    if not own:
        hr = next((s.headroom for s in reversed(segments) if s.bottleneck == main and s.headroom is not None), None)
        return {"bottleneck": main, "kind": hr.kind if hr else "lost", "factor": None, "unit": None,
                "basis": hr.basis if hr else "no headroom", "assumes": "", "share_of_time_pct": share, "verdicts": 0}
    at = own[(len(own) - 1) // 2]  # the median verdict (the lower one of an even count): its words with its figure
    return {"bottleneck": main, "kind": "bound", "factor": statistics.median(hr.factor for hr in own),
            "unit": at.unit, "basis": at.basis, "assumes": at.assumes, "share_of_time_pct": share,
            "verdicts": len(own)}


def _rate_spread(per_tick: list[float | None]) -> float | None:
    """The BEFORE run's own spread of samples/s over the ticks it progressed: interquartile range / median."""
    rates = [float(r) for r in per_tick if r is not None and math.isfinite(r) and r > 0]
    if len(rates) < 4:
        return None
    q1, q2, q3 = statistics.quantiles(rates, n=4)
    return (q3 - q1) / q2 if q2 > 0 else None


def measured(job: dict[str, Any] | None, overall: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """AFTER over BEFORE: samples/s where both runs have the job's clock, else busy GPU time; None when
    neither can be read."""
    rate = (job or {}).get("metrics", {}).get("samples_per_s", {})
    if rate.get("before") and rate.get("after"):
        return {"gain": rate["after"] / rate["before"], "unit": "samples/s", "before": rate["before"],
                "after": rate["after"], "from": "the job's clock"}
    for key, what in (("sm_active_mean_pct", "SM activity"), ("util_mean_pct", "GPU-Util")):
        c = overall.get(key, {})
        if c.get("before") and c.get("after") is not None:
            return {"gain": c["after"] / c["before"], "unit": "GPU-busy time", "before": c["before"],
                    "after": c["after"], "from": f"the cards' mean {what}"}
    return None


def check(timeline: Any, job: dict[str, Any] | None, overall: dict[str, dict[str, Any]],
          before_rates: list[float | None]) -> dict[str, Any] | None:
    """The ``prediction`` block of a comparison: what BEFORE promised, what was measured, and whether the
    measured gain beat the bound (with the BEFORE run's own spread of samples/s)."""
    p = promised(timeline.segments, timeline.bounds)
    if p is None:
        return None
    m = measured(job, overall)
    spread = _rate_spread(before_rates) if m is not None and m["unit"] == "samples/s" else None
    beaten = within = None
    if m is not None and p["factor"] is not None:
        beaten = m["gain"] > p["factor"] * (1.0 + _ROUNDING)
        within = m["gain"] <= p["factor"] * (1.0 + spread) if beaten and spread is not None else None
    cards = (job or {}).get("cards") or {}
    moved = cards.get("before") and cards.get("after") and cards["before"] != cards["after"]
    return {"promised": p, "measured": m, "beaten": beaten, "noise_pct": None if spread is None else 100 * spread,
            "within_noise": within,
            "cards": {"before": cards["before"], "after": cards["after"]} if moved else None}


def render(pred: dict[str, Any] | None) -> list[str]:
    """The text block: the promise, the measurement, and the finding when the bound was beaten."""
    if pred is None:
        return []
    p, m = pred["promised"], pred["measured"]
    lines = ["", f"the fix against BEFORE's promise (its main bottleneck: {p['bottleneck']}"
             + (f", {p['share_of_time_pct']:.0f} % of its time)" if p["share_of_time_pct"] is not None else ")")]
    if p["kind"] == "bound":
        lines.append(f"  promised  up to {p['factor']:.2f}x {p['unit']} ({p['basis']}; assumes {p['assumes']})")
    elif p["kind"] == "none":
        lines.append("  promised  nothing to win: no bottleneck named")
    else:
        lines.append(f"  promised  no bound: {p['basis']}")
    if m is None:
        lines.append("  measured  n/a (neither the job's clock nor the cards' busy time on both sides)")
        return lines
    lines.append(f"  measured  {m['gain']:.2f}x {m['unit']} ({m['from']}: {_num(m['before'])} -> {_num(m['after'])})")
    if pred["beaten"]:
        noise = pred["noise_pct"]
        inside = ("inside BEFORE's own spread of samples/s" if pred["within_noise"]
                  else "beyond BEFORE's own spread of samples/s" if noise is not None else "")
        lines.append(f"  ! the measured gain beats the bound by {100 * (m['gain'] / p['factor'] - 1):.0f} %"
                     + (f", {inside} ({noise:.0f} %)" if inside else "")
                     + ": the bound assumed " + (p["assumes"] or "the bottleneck alone changed")
                     + "; a gain past it means the fix changed more than that bottleneck (the work of a step, the "
                     "batch, the cards) or the evidence under the bound read the wait short"
                     + (f"; here the cards changed too ({pred['cards']['before']} -> {pred['cards']['after']})"
                        if pred.get("cards") else ""))
    elif pred["beaten"] is False:
        lines.append(f"  within the bound (the measured gain is {100 * m['gain'] / p['factor']:.0f} % of it)")
    return lines


def _num(x: float) -> str:
    return f"{x:,.1f}" if abs(x) >= 10 else f"{x:.3f}"
