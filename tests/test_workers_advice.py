"""The one num_workers recommendation agrees with the facts it sits beside: busy cores without any worker are not
the loader's ("fewer would starve the GPU further" is no advice for num_workers=0), and children that do not hold a
busy training loop get no "more workers" advice."""

from __future__ import annotations

import dataclasses
import math

from gpu_triage.diagnosis.facts import HostFacts, ProcFacts
from gpu_triage.diagnosis.host_evidence import data_facts
from gpu_triage.diagnosis.thresholds import Thresholds


def _host(**kw: object) -> HostFacts:
    values: dict[str, object] = {}
    for f in dataclasses.fields(HostFacts):
        values[f.name] = kw.get(f.name, math.nan if f.type in ("float", float) else None)
    values.update(cores=kw.get("cores", 32), cores_pegged=kw.get("cores_pegged", 0), pegged_ids=[])
    return HostFacts(**values)  # type: ignore[arg-type]


def test_every_core_busy_with_num_workers_0_is_no_advice_to_keep_the_workers() -> None:
    host = _host(cpu_saturated_share=1.0, cpu_busy=95.0, gpu_mean=30.0)
    workers, facts, strong = data_facts(host, ProcFacts(seen=True, processes=1, workers=0), Thresholds(), {0: 30.0})
    assert workers.state != "cpu_full"
    assert "fewer would starve" not in (workers.line() or "")
    assert not any(f.metric == "cpu_busy_pct" for f in facts) and not strong


def test_pegged_children_beside_a_loop_busy_on_its_own_get_no_more_workers_advice() -> None:
    # one training process at 90 % of a core (not waiting for its children) and two pegged children
    procs = ProcFacts(seen=True, processes=1, workers=2, workers_total=2, workers_pegged=2, main_cpu=90.0)
    workers, facts, strong = data_facts(_host(gpu_mean=30.0), procs, Thresholds(), {0: 30.0})
    assert workers.state == "range" and not strong
