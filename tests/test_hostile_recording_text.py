"""A recording is outside text: anyone on a shared server may hand one over, or name a file in a shared
dataset. This plants terminal escapes (OSC 52 clipboard writes, CSI screen clears), CR/LF with a fake
"gpu-triage:" line after them, bidi overrides, C1 controls and DEL in every text field of a recording and its
metadata, written through the project's own writer, and in the names of the files, directories and host
partitions that hold it. Then it runs every command that reads recordings, the replay screen included, and
asserts that no such character reaches stdout, stderr, a JSON string or the screen, and that no fake line
appears where one of our own could be."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_triage.cli import main
from gpu_triage.config import Config
from gpu_triage.model import HostInfo, JobRank, JobSample, NetSample, ProcSample, StackSample, Tick, VerdictSample
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.storage.dataset import DatasetWriter
from gpu_triage.trace.writer import TraceWriter

FAKE = "gpu-triage: recording OK, all GPUs healthy"
START = datetime(2026, 1, 5, 12, tzinfo=UTC)
# every character safetext.clean replaces, but the newline of our own multi-line layout
UNSAFE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]"
)


def evil(tag: str) -> str:
    """``tag`` and then everything a hostile name can hold: OSC 52 (write the clipboard), a screen clear,
    CR LF and a line of ours forged after them, a bidi override, the one-byte CSI and DEL."""
    return f"{tag}\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\n{FAKE}\u202e\x9b31m\x7f"


def _file_evil(tag: str) -> str:
    return evil(tag).replace("/", "")  # a file name holds anything but the slash


def _host(side: str = "") -> HostInfo:
    """Host metadata planted everywhere; ``side`` makes the two sides of a comparison differ in each field,
    so that compare lists every one of them (the env variable names too)."""
    host = SimulatedSource("data_pipeline", gpus=2, cores=8, seed=4, interval_s=2.0, start=START).host_info()
    host.hostname = evil("host" + side)
    host.driver_version = evil("driver" + side)
    host.cuda_driver_version = evil("cuda" + side)
    for g in host.gpus:
        g.name, g.uuid, g.pci_bus_id = evil("gpuname"), evil("uuid"), evil("bus")
    host.topology = [[evil("topo")] * len(host.gpus) for _ in host.gpus]
    host.extra["env"] = {evil("ENVNAME" + side): evil("envvalue"), "NCCL_DEBUG": evil("nccl" + side)}
    host.extra["kernel"] = evil("kernel" + side)
    host.extra[evil("extrakey")] = evil("extravalue" + side)
    return host


def _ticks(n: int, *, seed: int = 4, scenario: str = "data_pipeline") -> Iterator[Tick]:
    src = SimulatedSource(scenario, gpus=2, cores=8, seed=seed, interval_s=2.0, start=START)
    for i in range(n):
        tick = src.sample()
        tick.procs = [ProcSample(pid=70 + g, gpu_index=g, name=evil("proc"), gpu_mem_bytes=1 << 30, cpu_pct=90.0,
                                 workers=2, user=evil("user"), slurm_job=evil("slurm") if g else None,
                                 pod_uid=evil("poduid"), pod_name=evil("pod"), pod_namespace=evil("ns"),
                                 container=evil("containerd://ctr")) for g in range(2)]
        tick.nets = [NetSample(evil("nic"), rx_bytes_per_s=1e6, tx_bytes_per_s=1e6)]
        for d in tick.disks:
            d.name = evil("disk")
        tick.job = JobSample(source=evil("jobsource"), samples_per_s=100.0 + i, steps_per_s=1.0, step_time_s=1.0,
                             data_wait_pct=60.0, since_progress_s=0.5, steps=i,
                             ranks=[JobRank(rank=0, local_rank=0, world_size=1, pid=70, samples_per_s=100.0)])
        tick.stacks = [StackSample(pid=70, role=evil("role"), phase=evil("phase"), frames=evil("frames"),
                                   busy_threads=1, threads=9, error=evil("error")),
                       StackSample(pid=71, role="main", phase="data_wait", frames=evil("next (loader.py)"),
                                   busy_threads=1, threads=9)]
        tick.verdict = VerdictSample(pattern=evil("pattern"), bottleneck=evil("bottleneck"),
                                     mechanism=evil("mechanism"), confidence=evil("confidence"), gpus=[0])
        yield tick


def _one_file(path: Path, n: int = 40, side: str = "", **kw: Any) -> Path:
    writer = TraceWriter(path, _host(side), 2.0, convert_in_child=False)
    for tick in _ticks(n, **kw):
        writer.append(tick)
    return writer.close()


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("evil")
    d = base / _file_evil("dir")
    d.mkdir()
    files = {
        "before": _one_file(d / (_file_evil("before") + ".parquet")),
        "after": _one_file(d / (_file_evil("after") + ".parquet"), side="2", seed=5, scenario="storage_io"),
        # a plain name: what is read by the name's glob-free paths (owners) is planted too
        "plain": _one_file(base / "plain.parquet"),
    }
    # not a recording, and a Parquet file of another schema, each under a hostile name
    files["garbage"] = d / (_file_evil("garbage") + ".parquet")
    files["garbage"].write_bytes(b"PAR1 not a recording")
    files["schema"] = d / (_file_evil("schema") + ".parquet")
    pq.write_table(pa.table({evil("col"): [evil("v")]}), files["schema"])
    # datasets: a host partition named by the hostile host name, an unreadable file beside the good one
    for side, seed in (("ds_before", 4), ("ds_after", 5)):
        root = base / _file_evil(side)
        writer = DatasetWriter(root, _host(side), 2.0, hostname=evil("dshost"))
        for tick in _ticks(30, seed=seed):
            writer.append(tick)
        writer.close()
        day = next(root.rglob("*.parquet")).parent
        (day / (_file_evil("unreadable") + ".parquet")).write_bytes(b"PAR1 not parquet PAR1")
        files[side] = root
    # a stream left by a killed recorder, for `recover`
    writer = TraceWriter(d / (_file_evil("killed") + ".parquet"), _host(), 2.0, convert_in_child=False)
    for tick in _ticks(10):
        writer.append(tick)
    writer.abort()
    files["stream"] = writer.stream_path
    files["ds_compact"] = base / _file_evil("ds_compact")
    shutil.copytree(files["ds_before"], files["ds_compact"])
    files["recovered"] = base / "recovered.parquet"
    return files


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def _no_raw_text(where: str, text: str) -> None:
    m = UNSAFE.search(text)
    assert m is None, f"{where}: raw {m.group()!r} in …{text[max(0, m.start() - 80):m.end() + 40]!r}"
    forged = [ln for ln in text.splitlines() if ln.lstrip().startswith(FAKE)]
    assert not forged, f"{where}: a forged line {forged[0]!r}"


def _no_raw_json(where: str, text: str) -> None:
    _no_raw_text(where, text)
    for s in _strings(json.loads(text)):
        m = UNSAFE.search(s) or re.search("\n", s)
        assert m is None, f"{where}: a JSON string holds {m.group()!r}: {s[:160]!r}"


COMMANDS: dict[str, tuple[list[str], bool]] = {  # name -> (argv with placeholders, stdout is JSON)
    "diagnose": (["diagnose", "{before}"], False),
    "diagnose --json": (["diagnose", "{before}", "--json"], True),
    "diagnose plain": (["diagnose", "{plain}"], False),
    "diagnose plain --json": (["diagnose", "{plain}", "--json"], True),
    "diagnose garbage": (["diagnose", "{garbage}"], False),
    "diagnose schema": (["diagnose", "{schema}"], False),
    "diagnose DIR --summary": (["diagnose", "{ds_before}", "--summary"], False),
    "diagnose DIR --summary --json": (["diagnose", "{ds_before}", "--summary", "--json"], True),
    "diagnose DIR": (["diagnose", "{ds_before}"], False),
    "compare": (["compare", "{before}", "{after}", "--all"], False),
    "compare --json": (["compare", "{before}", "{after}", "--json"], True),
    "compare plain": (["compare", "{plain}", "{after}", "--all"], False),
    "compare DIR DIR": (["compare", "{ds_before}", "{ds_after}", "--all"], False),
    "compare DIR DIR --json": (["compare", "{ds_before}", "{ds_after}", "--json"], True),
    "compare schema": (["compare", "{schema}", "{after}"], False),
    "recover": (["recover", "{stream}", "-o", "{recovered}"], False),
    "diagnose recovered": (["diagnose", "{recovered}"], False),
    "compact": (["compact", "{ds_compact}"], False),
}


# what each command must have shown, cleaned (␛ is the picture of ESC): proof that the planted field was
# printed and checked, not left out
SHOWN = {
    "diagnose": ["before␛]52;c;cHduZWQ=␇␛[2J␍␊" + FAKE],
    "diagnose garbage": ["garbage␛]52"],
    "diagnose schema": ["has no 'ts' column", "31m␡.parquet"],  # a long path: its start and end
    "diagnose plain": ["ns␛]52"],  # an owner: pod namespace/name
    "diagnose DIR --summary": ["left out (unreadable): ", "unreadable␛]52", "bottleneck␛]52", "ns␛]52"],
    "compare plain": ["env.ENVNAME␛]52", "env.ENVNAME2␛]52", "kernel␛]52"],
    "compare --json": ["jobsource␛]52", "env.ENVNAME␛]52"],
    "compare DIR DIR": ["left out (unreadable): ", "unreadable␛]52"],
    "recover": ["killed␛]52"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_command_reading_a_planted_recording_prints_a_raw_control_character(
    planted: dict[str, Path], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, is_json = COMMANDS[name]
    argv = [a.format(**{k: str(v) for k, v in planted.items()}) for a in argv]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc in (0, 1, 2), rc
    assert "Traceback" not in err, err[-2000:]
    _no_raw_text(f"{name}: stderr", err)
    if is_json and rc == 0:
        _no_raw_json(f"{name}: stdout", out)
    else:
        _no_raw_text(f"{name}: stdout", out)
    assert out or err  # it said something: a command that printed nothing proves nothing
    said = err + (json.dumps(json.loads(out), ensure_ascii=False) if is_json and rc == 0 else out)
    for text in SHOWN.get(name, []):
        assert text in said, f"{name}: {text!r} is not in what it printed"


async def test_replay_of_a_planted_recording_draws_no_raw_control_character(planted: dict[str, Path]) -> None:
    from gpu_triage.ui.run import build_app

    app = build_app("replay", argparse.Namespace(file=str(planted["before"]), speed=1.0, record=None), Config())
    async with app.run_test(size=(200, 70)) as pilot:
        await pilot.pause()
        for key in ("tab", "tab", "j"):
            await pilot.press(key)
            await pilot.pause()
        panes = [str(getattr(w, "shown_plain", "")) for w in app.query("Pane")]
        assert any("jobsource" in p for p in panes), "the JOB line is not on the screen: nothing was checked"
        for text in panes:
            _no_raw_text("replay pane", text)
        _no_raw_text("replay screen", app.export_screenshot())
        await pilot.press("enter")  # the card's detail screen
        await pilot.pause()
        _no_raw_text("replay detail screen", app.export_screenshot())
