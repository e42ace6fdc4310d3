"""Write contrib/grafana/gpu-triage.json, the Grafana dashboard for `gpu-triage export`.

    python scripts/grafana_dashboard.py            # rewrite the file
    python scripts/grafana_dashboard.py --check    # exit 1 if the file differs (tests/test_contrib.py)

Generated, not hand-edited: forty panels of JSON drift; a script keeps the queries, units and layout in
one readable place. The layout reads top-down like the terminal dashboard: the verdict and its timeline,
then every card (GPU-Util with its min-max band inside the tick, SM activity beside it), then the host
(cores, iowait, memory, disks, network), then the job and whose it is, the GPU processes per owner, and the
cards' health (throttles, ECC, XID). A fleet overview across every exporter of the ``job`` comes first.
Variables: the Prometheus data source, ``job`` (the scrape job of the exporters), ``instance`` (one
exporter) and ``gpu`` (the cards repeated row by row).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "contrib" / "grafana" / "gpu-triage.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'instance=~"$instance"'
FLEET = 'job=~"$job"'  # the fleet overview: every exporter of the scrape job, not one instance
RATE = "[$__rate_interval]"  # counters: Grafana's window for rate(), at least four scrapes
INSTANCES = 'label_values(gpu_triage_build_info{job=~"$job"}, instance)'
THROTTLES = "power|thermal|hw-slowdown|hw-thermal|power-brake"  # the clock event reasons that slow a card


class Layout:
    """Panels placed left to right on Grafana's 24-column grid, wrapping to a new line."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []

    def add(self, panel: dict[str, Any], w: int, h: int) -> dict[str, Any]:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel["id"] = self.next_id
        self.next_id += 1
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_h = max(self.row_h, h)
        self.panels.append(panel)
        return panel

    def row(self, title: str, repeat: str | None = None) -> None:
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel: dict[str, Any] = {"type": "row", "title": title, "collapsed": False, "panels": []}
        if repeat:
            panel["repeat"] = repeat
        self.add(panel, 24, 1)
        self.x, self.y, self.row_h = 0, self.y + 1, 0


def target(expr: str, legend: str, ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def timeseries(
    title: str,
    targets: list[dict[str, Any]],
    unit: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    description: str = "",
    overrides: list[dict[str, Any]] | None = None,
    stack: bool = False,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": {
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if stack else "none"},
        },
    }
    if lo is not None:
        defaults["min"] = lo
    if hi is not None:
        defaults["max"] = hi
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    }


def stat(
    title: str, targets: list[dict[str, Any]], unit: str, *, text_mode: str = "value", description: str = ""
) -> dict[str, Any]:
    for t in targets:  # the current value only: a range query would also list the verdicts of the past hour
        t.update(instant=True, range=False)
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": text_mode,
            "colorMode": "none",
            "graphMode": "none",
        },
    }


def table(title: str, targets: list[dict[str, Any]], *, description: str = "") -> dict[str, Any]:
    """A table of instant queries, one row per series, merged on their common labels (one row per host)."""
    for t in targets:
        t.update(instant=True, range=False, format="table")
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm"},
        "transformations": [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}}},
        ],
    }


LOST = f"increase(gpu_triage_gpu_lost_seconds_total{{{FLEET}}}[$__range])"  # GPU-seconds lost over the range
# seconds judged with no figure (the covered cards read no GPU-Util): beside a GPU-h lost of 0 they say "cannot say"
UNMEASURED = f"increase(gpu_triage_gpu_lost_unmeasured_seconds_total{{{FLEET}}}[$__range])"


def what_to_fix_first() -> dict[str, Any]:
    """Hosts ranked by GPU-hours lost over the dashboard's range, each with the bottleneck that lost the most and
    whose job runs there: the summary's ranking (`diagnose DIR --summary`) from the exporters' counters."""
    panel = table(
        "What to fix first: GPU-hours lost over the range",
        [
            target(f"sum by (instance) ({LOST}) / 3600", "", "A"),
            target(f"topk by (instance) (1, sum by (instance, bottleneck) ({LOST})) / 3600", "", "B"),
            target(f"count by (instance, owner_kind, owner) (gpu_triage_owner_info{{{FLEET}}})", "", "C"),
            target(f"sum by (instance) ({UNMEASURED}) / 3600", "", "D"),
        ],
        description="Hosts by GPU-hours lost over the dashboard's time range (the cards each verdict covers x "
        "the time x their idle share; a hang: all of it: gpu_triage_gpu_lost_seconds_total, docs/diagnosis.md "
        "\"GPU-hours lost\"), the bottleneck that lost the most of them, and whose job runs there. Fix the top "
        "row first: `gpu-triage` on that host names the evidence and the knob. \"h of no figure\": hours judged "
        "while the cards read no GPU-Util (gpu_triage_gpu_lost_unmeasured_seconds_total): a host with those and 0 "
        "GPU-h lost cannot say what it lost, which is not nothing lost.",
    )
    panel["transformations"][1]["options"]["renameByName"] = {
        "instance": "host", "bottleneck": "lost most to", "Value #A": "GPU-h lost",
        "Value #B": "GPU-h lost to it", "owner_kind": "owner kind", "Value #C": "processes' owners",
        "Value #D": "h of no figure"}
    panel["options"]["sortBy"] = [{"displayName": "GPU-h lost", "desc": True}]
    panel["fieldConfig"]["defaults"]["decimals"] = 2
    return panel


def verdict_timeline(label: str, description: str | None = None) -> dict[str, Any]:
    """A state timeline of the shown verdict's ``label`` (bottleneck or pattern): one lane per value."""
    panel: dict[str, Any] = {"type": "state-timeline", "title": f"Verdict timeline ({label})"}
    if description:
        panel["description"] = description
    panel |= {
        "datasource": DS,
        "targets": [target(f"max by ({label}) (gpu_triage_verdict{{{SEL}}})", f"{{{{{label}}}}}")],
        "fieldConfig": {
            "defaults": {
                "color": {"mode": "palette-classic"},
                "mappings": [{"type": "value", "options": {"1": {"text": "shown"}}}],
            },
            "overrides": [],
        },
        "options": {"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
    }
    return panel


def build() -> dict[str, Any]:
    lay = Layout()

    lay.row("Fleet: every exporter of the job")
    lay.add(
        stat(
            "Exporters down",
            [target(f"count(up{{{FLEET}}} == 0) or vector(0)", "down")],
            "none",
            description="Exporters Prometheus could not scrape (up == 0): their hosts are not in the rows below.",
        ),
        4,
        6,
    )
    lay.add(
        stat(
            "Hosts per bottleneck",
            [target(f"count by (bottleneck) (gpu_triage_verdict{{{FLEET}}})", "{{bottleneck}}")],
            "none",
            text_mode="value_and_name",
            description="How many hosts show each bottleneck now (none: nothing holds the GPUs back).",
        ),
        8,
        6,
    )
    lay.add(
        table(
            "Hosts",
            [
                target(f"max by (instance, pattern, bottleneck) (gpu_triage_verdict{{{FLEET}}})", "", "A"),
                target(f"sum by (instance) (gpu_triage_gpu_utilization_ratio{{{FLEET}}})", "", "B"),
                target(f"sum by (instance) (gpu_triage_job_samples_per_second{{{FLEET}}})", "", "C"),
                target(f"count by (instance, owner_kind, owner) (gpu_triage_owner_info{{{FLEET}}})", "", "D"),
            ],
            description="One row per host: its verdict, GPU-Util summed over its cards (cards' worth of work), "
            "the job's samples/s where it has a pulse or a log, and whose job runs there.",
        ),
        12,
        6,
    )
    lay.add(what_to_fix_first(), 24, 8)

    lay.row("Verdict")
    lay.add(
        stat(
            "Verdict",
            [target(f"gpu_triage_verdict{{{SEL}}}", "{{pattern}} · {{bottleneck}} · cards {{cards}}")],
            "none",
            text_mode="name",
            description="The verdict the terminal dashboard shows: pattern, bottleneck and the cards concerned.",
        ),
        12,
        4,
    )
    lay.add(
        stat("Confidence", [target(f"gpu_triage_verdict_confidence_ratio{{{SEL}}}", "confidence")], "percentunit"), 4, 4
    )
    lay.add(
        stat(
            "Held for",
            [target(f"gpu_triage_verdict_age_seconds{{{SEL}}}", "held")],
            "s",
            description="Seconds since the shown verdict began.",
        ),
        4,
        4,
    )
    lay.add(stat("Cards lost", [target(f"sum(gpu_triage_gpu_lost{{{SEL}}})", "lost")], "none"), 4, 4)
    lay.add(
        verdict_timeline("bottleneck", "One lane per bottleneck: coloured while gpu-triage showed it."), 12, 7
    )
    lay.add(verdict_timeline("pattern"), 12, 7)

    lay.row("Cards: every card at a glance")
    lay.add(
        timeseries(
            "GPU-Util, all cards",
            [target(f"gpu_triage_gpu_utilization_ratio{{{SEL}}}", "GPU {{gpu}}")],
            "percentunit",
            lo=0,
            hi=1,
            description="Fixed 0-100 % scale, never auto-scaled: 100 % and 0 % must look different.",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "SM active, all cards",
            [target(f"gpu_triage_gpu_sm_active_ratio{{{SEL}}}", "GPU {{gpu}}")],
            "percentunit",
            lo=0,
            hi=1,
            description="GPM (Hopper and newer). GPU-Util high with SM low: kernels waiting (communication).",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Memory used",
            [
                target(f"gpu_triage_gpu_memory_used_bytes{{{SEL}}}", "GPU {{gpu}} used"),
            ],
            "bytes",
            lo=0,
            description="Held memory is not work.",
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "PCIe and NVLink",
            [
                target(f"rate(gpu_triage_gpu_pcie_rx_bytes_total{{{SEL}}}{RATE})", "GPU {{gpu}} PCIe rx", "A"),
                target(f"rate(gpu_triage_gpu_pcie_tx_bytes_total{{{SEL}}}{RATE})", "GPU {{gpu}} PCIe tx", "B"),
                target(f"rate(gpu_triage_gpu_nvlink_rx_bytes_total{{{SEL}}}{RATE})", "GPU {{gpu}} NVLink rx", "C"),
                target(f"rate(gpu_triage_gpu_nvlink_tx_bytes_total{{{SEL}}}{RATE})", "GPU {{gpu}} NVLink tx", "D"),
            ],
            "Bps",
            lo=0,
        ),
        8,
        8,
    )
    lay.add(timeseries("Power", [target(f"gpu_triage_gpu_power_watts{{{SEL}}}", "GPU {{gpu}}")], "watt", lo=0), 8, 8)

    # one row per card: util with the min-max band of the driver's samples inside the tick, SM beside it
    lay.row("GPU $gpu", repeat="gpu")
    card = f'{SEL},gpu="$gpu"'
    lay.add(
        timeseries(
            "GPU $gpu: GPU-Util (band: min-max inside the tick)",
            [
                target(f"gpu_triage_gpu_utilization_max_ratio{{{card}}}", "max", "A"),
                target(f"gpu_triage_gpu_utilization_min_ratio{{{card}}}", "min", "B"),
                target(f"gpu_triage_gpu_utilization_ratio{{{card}}}", "GPU-Util", "C"),
            ],
            "percentunit",
            lo=0,
            hi=1,
            overrides=[
                {
                    "matcher": {"id": "byName", "options": "max"},
                    "properties": [
                        {"id": "custom.fillBelowTo", "value": "min"},
                        {"id": "custom.lineWidth", "value": 0},
                        {"id": "custom.fillOpacity", "value": 25},
                    ],
                },
                {
                    "matcher": {"id": "byName", "options": "min"},
                    "properties": [{"id": "custom.lineWidth", "value": 0}, {"id": "custom.fillOpacity", "value": 0}],
                },
            ],
            description="A wide band: the card swung between idle and busy inside each tick "
            "(a sawtooth faster than the tick).",
        ),
        12,
        7,
    )
    lay.add(
        timeseries(
            "GPU $gpu: SM, tensor, DRAM activity",
            [
                target(f"gpu_triage_gpu_sm_active_ratio{{{card}}}", "SM active", "A"),
                target(f"gpu_triage_gpu_tensor_active_ratio{{{card}}}", "tensor", "B"),
                target(f"gpu_triage_gpu_dram_active_ratio{{{card}}}", "DRAM", "C"),
            ],
            "percentunit",
            lo=0,
            hi=1,
        ),
        12,
        7,
    )

    lay.row("Host")
    lay.add(
        timeseries(
            "CPU cores",
            [
                target(f"gpu_triage_host_cpu_busy_ratio{{{SEL}}}", "mean of all cores", "A"),
                target(f"gpu_triage_host_cpu_core_busy_max_ratio{{{SEL}}}", "busiest core", "B"),
                target(
                    f"gpu_triage_host_cpu_cores_saturated{{{SEL}}} / gpu_triage_host_cpu_cores{{{SEL}}}",
                    "share of cores >= 90 % busy",
                    "C",
                ),
            ],
            "percentunit",
            lo=0,
            hi=1,
            description="Every core full while the GPUs wait: the data pipeline. "
            "One core full: launch overhead or one starved worker.",
        ),
        8,
        8,
    )
    lay.add(
        timeseries("iowait", [target(f"gpu_triage_host_iowait_ratio{{{SEL}}}", "iowait")], "percentunit", lo=0, hi=1),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Host memory",
            [
                target(f"gpu_triage_host_memory_used_bytes{{{SEL}}}", "used", "A"),
                target(f"gpu_triage_host_memory_total_bytes{{{SEL}}}", "total", "B"),
            ],
            "bytes",
            lo=0,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Disk busy", [target(f"gpu_triage_host_disk_busy_ratio{{{SEL}}}", "{{disk}}")], "percentunit", lo=0, hi=1
        ),
        8,
        8,
    )
    lay.add(
        timeseries("Disk await", [target(f"gpu_triage_host_disk_await_seconds{{{SEL}}}", "{{disk}}")], "s", lo=0), 8, 8
    )
    lay.add(
        timeseries(
            "Disk throughput",
            [
                target(f"gpu_triage_host_disk_read_bytes_per_second{{{SEL}}}", "{{disk}} read", "A"),
                target(f"gpu_triage_host_disk_write_bytes_per_second{{{SEL}}}", "{{disk}} write", "B"),
            ],
            "Bps",
            lo=0,
        ),
        8,
        8,
    )

    lay.add(
        timeseries(
            "Network",
            [
                target(f"rate(gpu_triage_host_network_receive_bytes_total{{{SEL}}}{RATE})", "{{interface}} rx", "A"),
                target(f"rate(gpu_triage_host_network_transmit_bytes_total{{{SEL}}}{RATE})", "{{interface}} tx", "B"),
            ],
            "Bps",
            lo=0,
            description="Each interface, InfiniBand/RoCE ports as DEVICE/PORT (their RDMA traffic too).",
        ),
        24,
        8,
    )

    lay.row("Job: the training's own clock, and whose it is")
    lay.add(
        timeseries(
            "Samples per second",
            [target(f"gpu_triage_job_samples_per_second{{{SEL}}}", "samples/s")],
            "none",
            lo=0,
            description="From the job's pulse (gpu_triage.pulse) or its log (export --job-log); absent without.",
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Data wait and step time",
            [
                target(f"gpu_triage_job_data_wait_ratio{{{SEL}}}", "waiting for data (share of a step)", "A"),
                target(f"gpu_triage_job_rank_data_wait_ratio{{{SEL}}}", "rank {{rank}} waiting", "B"),
            ],
            "percentunit",
            lo=0,
            hi=1,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Seconds since progress",
            [target(f"gpu_triage_job_seconds_since_progress{{{SEL}}}", "since the last step")],
            "s",
            lo=0,
            description="Growing: the job has stopped stepping (GpuTriageNoJobProgress fires past 15 minutes).",
        ),
        8,
        8,
    )
    lay.add(
        table(
            "Whose job: owners of the GPU processes",
            [target(f"gpu_triage_owner_info{{{SEL}}}", "")],
            description="From each GPU process's cgroup (Slurm job, Kubernetes pod, container) and user.",
        ),
        24,
        6,
    )

    lay.row("GPU processes per owner")
    lay.add(
        timeseries(
            "GPU memory per owner",
            [
                target(
                    f"sum by (owner_kind, owner, gpu) (gpu_triage_process_gpu_memory_bytes{{{SEL}}})",
                    "{{owner_kind}} {{owner}} (GPU {{gpu}})",
                )
            ],
            "bytes",
            lo=0,
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "DataLoader workers and their CPU",
            [
                target(
                    f"sum by (owner_kind, owner) (gpu_triage_process_dataloader_workers{{{SEL}}})",
                    "{{owner_kind}} {{owner}} workers",
                    "A",
                ),
                target(
                    f"sum by (owner_kind, owner) (gpu_triage_process_dataloader_workers_cpu_cores{{{SEL}}})",
                    "{{owner_kind}} {{owner}} workers' CPU (cores)",
                    "B",
                ),
            ],
            "none",
            lo=0,
        ),
        12,
        8,
    )

    lay.row("Card health: throttles, ECC, XID")
    lay.add(
        {
            "type": "state-timeline",
            "title": "Throttle reasons",
            "description": "Coloured while a reason holds the card's clocks down (power cap, thermal, "
            "hardware slowdown, power brake). Idle and application clocks are not throttling.",
            "datasource": DS,
            "targets": [
                target(
                    f'max by (gpu, reason) (gpu_triage_gpu_clock_event_reason{{{SEL},reason=~"{THROTTLES}"}})',
                    "GPU {{gpu}} {{reason}}",
                )
            ],
            "fieldConfig": {
                "defaults": {
                    "color": {"mode": "thresholds"},
                    "thresholds": {"mode": "absolute", "steps": [{"color": "transparent", "value": None},
                                                                 {"color": "orange", "value": 1}]},
                    "mappings": [{"type": "value", "options": {"1": {"text": "throttled"}, "0": {"text": ""}}}],
                },
                "overrides": [],
            },
            "options": {"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
        },
        12,
        8,
    )
    lay.add(
        timeseries(
            "ECC errors and XID events (increase over 5 m)",
            [
                target(f"increase(gpu_triage_gpu_ecc_corrected_errors_total{{{SEL}}}[5m])", "GPU {{gpu}} ECC c", "A"),
                target(f"increase(gpu_triage_gpu_ecc_uncorrected_errors_total{{{SEL}}}[5m])", "GPU {{gpu}} ECC u", "B"),
                target(f"increase(gpu_triage_gpu_xid_events_total{{{SEL}}}[5m])", "GPU {{gpu}} XID", "C"),
            ],
            "none",
            lo=0,
            description="Any uncorrected ECC error or XID event deserves a look (dmesg, nvidia-smi -q).",
        ),
        12,
        8,
    )

    return {
        "title": "gpu-triage: why are the GPUs idle",
        "uid": "gpu-triage",
        "description": "gpu-triage export: the fleet, every card, the host, the job and the verdict. "
        "contrib/grafana/gpu-triage.json",
        "tags": ["gpu", "gpu-triage", "nvidia"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "graphTooltip": 1,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "job",
                    "label": "scrape job",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": "label_values(gpu_triage_build_info, job)", "refId": "job"},
                    "definition": "label_values(gpu_triage_build_info, job)",
                    "refresh": 2,
                    "sort": 1,
                    "multi": True,
                    "includeAll": True,
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "instance",
                    "label": "instance",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": INSTANCES, "refId": "instance"},
                    "definition": INSTANCES,
                    "refresh": 2,
                    "sort": 1,
                    "multi": False,
                    "includeAll": False,
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "gpu",
                    "label": "card",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": 'label_values(gpu_triage_gpu_lost{instance=~"$instance"}, gpu)', "refId": "gpu"},
                    "definition": 'label_values(gpu_triage_gpu_lost{instance=~"$instance"}, gpu)',
                    "refresh": 2,
                    "sort": 3,
                    "multi": True,
                    "includeAll": True,
                    "current": {},
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": lay.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file is not up to date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python scripts/grafana_dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
