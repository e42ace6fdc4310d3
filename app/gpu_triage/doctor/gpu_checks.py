"""The doctor's checks of the cards themselves: driver, model, persistence, MIG, ECC, clocks, PCIe link,
memory and the processes on them. Pure functions of the facts; thresholds with the reason next to them."""

from __future__ import annotations

from typing import Any

from gpu_triage.doctor.facts import Facts
from gpu_triage.doctor.registry import Finding, card_list, live_gpus, register
from gpu_triage.units import fmt_bytes

GIB = 1024**3
#: An idle card reports a few hundred MiB used by the driver itself; beyond this with no process listed,
#: something (a crashed job's zombie, another container) holds memory the next job will miss.
LEFTOVER_BYTES = 1 * GIB

# nvmlClocksEventReason* bits (nvml.h).
REASON_IDLE = 0x1
REASON_APP_CLOCKS = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80
REASON_DISPLAY_CLOCKS = 0x100
_REASON_NAMES = {
    REASON_IDLE: "idle",
    REASON_APP_CLOCKS: "application clocks",
    REASON_SW_POWER_CAP: "software power cap",
    REASON_HW_SLOWDOWN: "hardware slowdown",
    REASON_SYNC_BOOST: "sync boost",
    REASON_SW_THERMAL: "software thermal slowdown",
    REASON_HW_THERMAL: "hardware thermal slowdown",
    REASON_HW_POWER_BRAKE: "hardware power brake",
    REASON_DISPLAY_CLOCKS: "display clocks",
}
_REASONS_FAIL = REASON_HW_SLOWDOWN | REASON_HW_THERMAL | REASON_HW_POWER_BRAKE
_REASONS_WARN = REASON_SW_THERMAL | REASON_SW_POWER_CAP


@register("gpu.driver", "driver and cards")
def check_driver(facts: Facts) -> Finding:
    if facts.gpu_error is not None or not facts.gpus:
        reason = facts.gpu_error or "no GPU listed"
        return Finding("fail", f"no GPU found: {reason}",
                       "install or load the NVIDIA driver (nvidia-smi must work), or run on the GPU machine; "
                       "host and software checks below still apply",
                       {"error": reason})
    lost = [g.index for g in facts.gpus if g.lost]
    data = {"driver": facts.driver_version, "cuda_driver": facts.cuda_driver_version, "gpus": len(facts.gpus),
            "lost": lost}
    summary = (f"{len(facts.gpus)} GPU(s), driver {facts.driver_version or 'n/a'}, CUDA "
               f"{facts.cuda_driver_version or 'n/a'}")
    if lost:
        return Finding("fail", f"{summary}; {card_list(lost)} stopped answering (GPU is lost)",
                       "the card fell off the bus: check dmesg for Xid errors, drain the node and reset or reboot",
                       data)
    return Finding("ok", summary, "", data)


@register("gpu.model", "card models", when="cards")
def check_model(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    names = sorted({g.name or "n/a" for g in gpus})
    data = {"models": names, "memory_bytes": [g.mem_total_bytes for g in gpus]}
    if len(names) > 1:
        return Finding("warn", f"mixed models: {', '.join(names)}",
                       "data-parallel steps run at the pace of the slowest card: use one model per job "
                       "(CUDA_VISIBLE_DEVICES)", data)
    mem = gpus[0].mem_total_bytes if gpus else None
    return Finding("ok", f"{len(gpus)} x {names[0] if names else 'n/a'}, {fmt_bytes(mem)} each", "", data)


@register("gpu.persistence", "persistence mode", when="cards")
def check_persistence(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    off = [g.index for g in gpus if g.persistence is False]
    unknown = all(g.persistence is None for g in gpus)
    data = {"off": off}
    if off:
        return Finding("warn", f"persistence mode off on {card_list(off)}",
                       "sudo nvidia-smi -pm 1 (or run nvidia-persistenced): otherwise the driver tears down between "
                       "jobs and each start pays seconds", data)
    if unknown:
        return Finding("skip", "persistence mode n/a", "", data)
    return Finding("ok", "persistence mode on", "", data)


@register("gpu.mig", "MIG mode", when="cards")
def check_mig(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    on = [g.index for g in gpus if g.mig_enabled]
    pending = [g.index for g in gpus
               if g.mig_pending is not None and g.mig_enabled is not None and g.mig_pending != g.mig_enabled]
    data = {"enabled": on, "pending_change": pending}
    if pending:
        return Finding("warn", f"MIG mode change pending on {card_list(pending)}",
                       "the change applies after a GPU reset (nvidia-smi -r) or a reboot", data)
    if on:
        return Finding("warn", f"MIG enabled on {card_list(on)}: a job sees slices, not whole cards",
                       "if you meant whole cards: sudo nvidia-smi -i N -mig 0; NCCL does not work across MIG "
                       "instances", data)
    unknown = all(g.mig_enabled is None for g in gpus)
    if unknown:
        return Finding("skip", "MIG n/a (not supported)", "", data)
    return Finding("ok", "MIG off", "", data)


@register("gpu.ecc", "uncorrected ECC errors", when="cards")
def check_ecc(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    counts = {g.index: g.ecc_uncorrected for g in gpus}
    bad = [i for i, n in counts.items() if n]
    data = {"volatile_uncorrected": {str(i): n for i, n in counts.items()}}
    if bad:
        detail = ", ".join(f"card {i}: {counts[i]}" for i in bad)
        return Finding("fail", f"uncorrected ECC errors since the driver loaded ({detail})",
                       "results on these cards may be wrong: drain them, check nvidia-smi -q -d ECC,PAGE_RETIREMENT "
                       "and "
                       "reset or replace", data)
    if all(n is None for n in counts.values()):
        return Finding("skip", "ECC error counts n/a (ECC off or not reported)", "", data)
    return Finding("ok", "no uncorrected ECC errors", "", data)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in _REASON_NAMES.items() if mask & bit]


@register("gpu.clocks", "clock slowdowns", when="cards")
def check_clocks(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    failing = {g.index: g.clock_reasons for g in gpus if g.clock_reasons and g.clock_reasons & _REASONS_FAIL}
    warning = {g.index: g.clock_reasons for g in gpus if g.clock_reasons and g.clock_reasons & _REASONS_WARN}
    data = {"reasons": {str(g.index): reason_names(g.clock_reasons) if g.clock_reasons is not None else None
                        for g in gpus}}
    if failing:
        detail = "; ".join(f"card {i}: {', '.join(reason_names(m & _REASONS_FAIL))}" for i, m in failing.items())
        return Finding("fail", f"clocks held down by the hardware ({detail})",
                       "check cooling, power supply and cabling (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); "
                       "these "
                       "cards will be the slow rank", data)
    if warning:
        detail = "; ".join(f"card {i}: {', '.join(reason_names(m & _REASONS_WARN))}" for i, m in warning.items())
        return Finding("warn", f"clocks capped ({detail})",
                       "normal at full load on the power limit; at idle it means heat or a lowered limit (nvidia-smi "
                       "-q "
                       "-d PERFORMANCE,POWER)", data)
    if all(g.clock_reasons is None for g in gpus):
        return Finding("skip", "clock event reasons n/a", "", data)
    return Finding("ok", "no thermal or power slowdown", "", data)


@register("gpu.pcie", "PCIe link width and generation", when="cards")
def check_pcie(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    narrow = [g for g in gpus
              if g.pcie_width is not None and g.pcie_width_max is not None and g.pcie_width < g.pcie_width_max]
    slow_gen = [g for g in gpus if g not in narrow
                and g.pcie_gen is not None and g.pcie_gen_max is not None and g.pcie_gen < g.pcie_gen_max]
    data = {
        str(g.index): {"gen": g.pcie_gen, "gen_max": g.pcie_gen_max,
                       "width": g.pcie_width, "width_max": g.pcie_width_max}
        for g in gpus
    }
    if narrow:
        detail = ", ".join(f"card {g.index} x{g.pcie_width} of x{g.pcie_width_max}" for g in narrow)
        return Finding("fail", f"PCIe link narrower than the card allows ({detail})",
                       "a narrow link halves host<->card copies: reseat the card or its riser, or move it to a "
                       "full-width slot", data)
    if slow_gen:
        detail = ", ".join(f"card {g.index} gen{g.pcie_gen} of gen{g.pcie_gen_max}" for g in slow_gen)
        return Finding("warn", f"PCIe link below its top generation ({detail}), full width",
                       "idle cards lower the PCIe generation to save power: check under load (nvidia-smi -q -d PCIE "
                       "while training)", data)
    known = [g for g in gpus if g.pcie_width is not None]
    if not known:
        return Finding("skip", "PCIe link n/a", "", data)
    g = known[0]
    return Finding("ok", f"PCIe links at full width (card {g.index}: gen{g.pcie_gen} x{g.pcie_width})", "", data)


@register("gpu.memory", "memory held without a process", when="cards")
def check_memory(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    leftover = [g for g in gpus if g.processes == [] and (g.mem_used_bytes or 0) > LEFTOVER_BYTES]
    data = {str(g.index): {"used": g.mem_used_bytes, "total": g.mem_total_bytes,
                           "processes": None if g.processes is None else len(g.processes)} for g in gpus}
    if leftover:
        detail = ", ".join(f"card {g.index}: {fmt_bytes(g.mem_used_bytes)}" for g in leftover)
        return Finding("warn", f"memory in use with no process on the card ({detail})",
                       "a leftover from an earlier job (a zombie or another container): the first step may run out of "
                       "memory; "
                       "find it with sudo fuser -v /dev/nvidia* and end it, or reset the card", data)
    return Finding("ok", "no memory held without a process", "", data)


@register("gpu.processes", "processes on the cards", when="cards")
def check_processes(facts: Facts) -> Finding:
    gpus = live_gpus(facts)
    others: list[tuple[int, Any]] = []
    mine: list[tuple[int, Any]] = []
    hidden: list[tuple[int, Any]] = []
    for g in gpus:
        for p in g.processes or []:
            if p.uid is None:
                hidden.append((g.index, p))
            elif facts.uid is not None and p.uid != facts.uid:
                others.append((g.index, p))
            else:
                mine.append((g.index, p))

    def describe(items: list[tuple[int, Any]]) -> str:
        return ", ".join(f"card {i}: pid {p.pid}" + (f" {p.username}" if p.username else "")
                         + (f" {fmt_bytes(p.used_bytes)}" if p.used_bytes is not None else "")
                         for i, p in items[:6]) + (" ..." if len(items) > 6 else "")

    data = {
        "other_users": [{"card": i, "pid": p.pid, "user": p.username, "used_bytes": p.used_bytes} for i, p in others],
        "yours": [{"card": i, "pid": p.pid, "name": p.name, "used_bytes": p.used_bytes} for i, p in mine],
        "not_visible": [{"card": i, "pid": p.pid, "used_bytes": p.used_bytes} for i, p in hidden],
    }
    if others:
        return Finding("warn", f"other users' processes on the cards ({describe(others)})",
                       "you share these cards: expect less memory and slower steps; pick free cards with "
                       "CUDA_VISIBLE_DEVICES or ask the owner", data)
    if hidden:
        return Finding("warn", f"processes not visible from here hold cards ({describe(hidden)})",
                       "another container or user: check with the machine's owner before training on these cards", data)
    if mine:
        return Finding("ok", f"only your processes on the cards ({describe(mine)})",
                       "if no job of yours should be running, one from an earlier run is still alive", data)
    if all(g.processes is None for g in gpus):
        return Finding("skip", "process list n/a", "", data)
    return Finding("ok", "no process on the cards", "", data)
