"""The shown verdict never contradicts the numbers on the same screen.

Replays every real recording and every simulated scenario (alone, and one after another so that the verdict
has to change) tick by tick, as the dashboard does (``offline.verdicts``: window, engine, tracker), and reads
the figures the screen shows from the *ticks themselves* (GPU-Util and memory on the card lines, the cores,
iowait, the training process's CPU), not from the diagnosis. A shown fact whose figure is far from every
reading of the same figure in the last ``hold_s`` of ticks (a sawtooth: over its cycle) is a contradiction:
"card 0 holds 55 % of its memory" beside 1.7G/140G, "CPU 70 % busy" beside cores at 8 %, "the training process
holds 100 % of a core while the GPU waits" beside an idle process and idle cards.

The margins here are wider than present.py's: this test catches what a reader would call a contradiction,
the rule in present.py draws the line.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest

from gpu_triage.config import Config
from gpu_triage.data import H200_TRACE_05S, H200_TRACE_2S
from gpu_triage.diagnosis.engine import COLLECTING, Verdict
from gpu_triage.diagnosis.present import CHANGING
from gpu_triage.model import Tick
from gpu_triage.offline.judge import verdicts
from gpu_triage.scenarios import SCENARIOS
from gpu_triage.sources.sim import SimulatedSource
from tests import real_readings as rr

DATA = Path(__file__).parent / "data"
REAL = {p.name: p for p in [H200_TRACE_2S, H200_TRACE_05S, *sorted(DATA.glob("*.parquet"))]}
TH = Config().thresholds
T0 = datetime(2026, 1, 1, tzinfo=UTC)
Run = list[tuple[Tick, Verdict, Verdict]]


def _real(name: str) -> tuple[float, Run]:
    return rr.replay(REAL[name])


def _sim(scenario: str) -> Run:
    return rr.simulated(scenario)


@cache
def _schedule() -> Run:
    """Every scenario for 40 s, one after the other: each change is one the shown verdict has to follow."""
    phases = [(s, 40.0) for s in [*SCENARIOS, "healthy"]]
    src = SimulatedSource.from_schedule(phases, gpus=4, cores=16, seed=5, interval_s=2.0, start=T0)
    return verdicts([src.sample() for _ in range(int(sum(p[1] for p in phases) / 2.0))], 2.0, TH,
                    Config().window_s, 16)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def _cards(tick: Tick, cards: list[int]) -> list:
    return [g for g in tick.gpus if not cards or g.index in cards] or tick.gpus


def _readings(metric: str, ticks: list[Tick], cards: list[int]) -> list[float]:
    """The screen's reading of ``metric`` on each tick (NaN where it shows none)."""
    out: list[float] = []
    for t in ticks:
        gs = _cards(t, cards)
        if metric == "gpu_util_mean_pct":
            out += [g.util_pct for g in gs if g.util_pct is not None]
        elif metric == "gpu_mem_used_frac":
            out += [g.mem_used_bytes / g.mem_total_bytes * 100 for g in gs if g.mem_used_bytes is not None
                    and g.mem_total_bytes]
        elif metric == "cpu_busy_pct":
            out.append(_mean(t.cpu_pct))
        elif metric == "iowait_pct":
            out.append(math.nan if t.iowait_pct is None else t.iowait_pct)
        elif metric == "main_process_cpu_pct":
            cpu = [p.cpu_pct for p in t.procs if p.cpu_pct is not None]
            out.append(max(cpu) if cpu else math.nan)
    return [x for x in out if not math.isnan(x)]


# metric -> (margin, read only where the cards idle: the fact is "while the GPU waits")
MARGINS = {"gpu_util_mean_pct": (25.0, False), "gpu_mem_used_frac": (10.0, False), "cpu_busy_pct": (30.0, True),
           "iowait_pct": (25.0, True), "main_process_cpu_pct": (40.0, True)}


def _screen(run: Run, i: int, interval_s: float, shown: Verdict) -> list[Tick]:
    """The ticks whose numbers are on screen beside tick ``i``'s verdict: the last hold_s (3 ticks at least),
    a sawtooth's whole cycle (its judged stretch when it has no period) unless it is faster than the tick."""
    span = TH.hold_s
    fast = any(f["metric"] == "tick_s" for f in shown.evidence_facts)
    if shown.pattern == "sawtooth" and not fast:
        span = max(span, min(shown.period_s or shown.facts.get("judged_s") or TH.recent_s, TH.recent_s))
    n = max(3, round(span / interval_s))
    return [t for t, _r, _s in run[max(0, i + 1 - n): i + 1]]


def _contradictions(run: Run, interval_s: float) -> list[str]:
    bad: list[str] = []
    for i, (_tick, _raw, shown) in enumerate(run):
        if shown.pattern == COLLECTING:
            continue
        ticks = _screen(run, i, interval_s, shown)
        for f in shown.evidence_facts:
            if f["metric"] not in MARGINS or f["value"] is None:
                continue
            margin, waits = MARGINS[f["metric"]]
            seen = [t for t in ticks if _mean([g.util_pct for g in t.gpus]) < TH.stall_util_pct] if waits else ticks
            got = _readings(f["metric"], seen, f["cards"])
            value = f["value"] * (100 if f["metric"] == "gpu_mem_used_frac" else 1)
            if got and not min(got) - margin <= value <= max(got) + margin:
                bad.append(f"tick {i + 1}: {shown.pattern}/{shown.bottleneck} says {f['text']!r} while the screen "
                           f"reads {min(got):.0f}..{max(got):.0f}")
    return bad


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_recording_shows_no_fact_its_screen_contradicts(name: str) -> None:
    interval_s, run = _real(name)
    assert not _contradictions(run, interval_s)


@pytest.mark.parametrize("scenario", [*SCENARIOS, "epoch_restart"])
def test_simulated_scenario_shows_no_fact_its_screen_contradicts(scenario: str) -> None:
    assert not _contradictions(_sim(scenario), 2.0)


def test_scenarios_one_after_another_show_no_fact_their_screen_contradicts() -> None:
    run = _schedule()
    assert not _contradictions(run, 2.0)
    assert sum(1 for _t, _r, s in run if s.facts.get(CHANGING)) >= 1, "a change is said while it happens"


def _at(tick: int) -> tuple[Tick, Verdict, Verdict]:
    return _real("h200-scenarios-2s.parquet")[1][tick - 1]


def test_h200_demo_tick_74_no_longer_says_memory_held_beside_an_empty_card() -> None:
    tick, _raw, shown = _at(74)
    g = tick.gpus[0]
    assert g.mem_used_bytes / g.mem_total_bytes < 0.02 and g.util_pct > 40  # the screen: 42 %, 1.7G/140G
    assert not any("holds" in e and "memory" in e for e in shown.evidence), shown.evidence
    assert not any("no kernels run" in e for e in shown.evidence), shown.evidence
    assert shown.evidence[0].startswith("changing"), shown.evidence  # and it says the verdict is changing


def test_h200_demo_io_bound_never_says_every_core_busy_beside_idle_cores() -> None:
    for k in range(144, 150):
        tick, _raw, shown = _at(k)
        assert _mean(tick.cpu_pct) < 15 and tick.iowait_pct > 30  # the screen: CPU avg 8 %, iowait 40 %
        assert not any(f["metric"] == "cpu_busy_pct" for f in shown.evidence_facts), (k, shown.evidence)
        assert not any("every core" in a for a in shown.advice), (k, shown.advice)
        assert shown.bottleneck != "data_pipeline" or shown.facts.get(CHANGING), (k, shown.key)


def test_h200_demo_sleep_stall_never_says_the_idle_process_holds_a_core() -> None:
    for k in range(44, 56):
        tick, _raw, shown = _at(k)
        idle = _mean([g.util_pct for g in tick.gpus]) < TH.stall_util_pct
        if idle and all(p.cpu_pct is not None and p.cpu_pct < 5 for p in tick.procs):
            assert not any("holds 100 % of a core" in e for e in shown.evidence), (k, shown.evidence)


def test_collecting_counts_the_window_it_shows_and_gives_way_after_the_hold() -> None:
    run = _sim("data_pipeline")
    for i, (_t, _raw, shown) in enumerate(run):
        if shown.pattern != COLLECTING:
            break
        assert shown.evidence[0].startswith(f"collecting ({(i + 1) * 2} s"), (i, shown.evidence[0])
    first = next(i for i, (_t, _r, s) in enumerate(run) if s.pattern != COLLECTING)
    # the first raw verdict comes at the warm-up (3 ticks); its bottleneck is shown once it has held hold_s
    assert (first + 1) * 2.0 <= TH.warmup_s + TH.hold_s + 2.0, first
    assert run[first][2].bottleneck == "data_pipeline"


def test_collecting_never_reads_the_full_warm_up_before_it_is_over() -> None:
    _interval, run = _real("h200-scenarios-2s.parquet")
    for _t, raw, shown in run[:3]:
        assert shown.pattern == COLLECTING and raw.pattern == COLLECTING
        assert f"of {TH.warmup_s:.0f} s" in shown.evidence[0]
        assert not shown.evidence[0].startswith(f"collecting ({TH.warmup_s:.0f} s"), shown.evidence[0]


def test_the_diagnosis_pane_says_changing_under_the_headline_before_advice_and_evidence() -> None:
    from gpu_triage.ui.panes import Colours
    from gpu_triage.ui.verdict_pane import diag_pane, verdict_need
    from gpu_triage.window import RollingWindow

    _tick, _raw, shown = _at(74)
    window = RollingWindow(150)
    for t, _r, _s in _real("h200-scenarios-2s.parquet")[1][:74]:
        window.append(t)
    lines = diag_pane(shown, [], window.view(), 100, 3, Colours()).plain.split("\n")
    assert lines[0].startswith("VERDICT ") and lines[1].startswith("changing"), lines
    assert not any(line.startswith("• changing") for line in lines)
    core, bullets = verdict_need(shown, 100)
    assert bullets == len(shown.evidence) - 1 and core >= 2


def test_when_no_verdict_fits_the_screen_the_lines_say_what_it_reads_and_advice_waits() -> None:
    # the end of the sleep stall: the sawtooth's raw verdict still holds its old stretch, the cards read 0 %
    tick, raw, shown = _at(61)
    assert raw.key == shown.key == ("sawtooth", "stall_unexplained") and raw.advice
    assert shown.evidence[0].startswith("changing? the numbers on screen have moved off"), shown.evidence
    assert "GPU-Util now 0..1 %" in shown.evidence and not shown.advice
    assert not any(e.startswith("GPU-Util mean") for e in shown.evidence)


@pytest.mark.slow
async def test_the_h200_demo_dashboard_says_changing_at_tick_74() -> None:
    """The dashboard itself (the built-in demo, stepped tick by tick as playback feeds them): its diagnosis
    pane beside the card's 42 % and 1.7G/140G."""
    import argparse

    from gpu_triage.ui.pane_widget import Pane
    from gpu_triage.ui.run import build_app

    app = build_app("demo", argparse.Namespace(scenario=None, speed=1.0, record=None), Config())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")  # pause: only steps move the position now
        await pilot.press("g")
        # each tick judged as it comes, as a frame per step would judge it (the frames between left out: they draw
        # the verdict judged here); the key steps to tick 74 and draws it
        while app.replay.position < 72:
            app.ingest(app.replay.advance(), draw=False)
            assert not app.replay.at_gap  # a gap would start the window afresh: the key's way, not this
        await pilot.press("right")
        assert app.replay.position == 73  # tick 74
        await pilot.pause()
        diag = app.query_one("#diag", Pane)._shown
        assert diag is not None
        text = diag.plain
        assert "\nchanging" in text and "holds 55 % of its memory" not in text, text
        assert app.verdicts.shown.key == _at(74)[2].key  # the dashboard and `offline.verdicts` agree
