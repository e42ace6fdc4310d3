"""How long `gpu-triage fleet` takes to quit on `q` over a large fleet: the real command on a pseudo-terminal,
reading a fake Prometheus that answers every query with --hosts copies of one host's real series.

    .venv/bin/python benchmarks/bench_fleet_quit.py [--hosts 1000] [--trials 3] [--wait 3]

Each trial starts the command, waits for its first table and --wait seconds more (rounds keep coming every 2 s,
so `q` lands while workers parse an answer), presses `q` and times until the process has exited. The body of
the answer is bench_fleet_view.py's (16.8 MiB of JSON for 1,000 8-card hosts), its GPU-Util changing each
query so every round reorders the table.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import pty
import re
import select
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def serve(hosts: int) -> None:
    """The fake Prometheus (a child process): prints its port, then answers until killed."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_fleet_view import host_text

    from gpu_triage.fleet_live.client import PrometheusTarget
    from gpu_triage.fleet_live.samples import parse_exposition

    samples, _ = parse_exposition(host_text())
    query = PrometheusTarget("http://x:9090", timeout_s=1).queries["metrics"]
    wanted = re.compile(re.search(r'__name__=~"([^"]+)"', query).group(1))  # type: ignore[union-attr]
    series = [s for s in samples if wanted.fullmatch(s.name)]

    def body(promql: str) -> bytes:
        now = time.time()
        result = []
        for h in range(hosts):
            labels = {"job": "gpu-triage", "instance": f"gpu{h:04d}.example.org:9839"}
            if promql.startswith("up"):
                result.append({"metric": {"__name__": "up", **labels}, "value": [now, "1"]})
                continue
            if "clock_event_reason" in promql:
                continue
            for s in series:
                v = s.value
                if s.name == "gpu_triage_tick_timestamp_seconds":
                    v = now
                elif s.name == "gpu_triage_gpu_utilization_ratio":
                    v = (h * 7919 + int(now)) % 1000 / 1000
                result.append({"metric": {"__name__": s.name, **s.labels, **labels},
                               "value": [now, repr(v) if v is not None else "NaN"]})
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            from urllib.parse import parse_qs, urlsplit

            data = body(parse_qs(urlsplit(self.path).query).get("query", [""])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:
                pass  # the command quit while its answer was on the way

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def one_quit(port: int, wait_s: float) -> float:
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(TERM="xterm-256color", COLUMNS="120", LINES="40")
        os.execv(sys.executable, [sys.executable, "-m", "gpu_triage", "fleet", "--prometheus",
                                  f"http://127.0.0.1:{port}", "--refresh", "2"])
    out = bytearray()
    stop = threading.Event()

    def drain() -> None:  # the screen must keep drawing: a full pty would block the command
        while not stop.is_set():
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                out.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while b"gpu0" not in out and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(wait_s)
    asked = time.monotonic()
    os.write(fd, b"q")
    os.waitpid(pid, 0)
    took = time.monotonic() - asked
    stop.set()
    reader.join()
    os.close(fd)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--wait", type=float, default=3.0)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.serve:
        serve(ns.serve)
        return
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(ns.hosts)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        took = [one_quit(port, ns.wait) for _ in range(ns.trials)]
    finally:
        server.kill()
        server.wait()
    print(f"fleet over {ns.hosts} hosts: q to exit {', '.join(f'{t:.2f}' for t in took)} s "
          f"(median {statistics.median(took):.2f} s)")


if __name__ == "__main__":
    main()
