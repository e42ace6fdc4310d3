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
DCGM_RULES = ROOT / "contrib/prometheus/gpu-triage-dcgm.yml"
DCGM_TESTS = ROOT / "contrib/prometheus/gpu-triage-dcgm.test.yml"
DASHBOARD = ROOT / "contrib/grafana/gpu-triage.json"
UNIT = ROOT / "contrib/systemd/gpu-triage-export.service"


def _exported_names() -> set[str]:
    """Every sample name a scrape of an 8-card simulated server gives."""
    source = SimulatedSource("data_pipeline", gpus=8, seed=0)
    monitor = Monitor(source.host_info(), Config(), source.name)
    for _ in range(3):
        tick = source.sample()
        tick.gpus[0].xid_count, tick.gpus[0].xid_last = 1, 79  # a card that raised an XID (the simulator's never do)
        tick.job = JobSample(
            "pulse",
            samples_per_s=900.0,
            since_progress_s=0.4,
            data_wait_pct=12.0,
            ranks=[JobRank(0, step_time_s=0.3, data_wait_pct=12.0)],
        )
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
    assert "SUCCESS: 13 rules found" in out.stdout


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
    defined = set(re.findall(r"- alert: (\w+)", RULES.read_text()))
    assert tested >= defined - {"GpuTriageStale"}, defined - tested
    assert {"GpuTriageExporterDown", "GpuTriageEccUncorrected", "GpuTriageXid", "GpuTriageDriverFailure",
            "GpuTriageCardsMissing"} <= defined
    assert "up{" in RULES.read_text()


def test_rules_and_dashboard_ask_only_for_exported_metrics() -> None:
    exported = _exported_names()
    for path in (RULES, DASHBOARD, DCGM_RULES):
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
    assert {"datasource", "job", "instance", "gpu"} <= set(variables)
    assert "gpu_triage_build_info" in variables["instance"]["definition"]
    assert "$job" in variables["instance"]["definition"]
    panels = board["panels"]
    kinds = {p["type"] for p in panels}
    assert {"state-timeline", "timeseries", "stat", "row", "table"} <= kinds
    assert any(p.get("repeat") == "gpu" for p in panels if p["type"] == "row")
    rows = [p["title"] for p in panels if p["type"] == "row"]
    for wanted in ("Fleet", "Job", "per owner", "throttles, ECC, XID"):
        assert any(wanted in r for r in rows), (wanted, rows)
    section = ""
    for p in panels:
        if p["type"] == "row":
            section = p["title"]
        for t in p.get("targets", []):
            scope = "$job" if section.startswith("Fleet") else "$instance"
            assert scope in t["expr"], f"{p['title']}: every query is scoped to {scope}"
            assert "bytes_per_second" not in t["expr"] or "disk" in t["expr"], f"{t['expr']}: links are counters"
    exprs = " ".join(t["expr"] for p in panels for t in p.get("targets", []))
    for counter in ("pcie_rx_bytes_total", "network_receive_bytes_total", "ecc_uncorrected_errors_total",
                    "xid_events_total", "clock_event_reason", "job_samples_per_second", "owner_info",
                    "gpu_lost_seconds_total"):
        assert counter in exprs, counter
    # what to fix first: the hosts ranked by GPU-hours lost over the dashboard's range, with the bottleneck
    fix = next(p for p in panels if p["title"].startswith("What to fix first"))
    verdict_row = min(p["gridPos"]["y"] for p in panels if p["title"] == "Verdict")
    assert fix["type"] == "table" and fix["gridPos"]["y"] < verdict_row  # in the fleet's row, at the top
    assert any("[$__range]" in t["expr"] and "bottleneck" in t["expr"] for t in fix["targets"])
    assert fix["options"]["sortBy"] == [{"displayName": "GPU-h lost", "desc": True}]
    # beside each host's figure, the hours it could not measure: a 0 there with hours of no figure is "cannot say"
    assert any("gpu_lost_unmeasured_seconds_total" in t["expr"] and "[$__range]" in t["expr"] for t in fix["targets"])
    assert "up{" in exprs  # the fleet overview counts the exporters that are down
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in panels:  # on the 24-column grid
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


def test_dcgm_recording_rules_pass_promtool_and_map_the_dcgm_names() -> None:
    """Our names under dcgm-exporter's (DCGM field ids, DCGM's units), checked and unit-tested by promtool:
    the values in gpu-triage-dcgm.test.yml are computed by hand in DCGM's units (%, MiB, MHz, mJ, bytes/s)."""
    promtool = require("promtool")
    out = subprocess.run([promtool, "check", "rules", str(DCGM_RULES)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    recorded = set(re.findall(r"- record: (\w+)", DCGM_RULES.read_text()))
    assert f"SUCCESS: {len(recorded)} rules found" in out.stdout
    assert {
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES",
    } <= recorded
    out = subprocess.run(
        [promtool, "test", "rules", DCGM_TESTS.name], capture_output=True, text=True, check=False, cwd=DCGM_TESTS.parent
    )
    assert out.returncode == 0, out.stdout + out.stderr
    tested = set(re.findall(r"expr: .*?(DCGM_FI_\w+)", DCGM_TESTS.read_text()))
    assert len(tested) >= 7, tested


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


def _schema_mismatches(ours: object, model: object, where: str) -> list[str]:
    """Where ``ours`` (the dashboard's JSON) says what Grafana's schema does not: a key the model drops
    (unknown to Grafana: a typo), or a value outside an enumeration the schema fixes."""
    import enum

    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    back = json.loads(json.dumps(model, cls=JSONEncoder))
    out: list[str] = []
    if isinstance(ours, dict) and isinstance(back, dict):
        native = model.to_json()  # type: ignore[attr-defined]
        try:
            defaults = type(model)().to_json()  # type: ignore[attr-defined]  # enum fields hold Enum defaults
        except TypeError:
            defaults = {}
        for key, value in ours.items():
            if key not in back:
                out.append(f"{where}.{key}: not a field Grafana knows")
                continue
            default = defaults.get(key)
            if isinstance(default, enum.Enum):
                allowed = {e.value for e in type(default)}
                if value not in allowed:
                    out.append(f"{where}.{key}: {value!r} is not one of {sorted(allowed)}")
            elif hasattr(native.get(key), "to_json"):
                out.extend(_schema_mismatches(value, native[key], f"{where}.{key}"))
    return out


def test_dashboard_is_what_grafanas_own_schema_reads() -> None:
    """Every panel, its options, field config and queries are read back through grafana-foundation-sdk,
    the types Grafana Labs generate from Grafana's dashboard schema: a key Grafana does not know (a typo) or
    an enumeration value it does not accept shows here, not as a silently ignored setting after import."""
    sdk = pytest.importorskip("grafana_foundation_sdk", reason="pip install grafana-foundation-sdk")
    from grafana_foundation_sdk.models import dashboard, prometheus, stat, statetimeline, table, timeseries

    assert sdk is not None
    board = json.loads(DASHBOARD.read_text())
    parsed = dashboard.Dashboard.from_json(board)
    problems = _schema_mismatches({k: v for k, v in board.items() if k != "panels"}, parsed, "dashboard")
    assert len(parsed.panels or []) == len(board["panels"])
    options = {"timeseries": timeseries.Options, "stat": stat.Options, "table": table.Options,
               "state-timeline": statetimeline.Options}
    field_configs = {"timeseries": timeseries.FieldConfig, "state-timeline": statetimeline.FieldConfig}
    for p in board["panels"]:
        name = f"panel {p['title']!r}"
        model = dashboard.RowPanel if p["type"] == "row" else dashboard.Panel
        problems += _schema_mismatches(
            {k: v for k, v in p.items() if k not in ("options", "fieldConfig", "targets", "panels")},
            model.from_json(p),
            name,
        )
        if p["type"] == "row":
            continue
        assert p["type"] in options, f"{name}: a panel type this test does not check"
        problems += _schema_mismatches(p["options"], options[p["type"]].from_json(p["options"]), f"{name}.options")
        defaults = p["fieldConfig"]["defaults"]
        problems += _schema_mismatches(
            {k: v for k, v in defaults.items() if k != "custom"},
            dashboard.FieldConfig.from_json(defaults),
            f"{name}.fieldConfig",
        )
        if "custom" in defaults and p["type"] in field_configs:
            custom = field_configs[p["type"]].from_json(defaults["custom"])
            problems += _schema_mismatches(defaults["custom"], custom, f"{name}.custom")
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), f"{name}: refIds repeat"
        for t in p["targets"]:
            problems += _schema_mismatches(t, prometheus.Dataquery.from_json(t), f"{name}.target")
            assert t["datasource"]["uid"] == "${datasource}"
    assert not problems, "\n".join(problems)
    # panels do not overlap on the grid
    taken: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"panel {p['title']!r} overlaps another"
        taken |= cells


def test_promtool_accepts_a_scrape_of_every_metric() -> None:
    """`promtool check metrics` (Prometheus' own lint of names, types, units and _total) on a whole scrape:
    counters end in _total, no gauge is named like a counter."""
    source = SimulatedSource("data_pipeline", gpus=2, seed=0)
    monitor = Monitor(source.host_info(), Config(), source.name)
    for _ in range(3):
        tick = source.sample()
        tick.job = JobSample("pulse", samples_per_s=900.0, steps=12, since_progress_s=0.4,
                             ranks=[JobRank(0, step_time_s=0.3)])
        monitor.ingest(tick, source.status())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TriageCollector(lambda: monitor.snapshot, pid_labels=True))
    text = generate_latest(registry).decode()
    assert "gpu_triage_gpu_pcie_rx_bytes_total" in text and "gpu_triage_owner_info" in text
    out = subprocess.run(
        [require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


PULSE_CONF = ROOT / "contrib/systemd/gpu-triage-pulse.conf"


def _unit_pulse_dir() -> str:
    found = re.findall(r"^Environment=GPU_TRIAGE_PULSE_DIR=(\S+)$", UNIT.read_text(), re.MULTILINE)
    assert len(found) == 1, "the unit names the pulse directory the job writes"
    return found[0]


def test_systemd_unit_and_the_job_agree_on_a_pulse_directory_the_unit_can_see() -> None:
    """PrivateTmp hides /tmp/gpu-triage-UID, a service has no $XDG_RUNTIME_DIR, and the dynamic user may not
    read another user's 0600 files: the unit names a directory outside all of them, tmpfiles.d makes it for
    the job's user (not group/other-writable), and the one capability that reads it is kept."""
    service = _unit()["Service"]
    where = Path(_unit_pulse_dir())
    assert where.is_absolute()
    hidden = ["/tmp", "/var/tmp", "/run/user"] if service.get("PrivateTmp") == "yes" else ["/run/user"]
    if service.get("ProtectHome") in ("yes", "tmpfs"):
        hidden.append("/home")
    assert not any(where == Path(h) or Path(h) in where.parents for h in hidden), where
    lines = [ln.split() for ln in PULSE_CONF.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) == 1
    kind, path, mode, user, _group, _age = lines[0]
    assert (kind, path) == ("d", str(where))
    assert int(mode, 8) & 0o022 == 0, "the pulse directory must be writable by its owner (the job's user) only"
    assert user != "root"
    assert "CAP_DAC_READ_SEARCH" in service["AmbientCapabilities"].split()
    assert "CAP_DAC_READ_SEARCH" in service["CapabilityBoundingSet"].split()
    docs = (ROOT / "docs/metrics.md").read_text()
    assert f"GPU_TRIAGE_PULSE_DIR={where}" in docs and "gpu-triage-pulse.conf" in docs


def _service_lines(unit: Path) -> tuple[dict[str, list[str]], str]:
    """Every ``Key=Value`` of the unit's [Service] section (a key given twice keeps both values, as systemd
    does for SystemCallFilter=), and the comment text of the section, on one line."""
    keys: dict[str, list[str]] = {}
    comments: list[str] = []
    section = ""
    for line in unit.read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        elif section == "[Service]" and line.startswith("#"):
            comments.append(line.lstrip("# "))
        elif section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            keys.setdefault(key.strip(), []).append(value.strip())
    return keys, " ".join(comments)


#: the unit's capabilities and what each is for, in the words its comments must use
UNIT_CAPABILITIES = {
    "CAP_DAC_READ_SEARCH": ("pulse files", "py-spy"),
    "CAP_SYS_PTRACE": ("/proc/PID/environ", "SLURM_JOB_ID", "pods show as UIDs", "py-spy", "process_vm_readv"),
}


def test_the_units_capabilities_are_what_owners_and_stacks_need_and_what_else_they_grant_is_taken_back() -> None:
    """Another user's /proc/PID/environ (the pod's name, a Slurm job known only from its environment) and
    their process memory (py-spy's stacks) are what the kernel guards with CAP_SYS_PTRACE; their pulse files
    and the interpreter py-spy reads are files, CAP_DAC_READ_SEARCH. Nothing else is granted, the unit says
    why each is there, and the writes CAP_SYS_PTRACE would allow are closed: no ptrace() (only in @debug),
    no process_vm_writev, /proc read-only. The hardening that still works with ambient capabilities stays."""
    keys, comments = _service_lines(UNIT)
    assert set(keys["CapabilityBoundingSet"][-1].split()) == set(UNIT_CAPABILITIES)
    assert set(keys["AmbientCapabilities"][-1].split()) == set(UNIT_CAPABILITIES)
    for cap, reasons in UNIT_CAPABILITIES.items():
        assert cap in comments
        for reason in reasons:
            assert reason in comments, f"the unit's comments say why it keeps {cap}: {reason!r} is missing"
    assert keys["NoNewPrivileges"] == ["yes"] and keys["ProtectSystem"] == ["strict"]
    assert keys["DynamicUser"] == ["yes"] and "User" not in keys  # no root, and no fixed user to share
    assert "/proc" in " ".join(keys["ReadOnlyPaths"]).split()
    filters = keys["SystemCallFilter"]
    assert filters[0] == "@system-service" and "~process_vm_writev" in " ".join(filters[1:]).split()
    allowed = [w for f in filters if not f.startswith("~") for w in f.split()]
    assert "@debug" not in allowed and "ptrace" not in allowed
    readme = (ROOT / "README.md").read_text()
    metrics = (ROOT / "docs/metrics.md").read_text()
    for cap in UNIT_CAPABILITIES:
        assert cap in readme and cap in metrics, f"README.md and docs/metrics.md say the unit keeps {cap}"


@pytest.mark.slow
def test_another_users_slurm_job_and_stacks_are_read_with_the_units_capabilities_and_not_without() -> None:
    """Real users and the real kernel: a job of one user, known as a Slurm job only from its environment;
    a reader as a third uid (what DynamicUser gives) with the unit's ambient capabilities names the job and
    dumps its Python stack with py-spy; with CAP_DAC_READ_SEARCH alone (the unit's old set) it names only the
    user and py-spy is refused."""
    import os
    import pwd
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to make users and grant a capability")
    setpriv = shutil.which("setpriv")
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if setpriv is None or not Path(pyspy).exists():
        pytest.skip("setpriv (util-linux) or py-spy is not installed")
    subprocess.run(["useradd", "--no-create-home", "gtpulse"], capture_output=True, check=False)
    job_user = pwd.getpwnam("gtpulse")
    job_env = {"PATH": os.environ.get("PATH", ""), "SLURM_JOB_ID": "424242"}
    job_code = "import time\ndef training_step():\n    time.sleep(60)\nprint('x', flush=True)\ntraining_step()\n"
    job = subprocess.Popen(
        [setpriv, f"--reuid={job_user.pw_uid}", f"--regid={job_user.pw_gid}", "--clear-groups", "--",
         sys.executable, "-c", job_code],
        stdout=subprocess.PIPE, text=True, env=job_env, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    owner_code = ("import sys; from gpu_triage.sources.owner import OwnerReader; "
                  "o = OwnerReader().owner(int(sys.argv[1]), None); print(o.user, o.slurm_job)")
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PATH": os.environ.get("PATH", "")}
    ambient = _service_lines(UNIT)[0]["AmbientCapabilities"][-1].split()  # what the shipped unit grants
    unit_caps = ",".join("+" + c.removeprefix("CAP_").lower() for c in ambient)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "x"
        seen = {}
        for caps in (unit_caps, "+dac_read_search"):
            drop = ["--reuid=65534", "--regid=65534", "--clear-groups", f"--inh-caps={caps}", f"--ambient-caps={caps}",
                    f"--bounding-set=-all,{caps}", "--"]
            owner = subprocess.run([setpriv, *drop, sys.executable, "-c", owner_code, str(job.pid)],
                                   capture_output=True, text=True, timeout=60, env=env, check=False)
            assert owner.returncode == 0, owner.stderr
            dump = subprocess.run([setpriv, *drop, pyspy, "dump", "--pid", str(job.pid), "--nonblocking"],
                                  capture_output=True, text=True, timeout=60, env=env, check=False)
            seen[caps] = (owner.stdout.split(), dump.returncode == 0 and "training_step" in dump.stdout)
        assert seen == {unit_caps: (["gtpulse", "424242"], True), "+dac_read_search": (["gtpulse", "None"], False)}
    finally:
        job.kill()
        job.wait()


@pytest.mark.slow
def test_a_jobs_pulse_in_that_directory_is_read_by_another_user_only_with_the_units_capability() -> None:
    """Real users: a job running as one user publishes its pulse into a directory made as the tmpfiles.d
    line says (its user, mode 0700); a reader as a third uid (what DynamicUser gives) sees the rank with
    CAP_DAC_READ_SEARCH, the unit's one capability, and nothing without it."""
    import os
    import pwd
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to make users and grant a capability")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    subprocess.run(["useradd", "--no-create-home", "gtpulse"], capture_output=True, check=False)
    job_user = pwd.getpwnam("gtpulse")
    mode = int(PULSE_CONF.read_text().split("d     /run/gpu-triage-pulse ")[1].split()[0], 8)
    base = Path(tempfile.mkdtemp(prefix="gpu-triage-unit-", dir="/run"))
    base.chmod(0o755)
    pulse_dir = base / "gpu-triage-pulse"
    pulse_dir.mkdir(mode=mode)
    os.chown(pulse_dir, job_user.pw_uid, job_user.pw_gid)
    # the job is exec'd as its user, as a real one is: a process that only switched uid after a fork is not
    # dumpable, so its /proc entries belong to root and the reader rightly refuses its pulse
    job_code = (
        "import time\nfrom gpu_triage import pulse\nfor _ in range(3):\n    pulse.step(32)\n    time.sleep(0.3)\n"
        "print('x', flush=True)\ntime.sleep(30)\n"
    )
    job_env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PATH": os.environ.get("PATH", ""),
               "GPU_TRIAGE_PULSE_DIR": str(pulse_dir)}
    job = subprocess.Popen(
        [setpriv, f"--reuid={job_user.pw_uid}", f"--regid={job_user.pw_gid}", "--clear-groups", "--",
         sys.executable, "-c", job_code],
        stdout=subprocess.PIPE, text=True, env=job_env,
    )  # fmt: skip
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "x"
        files = list(pulse_dir.iterdir())
        assert len(files) == 1 and files[0].stat().st_mode & 0o077 == 0  # the job's own, mode 0600
        code = (
            "import sys, time; from gpu_triage.sources.job import PulseReader; "
            "r = PulseReader(sys.argv[1]); print(len(r.sample(time.time(), 1.0)))"
        )
        env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PATH": os.environ.get("PATH", "")}
        seen = {}
        for caps in ("+dac_read_search", "-all"):
            out = subprocess.run(
                [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", f"--inh-caps={caps}",
                 f"--ambient-caps={caps}", "--", sys.executable, "-c", code, str(pulse_dir)],
                capture_output=True, text=True, timeout=60, env=env, check=False,
            )
            assert out.returncode == 0, out.stderr
            seen[caps] = out.stdout.strip()
        assert seen == {"+dac_read_search": "1", "-all": "0"}
    finally:
        job.kill()
        job.wait()
        shutil.rmtree(base, ignore_errors=True)


COMPACT_UNIT = ROOT / "contrib/systemd/gpu-triage-compact.service"
COMPACT_TIMER = ROOT / "contrib/systemd/gpu-triage-compact.timer"


def test_the_compact_timer_runs_compact_on_the_exporters_dataset_as_its_user() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(COMPACT_UNIT.read_text())
    service = parser["Service"]
    argv = service["ExecStart"].split()
    args = build_parser().parse_args(argv[1:])
    assert args.command == "compact" and args.keep_days and args.keep_days >= 1
    export = _unit()["Service"]
    assert args.dir.startswith(f"/var/lib/{export['StateDirectory']}/")
    assert service["StateDirectory"] == export["StateDirectory"]
    assert service["User"] == "gpu-triage-export"  # the exporter's dynamic user: the same name, the same uid
    assert f"--record {args.dir}" in UNIT.read_text()
    timer = configparser.ConfigParser(strict=False, interpolation=None)
    timer.read_string(COMPACT_TIMER.read_text())
    assert timer["Timer"]["OnCalendar"] and timer["Timer"]["Persistent"] == "true"


@pytest.mark.slow
def test_systemd_analyze_accepts_the_compact_units(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    service = tmp_path / COMPACT_UNIT.name
    service.write_text(re.sub(r"^ExecStart=\S+", f"ExecStart={sys.executable} -m gpu_triage",
                              COMPACT_UNIT.read_text(), flags=re.MULTILINE))
    timer = tmp_path / COMPACT_TIMER.name
    timer.write_text(COMPACT_TIMER.read_text())
    out = subprocess.run([analyze, "verify", str(service), str(timer)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr
