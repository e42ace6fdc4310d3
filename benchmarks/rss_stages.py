"""Where the headless recorder's memory goes: RSS after each stage of `gpu-triage record`, and which mappings grew.

    python benchmarks/rss_stages.py [--source live|sim:SCENARIO] [--interval 0.2] [--top 6]

Runs the recorder's own steps in this process, in the order `record` takes them, and after each prints
RSS (anonymous / file-backed / shared memory, from /proc/self/status), the thread count, glibc malloc's view
(bytes in use, bytes free but kept, mmapped) and Arrow's pool; then the mappings of /proc/self/smaps whose
RSS grew most since the stage before, grouped by what they map (a library, a device such as /dev/nvidia0,
[heap], anonymous memory, thread stacks). Stages:

  python            the interpreter alone
  imports           what `record` imports (through the CLI's own import step: numpy or not, psutil; no pyarrow)
  nvml init         nvmlInit (live source only)
  source ready      the source built: device handles, GPM samples allocated, counters primed (one sample)
  first sample      one more sample
  30 samples        at --interval
  writer open       the crash-safe Arrow stream opened
  100 ticks written 100 more samples, each appended as `record` does

The same script explains the recorder's RSS on a GPU machine (133-140 MB on an H200, 76 MB on a box without
one, docs/performance.md): the smaps lines name the library or device whose pages appear.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

_MB = 2**20


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")
    ]


def _mallinfo() -> str:
    """glibc malloc: bytes in use, free but kept in its arenas, and in mmapped blocks ('' off glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return ""
    fn.restype = _Mallinfo2
    m = fn()
    return (
        f"malloc in use {m.uordblks / _MB:.1f} MB, free kept {m.fordblks / _MB:.1f} MB, "
        f"mmapped {m.hblkhd / _MB:.1f} MB"
    )


def _status() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads"):
            out[key] = int(value.split()[0])
    return out


_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$")


def _smaps() -> dict[str, int]:
    """RSS in kB per mapping name; anonymous mappings are named by size class, thread stacks as such."""
    per: dict[str, int] = defaultdict(int)
    name = "?"
    size = 0
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        m = _HEADER.match(line)
        if m:
            name = m.group(1).strip() or "[anon]"
            continue
        if line.startswith("Size:"):
            size = int(line.split()[1])
        elif line.startswith("Rss:"):
            key = name
            if name == "[anon]":
                # 8 MB + guard: a thread's stack; 64 MB-aligned reservations: malloc arenas of other threads
                key = "[anon: thread stack?]" if size in (8192, 8196) else (
                    "[anon: 64 MB arena]" if size in (65536, 65532) or size % 65536 == 0 else "[anon]")
            per[key] += int(line.split()[1])
    return dict(per)


class Stages:
    def __init__(self, top: int) -> None:
        self.top = top
        self.prev = _smaps()
        self.t0 = time.perf_counter()

    def show(self, stage: str, extra: str = "") -> None:
        st = _status()
        now = _smaps()
        print(
            f"{stage:<20} RSS {st.get('VmRSS', 0) / 1024:6.1f} MB  (anon {st.get('RssAnon', 0) / 1024:5.1f}, "
            f"file {st.get('RssFile', 0) / 1024:5.1f}, shmem {st.get('RssShmem', 0) / 1024:4.1f})  "
            f"threads {st.get('Threads', 0)}  t={time.perf_counter() - self.t0:5.2f} s"
        )
        pa = sys.modules.get("pyarrow")
        details = [_mallinfo()]
        if pa is not None:
            pool = pa.default_memory_pool()
            details.append(f"arrow pool {pool.backend_name} {pool.bytes_allocated() / _MB:.2f} MB "
                           f"(peak {pool.max_memory() / _MB:.2f})")
        if extra:
            details.append(extra)
        print("    " + "; ".join(d for d in details if d))
        grew = sorted(((now.get(k, 0) - self.prev.get(k, 0), k) for k in now), reverse=True)
        shown = [(d, k) for d, k in grew[: self.top] if d >= 256]
        for delta, key in shown:
            print(f"    +{delta / 1024:6.1f} MB  {key}  (now {now[key] / 1024:.1f} MB)")
        self.prev = now
        sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="live", help="live (default) or sim:SCENARIO")
    ap.add_argument("--gpus", type=int, default=8, help="cards of a sim source (default 8)")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between samples (default 0.2)")
    ap.add_argument("--top", type=int, default=6, help="mappings shown per stage (default 6)")
    args = ap.parse_args()
    if not Path("/proc/self/smaps").exists():
        print("rss_stages: needs Linux /proc/self/smaps", file=sys.stderr)
        return 2
    st = Stages(args.top)
    st.show("python")

    from gpu_triage import cli  # noqa: PLC0415 - the import stages are what is measured

    ns = cli.build_parser().parse_args(["record", "-o", "x.parquet", "--source", args.source])
    cli.prepare_imports(ns)  # what `gpu-triage record` loads before it dispatches
    from gpu_triage.config import load_config  # noqa: PLC0415, F401
    from gpu_triage.recording import headless  # noqa: PLC0415, F401
    from gpu_triage.sources import spec  # noqa: PLC0415
    from gpu_triage.trace.writer import TraceWriter  # noqa: PLC0415

    if args.source == "live":
        from gpu_triage.sources import live  # noqa: PLC0415, F401
    heavy = [m for m in ("numpy", "polars", "textual", "rich", "plotext", "pandas") if m in sys.modules]
    st.show("imports", f"loaded of numpy/polars/textual/rich/plotext/pandas: {heavy or 'none'}")

    if args.source == "live":
        from gpu_triage.nvmlwrap import NvmlUnavailable, load_nvml  # noqa: PLC0415

        try:
            nvml = load_nvml()
            st.show("nvml init")
        except NvmlUnavailable as exc:
            nvml = None
            st.show("nvml init", f"no NVML here: {exc}")
    else:
        nvml = None
    source = spec.make_source(args.source, gpus=args.gpus, interval_s=args.interval)
    st.show("source ready", f"{len(source.host_info().gpus)} cards")
    source.sample()
    st.show("first sample")
    for _ in range(30):
        time.sleep(args.interval)
        source.sample()
    st.show("30 samples")
    with tempfile.TemporaryDirectory() as tmp:
        writer = TraceWriter(Path(tmp) / "stages.parquet", source.host_info(), args.interval)
        st.show("writer open")
        for _ in range(100):
            time.sleep(args.interval)
            writer.append(source.sample())
        st.show("100 ticks written", f"stream {writer.bytes_written / 1024:.0f} KiB")
        writer.close()
        st.show("parquet written")
    source.close()
    if nvml is not None:
        nvml.shutdown()
    print(f"pid {os.getpid()}, python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
