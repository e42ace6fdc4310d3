"""One judge (gpu_triage/verdicts): a real recording played through every reader of ticks gives the same
verdicts tick by tick: the dashboard's replay (Textual, stepped), the recorder (`record`, its stored raw
verdicts), export's monitor (the shown verdict a scrape reports), and `diagnose` (its raw verdict at every
tick, and each segment's words: those the dashboard shows at the segment's end)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpu_triage.config import Config
from gpu_triage.diagnosis.engine import Verdict
from gpu_triage.diagnosis.measure import span_words
from gpu_triage.diagnosis.present import CHANGING
from gpu_triage.export.monitor import Monitor
from gpu_triage.feeds import ReplayFeed, open_replay
from gpu_triage.model import HostInfo, Tick
from gpu_triage.offline.judge import judge
from gpu_triage.offline.timeline import diagnose_trace
from gpu_triage.recording.headless import record_source
from gpu_triage.sources.base import SourceStatus
from gpu_triage.trace.batches import iter_batches
from gpu_triage.trace.reader import open_trace
from gpu_triage.ui.replay import ReplayApp
from gpu_triage.verdicts.judge import Judge

DATA = Path(__file__).parent / "data"
# a card left holding memory between runs, then generation (2 s ticks); two ranks starved by one DataLoader
# worker each, whose advice is a num_workers figure (1 s ticks)
RECORDINGS = ["h200-gen-2s.parquet", "h200x2-joblog-2card-starved-1s.parquet"]


def words(v: Verdict) -> tuple[Any, ...]:
    return (str(v.pattern), str(v.bottleneck), str(v.mechanism), tuple(v.gpus), tuple(v.evidence), tuple(v.advice))


class Played:
    """A recording's ticks handed out in order: the outside world of a recorder or an exporter."""

    name = "replayed"

    def __init__(self, path: Path) -> None:
        tf = open_trace(path)
        self.host, self.interval_s, self.ticks = tf.host, float(tf.interval_s), list(tf.ticks(0, tf.n))
        self._i = 0

    def host_info(self) -> HostInfo:
        return self.host

    def sample(self) -> Tick:
        self._i += 1
        return self.ticks[self._i - 1]

    def status(self) -> SourceStatus:
        return SourceStatus()

    def close(self) -> None:
        pass


async def dashboard(path: Path, config: Config) -> list[tuple[Any, ...]]:
    """The replay dashboard stepped tick by tick from the first (the `.` key's action), the shown verdict at
    each tick."""
    feed = ReplayFeed(open_replay(path), 10**6, from_start=True)
    app = ReplayApp(config, feed)
    shown: list[tuple[Any, ...]] = []
    async with app.run_test(size=(120, 50)):
        app.replay.playing = False
        while True:
            now = app.verdict_now()
            assert isinstance(now, Verdict)
            shown.append(words(now))
            if feed.position + 1 >= feed.n:
                break
            app.action_step(1)
    return shown


@pytest.mark.parametrize("name", RECORDINGS)
async def test_every_reader_of_a_real_recording_says_the_same_tick_by_tick(name: str, tmp_path: Path) -> None:
    config = Config()
    path = DATA / name
    played = Played(path)
    n, interval_s = len(played.ticks), played.interval_s

    # the one judge, fed the ticks as they come: raw and shown verdict of each tick
    j = Judge(config.thresholds, config.window_s, interval_s, played.host.cpu_count)
    judged = [j.take(t) for t in played.ticks]
    raw = [words(x.raw) for x in judged if x.raw is not None]
    shown = [words(x.shown) for x in judged if x.shown is not None]
    assert len(raw) == len(shown) == n

    # diagnose: the engine at every tick, over the recording's columns
    jd = judge(iter_batches(path), config.thresholds, config.window_s, stride=1)
    assert [words(v) for v in jd.raws] == raw

    # export's monitor: the shown verdict a scrape reports at each tick
    monitor = Monitor(played.host, config, played.name, interval_s)
    scraped = []
    for tick in played.ticks:
        verdict = monitor.ingest(tick).verdict
        assert verdict is not None
        scraped.append(words(verdict))
    assert scraped == shown

    # `record`: the raw verdict stored with each tick
    out, ticks = record_source(Played(path), tmp_path / "again.parquet", interval_s, duration_s=n * interval_s,
                               fast=True, describe_machine=False, out=None, config=config)
    assert ticks == n
    stored = [t.verdict for t in open_trace(out).ticks(0, n)]
    assert [(v.pattern, v.bottleneck, v.mechanism or "") for v in stored if v is not None] == [r[:3] for r in raw]

    # the dashboard's replay, stepped: what the screen shows at each tick
    assert await dashboard(path, config) == shown

    # diagnose's segments: each says what the dashboard shows at its last tick whenever the screen shows the
    # segment's verdict there (the hysteresis lags the non-causal segments at their edges) and stands by it
    # (not "changing?": the window's numbers moved off it); destructive advice aside, which each adds on its
    # own count of the hold
    tl = diagnose_trace(iter_batches(path), config.thresholds, config.window_s)
    ends = {datetime.fromtimestamp(t.ts.timestamp(), UTC): i for i, t in enumerate(played.ticks)}
    agreed = 0
    for seg in tl.segments:
        i = ends[seg.end]
        screen = judged[i].shown
        assert screen is not None
        changing = any(f.get("metric") == CHANGING for f in screen.evidence_facts)
        if screen.key != (seg.pattern, seg.bottleneck) or changing:
            continue
        destructive = set(screen.destructive_advice)
        assert [a for a in seg.advice if a not in destructive] == [a for a in screen.advice if a not in destructive]
        assert seg.evidence == screen.evidence
        agreed += 1
    assert agreed >= 2, "the recording's segments and the screen never agreed on a verdict"


def test_the_verdicts_figures_name_the_span_they_cover() -> None:
    """A card's graph says its mean over the whole window ("window mean 47 %"); the verdict beside it judges
    only the ticks since the current regime began ("GPU-Util mean 99 %"): it says over how long."""
    config = Config()
    played = Played(DATA / "h200-gen-2s.parquet")
    j = Judge(config.thresholds, config.window_s, played.interval_s, played.host.cpu_count)
    named = 0
    for tick in played.ticks:
        raw = j.take(tick).raw
        assert raw is not None
        line = next((e for e in raw.evidence if e.startswith("GPU-Util mean")), None)
        if line is not None:
            assert f" over the last {span_words(raw.facts['judged_s'])}" in line, line
            named += 1
    assert named > len(played.ticks) // 2
