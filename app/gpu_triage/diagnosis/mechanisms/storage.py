"""The GPUs wait on storage: the dataset's reads, or one rank's checkpoint holding every other rank."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpu_triage.diagnosis.facts import Fact
from gpu_triage.diagnosis.mechanisms.base import (
    JOB_PRESENT,
    SEVERAL_CARDS,
    SM_KNOWN,
    WAITS,
    Advice,
    Cause,
    Rule,
    cards_text,
    gbs,
    ge,
    pct,
)
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern

if TYPE_CHECKING:
    from gpu_triage.diagnosis.measure import Measurements


class _DatasetReads(Rule):
    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return ["read fewer, larger files: a sharded sequential format (WebDataset tar shards, TFRecord, "
                "Parquet) instead of many small random reads",
                "cache the dataset in memory (or on local NVMe) after the first epoch if it fits",
                "more DataLoader workers and prefetch_factor=4 to keep more reads in flight"], []


class IdleStorage(_DatasetReads):
    name, bottleneck, patterns = Mechanism.IDLE_STORAGE, Bottleneck.STORAGE_IO, (Pattern.IDLE,)
    needs = (JOB_PRESENT,)

    def detect(self, m: Measurements) -> Cause | None:
        return self.cause(m.th.conf_idle_storage, m.base + m.storage) if m.storage else None


class Storage(_DatasetReads):
    name, bottleneck = Mechanism.STORAGE, Bottleneck.STORAGE_IO
    needs = (WAITS,)

    def detect(self, m: Measurements) -> Cause | None:
        if not m.storage:
            return None
        th = m.th
        return self.cause(min(th.conf_storage_max, th.conf_storage_base + th.conf_storage_per_sign * len(m.storage)),
                          m.base + m.storage)


class RankBlockedOnStorage(Rule):
    """One rank blocked in IO (a checkpoint with fsync) while the others spin at the next collective.

    Mechanism: the blocked rank's card drops; the others' NCCL kernels wait at the barrier and read ~100 %
    GPU-Util with low SM activity; the host shows the writes (disk busy, await, iowait or write bytes).
    Before the disk sees anything, ``torch.save`` of CUDA tensors copies them to host memory: the blocked
    card sends device-to-host (PCIe TX) with its SMs idle, and the bytes sit in the page cache until fsync
    (real lab checkpoints: 0.59-0.87 GB/s for the 2-5 s of the save, both sizes). That copy is named too,
    with less confidence: the disk has not confirmed it yet."""

    name, bottleneck = Mechanism.RANK_BLOCKED_ON_STORAGE, Bottleneck.STORAGE_IO
    needs = (SM_KNOWN, SEVERAL_CARDS)

    def detect(self, m: Measurements) -> Cause | None:
        th, hf = m.th, m.hf
        util, sm, waiting, blocked = _parted(m)
        # a checkpoint goes to the page cache first and hits the disk at fsync: a spike in any tick counts
        writes = ge(hf.disk_write_peak, th.disk_write_bytes_per_s)
        slow = ge(hf.await_peak_ms, th.await_ms)
        copying = [i for i in blocked if ge(m.stall_d2h.get(i, math.nan), th.d2h_bytes_per_s)]
        if not waiting or not blocked or not (m.storage or writes or slow or copying):
            return None
        ev = _write_facts(m, copying, writes, slow)
        names = " and ".join(f"rank {i}" for i in blocked)
        ev.insert(0, Fact(f"{cards_text(blocked)} dropped to GPU-Util "
                          f"{', '.join(pct(util[i]) for i in blocked)} while blocked on storage",
                          "gpu_util_mean_pct", min(util[i] for i in blocked), tuple(blocked)))
        ev.insert(1, Fact(f"{cards_text(waiting)}: GPU-Util ≥ {th.high_util_pct:.0f} % with SM activity "
                          f"< {th.sm_low_pct:.0f} %: waiting for {names} at a collective", "sm_active_mean_pct",
                          max(sm[i] for i in waiting), tuple(waiting)))
        disk = bool(m.storage or writes or slow)
        return self.cause(th.conf_rank_blocked if disk else th.conf_rank_blocked_d2h, ev, blocked)

    def advise(self, m: Measurements, cause: Cause) -> Advice:
        return ["write checkpoints asynchronously (torch.distributed.checkpoint async_save, or a thread) or "
                "from every rank's shard, so one rank's fsync does not stop all the others",
                "write to local NVMe and copy to shared storage in the background"], []


def _parted(m: Measurements) -> tuple[dict[int, float], dict[int, float], list[int], list[int]]:
    """Every card's GPU-Util and SM activity, the cards waiting at a collective and the ones that dropped:
    read over the ticks where the cards part ways (between checkpoints every rank computes)."""
    th = m.th
    util, sm = m.stall_util or m.all_util, m.stall_sm or m.all_sm
    waiting = [i for i, u in util.items() if u >= th.high_util_pct and sm.get(i, math.nan) < th.sm_low_pct]
    blocked = [i for i, u in util.items() if u < th.high_util_pct and i not in waiting]
    return util, sm, waiting, blocked


def _write_facts(m: Measurements, copying: list[int], writes: bool, slow: bool) -> list[Fact]:
    """What the host shows of a checkpoint: the disks, the copy off the card, the writes, the await."""
    hf = m.hf
    ev = list(m.storage)
    if copying:
        peak = max(m.stall_d2h[i] for i in copying)
        ev.append(Fact(f"{cards_text(copying)} copies up to {gbs(peak)} to the host with its SMs idle: tensors "
                       "moved off the card outside the step (torch.save of CUDA tensors goes through host "
                       "memory; the disk sees the bytes at fsync)", "pcie_tx_peak_bytes_per_s", peak,
                       tuple(copying)))
    if writes:
        ev.append(Fact(f"disk writes up to {gbs(hf.disk_write_peak)}: a checkpoint being written",
                       "disk_write_peak_bytes_per_s", hf.disk_write_peak))
    if slow and not any(f.metric == "disk_await_ms" for f in ev):
        ev.append(Fact(f"disk await up to {hf.await_peak_ms:.0f} ms", "disk_await_peak_ms", hf.await_peak_ms))
    return ev
