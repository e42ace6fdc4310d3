"""What `gpu-triage fleet` costs per round for a large fleet, on this machine's CPU (no network).

    .venv/bin/python benchmarks/bench_fleet_view.py [--hosts 1000] [--repeat 5]

1. One host's real /metrics text: the exporter's collector over 150 ticks of an 8-card simulated server
   (data_pipeline: processes, disks, every field), its size and the parse of it (`parse_exposition` +
   `build_row`): the cost of one exporter in the pool mode.
2. A Prometheus answer for --hosts such hosts: the series the view asks for (`PrometheusTarget.queries`),
   each host with its own instance label, as JSON in the API's shape: its size (against the 64 MiB cap),
   and json.loads + parse_vector + group_by_host + build_row + order_rows, median of --repeat.
3. The screen: FleetApp's redraw of --hosts rows, headless, median of --repeat: a round where nothing
   changed, and one where every host's GPU-Util changed (every row updated and the order new).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from datetime import UTC, datetime


def host_text() -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_triage.config import Config
    from gpu_triage.export.collector import TriageCollector
    from gpu_triage.export.monitor import Monitor
    from gpu_triage.sources.sim import SimulatedSource

    source = SimulatedSource("data_pipeline", gpus=8, cores=64, seed=0, interval_s=2.0,
                             start=datetime(2026, 1, 1, tzinfo=UTC))
    monitor = Monitor(source.host_info(), Config(), source.name)
    for _ in range(150):
        monitor.ingest(source.sample(), source.status())
    registry = CollectorRegistry()
    registry.register(TriageCollector(lambda: monitor.snapshot))
    return generate_latest(registry).decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    ns = parser.parse_args()

    from gpu_triage.fleet_live.client import FleetSnapshot, PrometheusTarget
    from gpu_triage.fleet_live.model import build_row, order_rows
    from gpu_triage.fleet_live.samples import HostData, group_by_host, parse_exposition, parse_vector

    text = host_text()
    samples, _ = parse_exposition(text)
    tick_time = next(s.value for s in samples if s.name == "gpu_triage_tick_timestamp_seconds")
    times = []
    for _ in range(max(ns.repeat, 20)):
        t0 = time.perf_counter()
        s, notes = parse_exposition(text)
        build_row(HostData("h:9839", "h:9839", tick_time + 1, samples=tuple(s), notes=tuple(notes)))
        times.append(time.perf_counter() - t0)
    print(f"one exporter: {len(text) / 1024:.1f} KiB, {len(samples)} samples; parse + row "
          f"{statistics.median(times) * 1e3:.2f} ms median")

    regex = re.compile(re.search(r'__name__=~"([^"]+)"', PrometheusTarget("http://x:9090", timeout_s=1)
                                 .queries["metrics"]).group(1))  # type: ignore[union-attr]
    wanted = [s for s in samples if regex.fullmatch(s.name)]
    now = tick_time + 1
    result = []
    for h in range(ns.hosts):
        labels = {"job": "gpu-triage", "instance": f"gpu{h:04d}.example.org:9839"}
        for s in wanted:
            result.append({"metric": {"__name__": s.name, **s.labels, **labels},
                           "value": [now, repr(s.value) if s.value is not None else "NaN"]})
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
    times = []
    rows = ()
    for _ in range(ns.repeat):
        t0 = time.perf_counter()
        got, when = parse_vector(json.loads(body))
        rows = order_rows(build_row(h) for h in group_by_host(got, [], when or now))
        times.append(time.perf_counter() - t0)
    print(f"prometheus, {ns.hosts} hosts: {len(result)} series, {len(body) / 2**20:.1f} MiB of JSON; "
          f"parse + rows + order {statistics.median(times):.2f} s median")

    from gpu_triage.fleet_live.client import Fleet
    from gpu_triage.ui.fleet_app import FleetApp

    fleet = Fleet([], source="bench", interval_s=5)
    fleet.snapshot = FleetSnapshot(source="bench", rows=rows, updated=now)
    app = FleetApp(fleet, autostart=False, clock=lambda: now)

    import dataclasses

    changed = order_rows(dataclasses.replace(r, util=(i * 7919 % 1000) / 1000) for i, r in enumerate(rows))

    async def redraws() -> tuple[list[float], list[float]]:
        same, every = [], []
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            for _ in range(ns.repeat):
                for target, into in ((rows, same), (rows, same), (changed, every), (rows, every)):
                    t0 = time.perf_counter()
                    app._draw(FleetSnapshot(source="bench", rows=target, updated=now))
                    await pilot.pause()
                    into.append(time.perf_counter() - t0)
        return same, every

    same, every = asyncio.run(redraws())
    print(f"screen, {ns.hosts} rows: a redraw {statistics.median(same) * 1e3:.0f} ms median when nothing changed, "
          f"{statistics.median(every) * 1e3:.0f} ms when every row did")


if __name__ == "__main__":
    main()
