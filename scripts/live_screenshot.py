"""Screenshot the LIVE dashboard on this machine's real GPUs (used on the H200 machine).

    python scripts/live_screenshot.py --after 240 --size 160x48 --out live.svg [--detail detail.svg]

Starts the same app `gpu-triage` starts (LiveSource: NVML + psutil), lets it sample for --after seconds,
then saves an SVG of the main screen (and of the selected card's detail view with --detail).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from gpu_triage.config import Config
from gpu_triage.ui.run import build_app


async def shoot(after: float, size: tuple[int, int], out: Path, detail: Path | None, interval: float) -> None:
    config = Config(interval_s=interval)
    app = build_app("live", argparse.Namespace(record=None), config)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(after)
        app.save_screenshot(filename=out.name, path=str(out.parent))
        if detail is not None:
            await pilot.press("enter")
            await pilot.pause(1.0)
            app.save_screenshot(filename=detail.name, path=str(detail.parent))
        await pilot.press("q")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--after", type=float, default=60.0, help="seconds of sampling before the shot")
    ap.add_argument("--size", default="160x48", help="terminal size COLSxROWS")
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--detail", type=Path)
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))
    asyncio.run(
        shoot(args.after, (cols, rows), args.out.resolve(), args.detail and args.detail.resolve(), args.interval)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
