"""The GPUs wait for input: busy cores, pegged or re-spawned DataLoader workers, batches copied from pageable
memory (a training process that loads the data itself is read from its stacks, ``inside.py``; from outside it
looks like its own CPU work, ``one_core.py``).

Starting points are the method's (field notes): ``num_workers`` one number with its reason
(:class:`~gpu_triage.diagnosis.host_evidence.WorkersRec`, measured once per verdict, from the job's own samples/s
where a job source reports it: never fewer workers on a CPU-bound pipeline, none when the workers are not what
holds the GPU),
``pin_memory=True``, ``prefetch_factor`` 2-4, ``persistent_workers=True``, ``drop_last=True`` with several
cards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import (
    JOB_PRESENT,
    WAITS,
    Advice,
    Cause,
    Rule,
    cards_text,
    gbs,
    ge,
    pct,
)
from gpu_triage.diagnosis.mechanisms.stall import unexplained
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


def pipeline_advice(m: Measurements, mech: Mechanism) -> list[str]:
    """What to change in the input pipeline; ``mech`` narrows it (a copy, or no workers at all)."""
    out: list[str] = []
    pf, th = m.pf, m.th
    own = mech in (Mechanism.H2D_COPY, Mechanism.IN_PROCESS_LOADER)  # advice of its own instead of workers'
    if mech == Mechanism.H2D_COPY and m.high:
        out.append("the copies already run near PCIe speed and keep the card busy: send fewer bytes (uint8 "
                   "images, bf16), decode/augment on the GPU, or keep reused data on the card between steps")
    elif mech == Mechanism.H2D_COPY:
        out.append("DataLoader(pin_memory=True) and .to(device, non_blocking=True): copies from pinned memory "
                   "run at full PCIe speed and overlap compute")
        out.append("send smaller dtypes (uint8 images, bf16) and decode/augment on the GPU")
    elif mech == Mechanism.IN_PROCESS_LOADER:
        hi = m.workers.hi
        span = "2" if hi <= 2 else f"2..{hi}"
        out.append(f"DataLoader(num_workers={span}) (now 0): PyTorch's default num_workers=0 loads every batch "
                   "in the training process, between steps")
    if pf.respawns >= th.respawns_min:
        out.append("DataLoader(persistent_workers=True): keep the workers alive between epochs instead of "
                   "re-spawning them (and their slow start) every epoch")
    if m.hf.cpu_saturated_share >= th.cpu_saturated_share:
        out.append("every core is busy preparing input: make preprocessing lighter (decode once, resize "
                   "offline, faster image decoder) or move augmentation to the GPU (DALI, torchvision v2 on cuda)")
    line = None if own else m.workers.line()
    if line is None and mech == Mechanism.JOB_DATA_WAIT:
        line = m.workers.waiting_line()
    if line is not None:
        out.append(line)
    if mech != Mechanism.H2D_COPY:
        out.append("pin_memory=True and prefetch_factor=2..4 so batches are ready before the GPU asks")
    if pf.respawns < th.respawns_min and not own:
        out.append("persistent_workers=True so workers survive the epoch boundary")
    if m.n_gpus >= 2:
        out.append("drop_last=True with several cards, so no rank waits on a short last batch")
    return out


class _Pipeline(Rule):
    bottleneck = Bottleneck.DATA_PIPELINE

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return pipeline_advice(m, cause.mechanism), []


class IdleData(_Pipeline):
    name, patterns, needs, reads_loader = Mechanism.IDLE_DATA, (Pattern.IDLE,), (JOB_PRESENT,), True

    def detect(self, m: Measurements) -> Cause | None:
        return self.cause(m.th.conf_idle_data, m.base + m.data) if m.data else None


class DataPipeline(_Pipeline):
    """Every core busy, DataLoader workers pegged, or workers re-spawned each epoch while the GPU waits."""

    name, needs, reads_loader = Mechanism.DATA_PIPELINE, (WAITS,), True
    also = (Mechanism.JOB_DATA_WAIT,)  # the job's clock names the pipeline: the same advice

    def detect(self, m: Measurements) -> Cause | None:
        if not m.data:
            return None
        th = m.th
        conf = th.conf_data_strong if m.strong_data else th.conf_data_weak
        ev = m.base + m.data
        if not m.sm_known:
            conf -= th.conf_no_sm_penalty
            ev.append(m.no_sm_note)
        return self.cause(conf, ev)


class HostToDeviceCopy(_Pipeline):
    """Large batches copied from pageable host memory: PCIe RX of several GB/s while the SMs barely work.
    Kernel-launch overhead moves little over PCIe (real launch loops: ≤ 0.3 GB/s)."""

    name = Mechanism.H2D_COPY

    def detect(self, m: Measurements) -> Cause | None:
        th, hf = m.th, m.hf
        if not ge(hf.h2d_bytes_per_s, th.h2d_bytes_per_s):
            return None
        if m.sm_known and hf.sm_mean >= th.sm_low_pct:
            return None
        # GPU-Util counts the copy as busy: on one card (no peer to wait for) high GPU-Util with idle SMs and
        # the host sending tens of GB/s is the copy (real 1-card pinned copies: 98 %, SM 3.5 %, 54 GB/s)
        copy_busy = m.high and m.n_gpus == 1 and m.sm_known and hf.sm_mean < th.sm_idle_pct
        if not (m.waits or copy_busy):
            return None
        trip = m.round_trip
        if trip is not None:
            return unexplained(m, [Fact(
                f"PCIe {gbs(trip[0])} to the card and {gbs(trip[1])} back: bytes go both ways every step "
                "(gradients down, parameters up: an optimizer or a model part on the host?), not input batches",
                "pcie_tx_bytes_per_s", trip[1])])
        what = ("GPU-Util counts the copies as busy while the SMs idle: the card is copying, one card has no "
                "one to talk to") if copy_busy else "the step waits on copying batches to the card"
        ev = m.base + [Fact(f"PCIe host-to-device {gbs(hf.h2d_bytes_per_s)} on {cards_text(hf.h2d_cards or [])} "
                            f"while the SMs barely work: {what}",
                            "pcie_rx_bytes_per_s", hf.h2d_bytes_per_s, tuple(hf.h2d_cards))]
        conf = th.conf_h2d
        if not m.sm_known:
            conf -= th.conf_no_sm_penalty
            ev.append(m.no_sm_note)
        return self.cause(conf, ev)


class NoProcessInfo(_Pipeline):
    """No process information (containers where NVML cannot map host PIDs): the cores still show a loader."""

    name, patterns, needs = Mechanism.NO_PROCESS_INFO, (Pattern.SAWTOOTH, Pattern.STEADY_LOW), (WAITS,)
    reads_loader = True

    def detect(self, m: Measurements) -> Cause | None:
        th, hf = m.th, m.hf
        if m.procs_known or not ge(hf.cpu_cores_busy, th.proc_busy_pct / 100.0):
            return None
        return self.cause(th.conf_no_procs, m.base + [
            Fact(f"{hf.cpu_cores_busy:.1f} cores' worth of CPU busy (busiest core {pct(hf.max_core)}) while the "
                 "GPU waits", "cpu_cores_busy", hf.cpu_cores_busy),
            Fact("no process information (NVML maps no host PIDs here, as in many containers): the loader is "
                 "read from the cores alone")])
