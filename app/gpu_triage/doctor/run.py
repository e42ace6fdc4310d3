"""``gpu-triage doctor``: gather the facts, run the checks, print them; exit 1 when a check fails.

:func:`collect_report` is also what the dashboard's doctor screen calls, in a worker thread: gathering
asks NVML for every pair of cards and starts a child Python to read torch's versions, which takes seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpu_triage import __version__
from gpu_triage.doctor.checks import run_checks
from gpu_triage.doctor.facts import Facts, gather_facts, probe_torch
from gpu_triage.doctor.link_checks import TopologyAnalysis
from gpu_triage.doctor.registry import Check, worst
from gpu_triage.errors import UserError

#: Keys of the JSON report; scripts rely on them, so they only ever grow.
JSON_KEYS = ("version", "status", "checks", "topology", "host", "gpus", "software")


@dataclass(slots=True)
class Report:
    facts: Facts
    checks: list[Check]
    topology: TopologyAnalysis
    params: float | None = None

    @property
    def status(self) -> str:
        return worst([c.status for c in self.checks])

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "fail" else 0

    def check(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_json_obj(self) -> dict[str, Any]:
        f = self.facts
        return {
            "version": __version__,
            "status": self.status,
            "checks": [c.to_json_obj() for c in self.checks],
            "topology": {
                "matrix": [list(r) for r in f.topology],
                "gpus": [{"index": g.index, "bus_id": g.bus_id} for g in f.gpus],
                **self.topology.to_json_obj(),
            },
            "host": asdict(f.host) | {"numa_nodes": {str(k): v for k, v in f.host.numa_nodes.items()}},
            "gpus": {
                "error": f.gpu_error,
                "driver_version": f.driver_version,
                "cuda_driver_version": f.cuda_driver_version,
                "cards": [asdict(g) for g in f.gpus],
            },
            "software": asdict(f.software),
        }


def build_report(facts: Facts, params: float | None = None) -> Report:
    checks, topo = run_checks(facts, params)
    return Report(facts=facts, checks=checks, topology=topo, params=params)


def collect_report(
    params: float | None = None,
    nvml_module: Any | None = None,
    psutil_module: Any | None = None,
    env: Mapping[str, str] | None = None,
    sysfs: Path = Path("/sys"),
    torch_probe: Callable[[], dict[str, Any]] | None = probe_torch,
) -> Report:
    """Read the machine and judge it. Blocking (seconds): call it off the UI thread."""
    facts = gather_facts(
        nvml_module=nvml_module, psutil_module=psutil_module, env=env, sysfs=sysfs, torch_probe=torch_probe
    )
    return build_report(facts, params)


def check_params(params: float | None) -> float | None:
    if params is None:
        return None
    if not params > 0 or params != params or params == float("inf"):
        raise UserError(f"--params {params:g}: give the model's parameter count, a positive number such as 7e9")
    return params
