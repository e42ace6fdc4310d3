"""Render the dashboard headless into screenshots/ (SVG, and PNG when rsvg-convert is installed).

    .venv/bin/python scripts/screenshots.py [--out screenshots]

Scenarios of the simulated 8-GPU server at a fixed seed and start time (so the pictures are reproducible),
the card detail view, the help screen, and a replay of the bundled real H200 recording. PNGs need
`rsvg-convert` (Debian/Ubuntu: apt-get install librsvg2-bin).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.data import H200_TRACE_2S
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.ui.app import TriageApp
from gpu_triage.ui.run import build_app

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def sim_app(scenario: str, gpus: int = 8, cores: int = 32, ticks: int = 150) -> TriageApp:
    """A dashboard on the simulated server, its window already full (no wall clock involved)."""
    config = Config()
    source = SimulatedSource(scenario, gpus=gpus, cores=cores, seed=0, interval_s=config.interval_s, start=START)
    prefill = [source.sample() for _ in range(ticks)]
    return TriageApp(
        config,
        source=source,
        source_label=f"demo: simulated {gpus}-GPU server, {scenario}",
        prefill=prefill,
        autostart=False,
    )


async def shoot(app: Any, path: Path, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        await pilot.pause(0.3)
        app.save_screenshot(filename=path.name, path=str(path.parent))
    print(path)


def fleet_app() -> Any:
    """`gpu-triage fleet` over six simulated hosts and a dead one: each host's real /metrics text (the
    exporter's collector over 150 ticks of its scenario), parsed as a scrape is, without a network."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_triage.export.collector import TriageCollector
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.fleet_live.client import Fleet, FleetSnapshot
    from gpu_triage.fleet_live.model import build_rows
    from gpu_triage.fleet_live.samples import HostData, parse_exposition
    from gpu_triage.ui.fleet_app import FleetApp

    hosts = []
    scenarios = ("healthy", "data_pipeline", "single_card_busy", "storage_io", "healthy", "communication")
    for n, scenario in enumerate(scenarios, start=1):
        source = SimulatedSource(scenario, gpus=8, cores=32, seed=n, interval_s=2.0, start=START)
        monitor = Monitor(source.host_info(), Config(), source.name)
        for _ in range(150):
            tick = source.sample()
            monitor.ingest(tick, source.status())
        registry = CollectorRegistry()
        registry.register(TriageCollector(lambda m=monitor: m.snapshot))
        samples, notes = parse_exposition(generate_latest(registry).decode())
        address = f"gpu-node-{n:02d}:9839"
        hosts.append(HostData(address, address, tick.ts.timestamp() + 1, samples=tuple(samples), notes=tuple(notes)))
    dead = "gpu-node-07:9839"
    hosts.append(HostData(dead, dead, 0.0, error="connection refused (nothing listens there)"))
    fleet = Fleet([], source="7 exporters", interval_s=5)
    fleet.snapshot = FleetSnapshot(source="7 exporters", rows=build_rows(hosts), updated=hosts[0].time)
    return FleetApp(fleet, autostart=False, clock=lambda: hosts[0].time + 2)


async def fleet_shots(out: Path) -> list[Path]:
    shots = []
    for size in ((80, 24), (120, 40)):
        p = out / f"fleet-{size[0]}x{size[1]}.svg"
        await shoot(fleet_app(), p, size)
        shots.append(p)
    p = out / "fleet-detail-120x40.svg"
    await shoot(fleet_app(), p, (120, 40), ("down", "enter"))  # the first host with cards (a dead one is first)
    shots.append(p)
    p = out / "fleet-lost-120x40.svg"  # what to fix first: s cycles to the order by GPU-hours lost
    await shoot(fleet_app(), p, (120, 40), ("s", "s", "s", "home"))
    shots.append(p)
    os.environ["NO_COLOR"] = "1"  # the state and the bottleneck must read without colour
    try:
        app = fleet_app()
    finally:
        del os.environ["NO_COLOR"]
    p = out / "fleet-80x24-nocolor.svg"
    await shoot(app, p, (80, 24))
    shots.append(p)
    return shots


async def main(out: Path, fleet_only: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = await fleet_shots(out)
    if fleet_only:
        _pngs(shots)
        return
    for scenario in ("single_card_busy", "data_pipeline", "storage_io", "communication", "healthy"):
        p = out / f"{scenario}-80x24.svg"
        await shoot(sim_app(scenario), p, (80, 24))
        shots.append(p)
    # the waveform at a glance (issue 33): a card stalling every 24 s beside a busy card and idle ones
    p = out / "shared_box-80x24.svg"
    await shoot(sim_app("shared_box", gpus=4), p, (80, 24))
    shots.append(p)
    # every terminal (issue #13): the same screen with 16 colours and with NO_COLOR
    for name, env in (("16colours", ("TEXTUAL_COLOR_SYSTEM", "standard")), ("nocolor", ("NO_COLOR", "1"))):
        os.environ[env[0]] = env[1]
        try:
            app = sim_app("single_card_busy")  # the terminal is read when the app is made
        finally:
            del os.environ[env[0]]
        p = out / f"single_card_busy-80x24-{name}.svg"
        await shoot(app, p, (80, 24))
        shots.append(p)
    p = out / "processes-120x40.svg"
    await shoot(sim_app("data_pipeline"), p, (120, 40), ("tab", "t", "j"))
    shots.append(p)
    p = out / "data_pipeline-160x48.svg"
    await shoot(sim_app("data_pipeline"), p, (160, 48))
    shots.append(p)
    p = out / "16gpu-128cores-200x60.svg"
    await shoot(sim_app("periodic_stall", gpus=16, cores=128), p, (200, 60))
    shots.append(p)
    p = out / "detail-160x48.svg"
    await shoot(sim_app("data_pipeline"), p, (160, 48), ("down", "enter"))
    shots.append(p)
    p = out / "help-100x32.svg"
    await shoot(sim_app("healthy"), p, (100, 32), ("question_mark",))
    shots.append(p)
    replay = build_app("replay", argparse.Namespace(file=str(H200_TRACE_2S), speed=1.0, record=None), Config())
    p = out / "replay-h200-120x32.svg"
    # pause, then go to the sawtooth case of the recording (about 50 ticks in)
    await shoot(replay, p, (120, 32), ("space", "g", *(["right_square_bracket"] * 3)))
    shots.append(p)
    # the inside of a real job: a trace-v3 recording our recorder made on an H200 with its py-spy sampler on,
    # paused in the window where AdamW stepped on the CPU (the verdict cites the main thread; Tab, its line)
    inside = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200-inside-c-2s.parquet"
    replay = build_app("replay", argparse.Namespace(file=str(inside), speed=1.0, record=None), Config())
    p = out / "replay-h200-inside-140x42.svg"
    await shoot(replay, p, (172, 44), ("space", "g", "right_square_bracket", *(["right"] * 6), "tab"))
    shots.append(p)
    shots.append(await headroom_shot(out))
    _pngs(shots)


async def headroom_shot(out: Path) -> Path:
    """The verdict pane's headroom line on a real recording: 2 H200s, a DDP training starved by one
    DataLoader worker per rank (tests/data, recorded with the job's pulse), paused 45 s in: the job's clock
    gives the wait, and the line says what fixing the loader is worth in samples/s."""
    starved = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200x2-pulse-2card-starved-1s.parquet"
    replay = build_app("replay", argparse.Namespace(file=str(starved), speed=1.0, record=None), Config())
    p = out / "headroom-h200x2-starved-172x44.svg"
    await shoot(replay, p, (172, 44), ("space", "g", "right_square_bracket", *(["right"] * 15)))
    return p


def _pngs(shots: list[Path]) -> None:
    converter = shutil.which("rsvg-convert")
    if converter is None:
        print("rsvg-convert not found: SVG only (apt-get install librsvg2-bin for PNG)")
        return
    for svg in shots:
        print(to_png(converter, svg))


_BRAILLE_RUN = re.compile(
    r'<text ([^>]*?)x="([0-9.]+)"([^>]*?)textLength="([0-9.]+)"([^>]*)>([^<]*[\u2800-\u28ff][^<]*)</text>'
)
_CHAR = re.compile(r"&#?\w+;|.")


def _one_cell_each(m: re.Match[str]) -> str:
    """A run holding braille as one <text> per character at its own cell: rsvg-convert draws braille wider
    than a cell, and a run of it pushed past its cells over the figures after the graph (the SVG and the
    terminal are right)."""
    before, x, middle, length, after, body = m.groups()
    chars = _CHAR.findall(body)
    cell = float(length) / len(chars)
    return "".join(
        f'<text {before}x="{float(x) + i * cell:.1f}"{middle}textLength="{cell:.1f}"{after}>{ch}</text>'
        for i, ch in enumerate(chars)
        if ch not in (" ", "&#160;")
    )


def to_png(converter: str, svg: Path) -> Path:
    """PNG of a Textual SVG. Why the rewrite: rsvg-convert trims leading spaces (&#160;) of each <text> run,
    so a run that starts with spaces is drawn shifted left over its neighbour ("● livelive", "data_pipelineGPU 0")
    although the SVG and the terminal are right; xml:space="preserve" on the root keeps them."""
    text = svg.read_text(encoding="utf-8")
    if 'xml:space="preserve"' not in text:
        text = text.replace("<svg ", '<svg xml:space="preserve" ', 1)
    text = _BRAILLE_RUN.sub(_one_cell_each, text)
    png = svg.with_suffix(".png")
    subprocess.run([converter, "-w", "1400", "-o", str(png), "/dev/stdin"], input=text.encode(), check=True)
    return png


if __name__ == "__main__":
    # the pictures are truecolor whatever shell runs the script (TERM=xterm alone means 16 colours,
    # ui/palette.py); the 16-colour and NO_COLOR pictures set their own variables
    os.environ["COLORTERM"] = "truecolor"
    os.environ.pop("TEXTUAL_COLOR_SYSTEM", None)
    os.environ.pop("NO_COLOR", None)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "screenshots")
    parser.add_argument(
        "--png-only",
        nargs="*",
        type=Path,
        metavar="SVG",
        help="only convert these SVGs to PNG (e.g. the live H200 ones)",
    )
    parser.add_argument("--fleet-only", action="store_true", help="only the `gpu-triage fleet` screens")
    ns = parser.parse_args()
    if ns.png_only:
        conv = shutil.which("rsvg-convert")
        if conv is None:
            raise SystemExit("rsvg-convert not found (apt-get install librsvg2-bin)")
        for one in ns.png_only:
            print(to_png(conv, one))
    else:
        asyncio.run(main(ns.out, ns.fleet_only))
