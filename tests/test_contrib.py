"""contrib/: the alerting rules pass promtool (syntax and unit tests of when each alert fires), the Grafana
dashboard is what its generator writes and asks only for metrics the exporter serves, and the systemd
unit starts `gpu-triage export` on loopback with the devices NVML needs."""

from __future__ import annotations

import configparser
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpu_triage.cli import build_parser
from gpu_triage.config import Config
from gpu_triage.export.collector import TriageCollector
from gpu_triage.export.monitor import Monitor
from gpu_triage.export.server import parse_listen
from gpu_triage.model import JobRank, JobSample
from gpu_triage.sources.sim import SimulatedSource
from promtools import require

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "contrib/prometheus/gpu-triage-alerts.yml"
RULE_TESTS = ROOT / "contrib/prometheus/gpu-triage-alerts.test.yml"
DASHBOARD = ROOT / "contrib/grafana/gpu-triage.json"
UNIT = ROOT / "contrib/systemd/gpu-triage-export.service"


def _exported_names() -> set[str]:
    """Every sample name a scrape of an 8-card simulated server gives."""
    source = SimulatedSource("data_pipeline", gpus=8, seed=0)
    monitor = Monitor(source.host_info(), Config(), source.name)
    for _ in range(3):
        tick = source.sample()
        tick.job = JobSample("pulse", samples_per_s=900.0, since_progress_s=0.4, ranks=[JobRank(0, step_time_s=0.3)])
        monitor.ingest(tick, source.status())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot))
    text = generate_latest(registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def _metric_names(text: str) -> set[str]:
    return set(re.findall(r"\bgpu_triage_[a-z_]+", text))


@pytest.mark.slow
def test_promtool_checks_the_rules() -> None:
    out = subprocess.run(
        [require("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout


@pytest.mark.slow
def test_promtool_unit_tests_say_when_each_alert_fires() -> None:
    out = subprocess.run(
        [require("promtool"), "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested >= {"GpuTriageBottleneck", "GpuTriageCardLost", "GpuTriageMemoryHeldIdle", "GpuTriageNoJobProgress"}


def test_rules_and_dashboard_ask_only_for_exported_metrics() -> None:
    exported = _exported_names()
    for path in (RULES, DASHBOARD):
        asked = _metric_names(path.read_text())
        assert asked, path
        assert asked <= exported, f"{path.name} asks for metrics the exporter does not serve: {asked - exported}"


def test_dashboard_is_the_generators_output_with_its_variables() -> None:
    spec = importlib.util.spec_from_file_location("grafana_dashboard", ROOT / "scripts/grafana_dashboard.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert DASHBOARD.read_text() == gen.render(), "run python scripts/grafana_dashboard.py"
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "instance", "gpu"} <= set(variables)
    assert "gpu_triage_build_info" in variables["instance"]["definition"]
    panels = board["panels"]
    kinds = {p["type"] for p in panels}
    assert {"state-timeline", "timeseries", "stat", "row"} <= kinds
    assert any(p.get("repeat") == "gpu" for p in panels if p["type"] == "row")
    for p in panels:
        for t in p.get("targets", []):
            assert "$instance" in t["expr"], f"{p['title']}: every query is scoped to the instance"
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in panels:  # on the 24-column grid
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_systemd_unit_runs_export_on_loopback_with_the_nvidia_devices() -> None:
    text = UNIT.read_text()
    service = _unit()["Service"]
    argv = service["ExecStart"].split()
    assert Path(argv[0]).name == "gpu-triage"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "export"
    host, _ = parse_listen(args.listen)
    assert host == "127.0.0.1"
    assert service["DevicePolicy"] == "closed"
    allowed = re.findall(r"^DeviceAllow=(\S+) (\S+)$", text, re.MULTILINE)
    assert ("char-nvidia*", "rw") in allowed
    assert not re.search(r"^PrivateDevices=(yes|true|1)", text, re.MULTILINE), "PrivateDevices hides /dev/nvidia*"
    for key in ("NoNewPrivileges", "ProtectSystem", "DynamicUser", "ProtectKernelModules"):
        assert key in service


@pytest.mark.slow
def test_systemd_analyze_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / UNIT.name
    # ExecStart must exist for verify: this Python running gpu-triage
    unit.write_text(
        re.sub(r"^ExecStart=\S+", f"ExecStart={sys.executable} -m gpu_triage", UNIT.read_text(), flags=re.MULTILINE)
    )
    out = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr
