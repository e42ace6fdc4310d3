"""The doctor's checks, all of them in display order, and :func:`run_checks`.

Each topic module registers its checks (:mod:`gpu_triage.doctor.registry`); :data:`REGISTRY` puts them in
display order, by module in :data:`ORDER` and in each module as written: the cards, the links, the host and
its software, then the planned job's gradient traffic (only with ``--params``), defined here because it
reads the links' analysis and comes last.
Nothing here reads the machine, so each rule is tested on machines built in the tests.
"""

from __future__ import annotations

from typing import Any

from gpu_triage.doctor import gpu_checks, host_checks, link_checks
from gpu_triage.doctor.facts import Facts
from gpu_triage.doctor.link_checks import TopologyAnalysis, analyse_topology
from gpu_triage.doctor.registry import REGISTERED, Check, CheckSpec, Finding, Status, live_gpus, register
from gpu_triage.units import fmt_bytes

#: Gradient traffic per step above this (mixed precision, at best) is worth a warning: it is the time the
#: step waits on links unless DDP's bucketed overlap hides it behind the backward pass.
TRAFFIC_WARN_S = 0.25

# -- gradient traffic -------------------------------------------------------------------------------


@register("traffic.gradients", "gradient traffic per step", needs="params", when="params")
def check_traffic(facts: Facts, topo: TopologyAnalysis, params: float) -> Finding:
    """params x 4 bytes x 2 per step in fp32 (a ring all-reduce sends and receives about twice the
    gradients), halved in mixed precision, over the slowest pair's link: the time spent on links at best."""
    fp32_bytes = params * 4 * 2
    mixed_bytes = fp32_bytes / 2
    data: dict[str, Any] = {"params": params, "bytes_fp32": fp32_bytes, "bytes_mixed": mixed_bytes,
                            "bandwidth_gbps": topo.bandwidth_gbps, "seconds_fp32": None, "seconds_mixed": None}
    size = (f"{params / 1e9:g}B parameters: {fmt_bytes(fp32_bytes, digits=0)} per step in fp32, "
            f"{fmt_bytes(mixed_bytes, digits=0)} in mixed precision")
    if topo.verdict in ("none", "single"):
        status: Status = "skip" if topo.verdict == "none" else "ok"
        return Finding(status, f"{size}; one card or none: no gradient exchange", "", data)
    if topo.bandwidth_gbps is None:
        return Finding("warn", f"{size}; link bandwidth n/a, so no time estimate",
                       "measure it: nccl-tests all_reduce_perf -b 1G -e 4G -g <cards>", data)
    bw = topo.bandwidth_gbps * 1e9
    s32, s16 = fp32_bytes / bw, mixed_bytes / bw
    data.update(seconds_fp32=s32, seconds_mixed=s16)
    summary = (f"{size}; over {topo.slowest} (~{topo.bandwidth_gbps:.0f} GB/s) at least {s32:.2f} s per step fp32, "
               f"{s16:.2f} s mixed")
    if s16 >= TRAFFIC_WARN_S:
        return Finding("warn", summary,
                       "unless the backward pass takes longer (DDP overlaps buckets with it), steps wait on the links: "
                       "accumulate gradients (no_sync) to all-reduce less often, keep gradients in bf16, or use "
                       "faster-linked cards", data)
    return Finding("ok", summary, "", data)


#: The report's order, by module (whatever order they were imported in).
ORDER = (gpu_checks.__name__, link_checks.__name__, host_checks.__name__, __name__)
#: Every check, in display order.
REGISTRY: list[CheckSpec] = sorted(REGISTERED, key=lambda spec: ORDER.index(spec.func.__module__))


def run_checks(facts: Facts, params: float | None = None) -> tuple[list[Check], TopologyAnalysis]:
    """Every registered check that applies, in display order. Without GPUs only gpu.driver stands for the
    GPU part; traffic.gradients runs only with a parameter count."""
    topo = analyse_topology(facts)
    cards = bool(live_gpus(facts))
    checks: list[Check] = []
    for spec in REGISTRY:
        if (spec.when == "cards" and not cards) or (spec.when == "params" and params is None):
            continue
        if spec.needs == "facts":
            found = spec.func(facts)
        elif spec.needs == "topology":
            found = spec.func(facts, topo)
        else:
            found = spec.func(facts, topo, params)
        checks.append(Check(spec.id, found.status, found.summary, found.advice, found.data))
    return checks, topo
