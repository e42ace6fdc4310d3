"""Cost of the dashboard: CPU % of one core, RSS, bytes written to the terminal per second, memory growth.

    .venv/bin/python benchmarks/bench_dashboard.py [--seconds 60] [--size 120x40] [--ticks 43200]

1. Runs `gpu-triage demo data_pipeline` (simulated 8-card server, 32 cores) in a pseudo-terminal at a 2 s
   tick and at a 0.25 s tick, and counts the bytes the app writes to the terminal (what would go over SSH),
   the CPU time of the process, and its RSS. The first 3 s (start-up, first full paint) are excluded.
   Before those, the CPU of one frame headless at one tick per frame (--frames, 2 and 8 cards, at --size
   and at 160x50), split into redraw() (ingest, diagnosis, the panes' text and changed strips) and Textual's
   paint; then the CPU of opening the card detail (Enter) and of a tick with it open; --frames-only stops
   there, --profile tottime adds a cProfile of the frames.
2. Startup: seconds from exec to the first frame on the terminal (the key line painted).
3. Feeds ticks (default 302,400 = 7 days at 2 s) through the app's streaming ingest path headless (window,
   status, one diagnosis + redraw per frame, a frame per 100 ticks) and prints the RSS growth after warm-up;
   ``--tracemalloc`` also prints the Python-heap growth (leak or allocator warm-up?).

Targets (docs/performance.md): < 1 % of one core, < 150 MB RSS, < 10 KiB/s at a 2 s tick; < 5 % at 0.25 s;
first frame < 1.5 s; memory flat over 7 days.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import fcntl
import os
import pty
import select
import signal
import statistics
import struct
import sys
import termios
import time
from datetime import timedelta
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
WARMUP_S = 3.0


def startup_to_first_frame(cols: int = 120, rows: int = 40, marker: bytes = b"q quit") -> float:
    """Seconds from exec of `gpu-triage demo data_pipeline` to the first painted frame (its key line)."""
    began = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, [sys.executable, "-m", "gpu_triage", "demo", "data_pipeline"])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    seen = b""
    took = float("nan")
    while time.monotonic() - began < 30:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
            if marker in seen:
                took = time.monotonic() - began
                break
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(fd)
    return took


def run_in_pty(interval: float, seconds: float, cols: int, rows: int) -> dict[str, float]:
    pid, fd = pty.fork()
    if pid == 0:  # child: the dashboard, as a user would start it
        os.environ["TERM"] = "xterm-256color"
        os.environ["COLORTERM"] = "truecolor"
        os.execv(
            sys.executable, [sys.executable, "-m", "gpu_triage", "demo", "data_pipeline", "--interval", str(interval)]
        )
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = psutil.Process(pid)
    start = time.monotonic()
    counted = 0
    cpu0 = None
    t0 = 0.0
    while True:
        now = time.monotonic()
        if now - start >= WARMUP_S + seconds:
            break
        if cpu0 is None and now - start >= WARMUP_S:
            ct = proc.cpu_times()
            cpu0 = ct.user + ct.system
            t0 = now
            counted = 0
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            counted += len(data)
    elapsed = time.monotonic() - t0
    ct = proc.cpu_times()
    cpu = (ct.user + ct.system - (cpu0 or 0.0)) / elapsed * 100
    rss = proc.memory_info().rss / 2**20
    os.write(fd, b"q")
    try:
        for _ in range(50):
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
            select.select([fd], [], [], 0.1) and os.read(fd, 65536)
        else:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
    except (ChildProcessError, OSError):
        pass
    return {"cpu_pct": cpu, "rss_mb": rss, "bytes_per_s": counted / elapsed}


async def memory_growth(n_ticks: int, trace_heap: bool = False) -> dict[str, float]:
    from gpu_triage.config import Config
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.ui.app import TriageApp

    config = Config()
    source = SimulatedSource("data_pipeline", gpus=8, cores=32, seed=0, interval_s=2.0)
    base = [source.sample() for _ in range(600)]
    app = TriageApp(config, source=source, source_label="bench", autostart=False)
    me = psutil.Process()
    span = timedelta(seconds=2.0 * len(base))

    def tick(i: int):
        t = base[i % len(base)]
        return dataclasses.replace(t, ts=t.ts + span * (1 + i // len(base)))

    heap = 0.0
    async with app.run_test(size=(120, 40)) as pilot:
        app.pacer.clock = lambda: 0.0  # frames only when this loop draws one (every 100 ticks)
        for i in range(config.window_ticks * 2):  # fill the window and the history first
            app.ingest(tick(i), draw=False)
        await pilot.pause()
        if trace_heap:
            import tracemalloc

            tracemalloc.start()
            heap0 = tracemalloc.get_traced_memory()[0]
        rss0 = me.memory_info().rss
        began = time.perf_counter()
        for i in range(n_ticks):
            app.ingest(tick(config.window_ticks * 2 + i), draw=True, throttle=True)  # the feed's path
            if i % 100 == 99:
                app.redraw()
                await pilot.pause()
        took = time.perf_counter() - began
        rss1 = me.memory_info().rss
        if trace_heap:
            heap = (tracemalloc.get_traced_memory()[0] - heap0) / 2**20
    return {
        "ticks": n_ticks,
        "rss_growth_mb": (rss1 - rss0) / 2**20,
        "rss_mb": rss1 / 2**20,
        "heap_growth_mb": heap,
        "ms_per_tick": took / n_ticks * 1000,
    }


async def frame_cost(cards: int, cols: int, rows: int, frames: int, profile: str | None = None) -> dict[str, float]:
    """CPU per frame at one tick per frame (a 2 s tick): the tick's ingest, ``redraw()`` (diagnosis + panes'
    text + the changed cells' strips) and Textual's paint of it (compositor, terminal bytes), headless."""
    import cProfile
    import pstats

    from gpu_triage.config import Config
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.ui.app import TriageApp

    config = Config()
    source = SimulatedSource("data_pipeline", gpus=cards, cores=32, seed=0, interval_s=2.0)
    ticks = [source.sample() for _ in range(config.window_ticks + frames)]
    app = TriageApp(config, source=source, source_label="bench", autostart=False)
    redraw_s, paint_s = [], []
    prof = cProfile.Profile() if profile else None
    async with app.run_test(size=(cols, rows)) as pilot:
        app.pacer.clock = lambda: 0.0
        for t in ticks[: config.window_ticks]:
            app.ingest(t, draw=False)
        app.redraw()
        await pilot.pause()
        app.pacer.min_s = 1e9  # the feed's path, but the frames come only from this loop (no timer's frame)
        for t in ticks[config.window_ticks :]:
            if prof is not None:
                prof.enable()
            c0 = time.process_time()
            app.ingest(t, draw=True, record=False, throttle=True)  # as the live feed: diagnosis left to the frame
            app.redraw()
            c1 = time.process_time()
            await pilot.pause()
            c2 = time.process_time()
            if prof is not None:
                prof.disable()
            redraw_s.append(c1 - c0)
            paint_s.append(c2 - c1)
    if prof is not None:
        pstats.Stats(prof).sort_stats(profile).print_stats(25)
    med = statistics.median
    return {"redraw_ms": med(redraw_s) * 1e3, "paint_ms": med(paint_s) * 1e3, "frame_ms": med(
        [a + b for a, b in zip(redraw_s, paint_s, strict=True)]) * 1e3}


async def detail_cost(cols: int, rows: int, opens: int = 5) -> dict[str, float]:
    """CPU of the card detail (Enter), headless, 8 cards: opening it until its six charts are painted, and a frame
    with it open (one tick: every chart drawn again over the new window); medians over ``opens``."""
    from gpu_triage.config import Config
    from gpu_triage.sources.sim import SimulatedSource
    from gpu_triage.ui.app import TriageApp

    config = Config()
    source = SimulatedSource("data_pipeline", gpus=8, cores=32, seed=0, interval_s=2.0)
    ticks = [source.sample() for _ in range(config.window_ticks + opens)]
    app = TriageApp(config, source=source, source_label="bench", autostart=False)
    open_s, tick_s = [], []
    async with app.run_test(size=(cols, rows)) as pilot:
        for t in ticks[: config.window_ticks]:
            app.ingest(t, draw=False)
        app.redraw()
        await pilot.pause()
        for t in ticks[config.window_ticks :]:
            c0 = time.process_time()
            await pilot.press("enter")
            await pilot.pause()
            c1 = time.process_time()
            app.ingest(t, draw=False)
            app.redraw()
            await pilot.pause()
            c2 = time.process_time()
            await pilot.press("escape")
            await pilot.pause()
            open_s.append(c1 - c0)
            tick_s.append(c2 - c1)
    return {"open_ms": statistics.median(open_s) * 1e3, "tick_ms": statistics.median(tick_s) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--size", default="120x40")
    parser.add_argument("--ticks", type=int, default=302_400, help="ticks for the memory test (7 days at 2 s)")
    parser.add_argument("--skip-pty", action="store_true")
    parser.add_argument("--tracemalloc", action="store_true", help="also measure Python-heap growth (slower)")
    parser.add_argument("--frames", type=int, default=150, help="frames for the per-frame CPU (0: skip)")
    parser.add_argument("--frames-only", action="store_true", help="only the per-frame CPU")
    parser.add_argument("--profile", metavar="SORT", help="cProfile the frames, sorted by SORT (tottime)")
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    if args.frames:
        for cards in (2, 8):
            for fc, fr in ((cols, rows), (160, 50)):
                f = asyncio.run(frame_cost(cards, fc, fr, args.frames, args.profile))
                print(
                    f"frame CPU, {cards} cards {fc}x{fr}: {f['frame_ms']:6.2f} ms median (redraw() "
                    f"{f['redraw_ms']:5.2f} ms: ingest + diagnosis + panes; Textual's paint {f['paint_ms']:5.2f} ms)"
                )
        for fc, fr in ((cols, rows), (200, 60)):
            d = asyncio.run(detail_cost(fc, fr))
            print(f"card detail, 8 cards {fc}x{fr}: opening it {d['open_ms']:6.1f} ms CPU median, a tick with it "
                  f"open {d['tick_ms']:6.1f} ms")
        if args.frames_only:
            return
    if not args.skip_pty:
        for interval in (2.0, 0.25):
            r = run_in_pty(interval, args.seconds, cols, rows)
            print(
                f"tick {interval:>4}s  {cols}x{rows}: CPU {r['cpu_pct']:5.2f} % of one core, "
                f"RSS {r['rss_mb']:6.1f} MB, terminal output {r['bytes_per_s'] / 1024:6.2f} KiB/s"
            )
        print(f"startup to first frame: {startup_to_first_frame(cols, rows):.2f} s")
    m = asyncio.run(memory_growth(args.ticks, args.tracemalloc))
    days = m["ticks"] * 2.0 / 86400
    print(
        f"{m['ticks']} ticks ({days:.1f} days at 2 s) through the streaming ingest path: RSS growth "
        f"{m['rss_growth_mb']:.2f} MB (RSS {m['rss_mb']:.0f} MB), {m['ms_per_tick']:.3f} ms per tick"
        " incl. a frame per 100"
        + (f", Python heap growth {m['heap_growth_mb']:.3f} MB" if args.tracemalloc else "")
    )


if __name__ == "__main__":
    main()
