"""Why the GPUs wait: one small rule per mechanism, tried in order; the first that holds names the bottleneck.

Each rule is an object with a name (the mechanism), the bottleneck it names and ``detect(ctx)``, which
returns a :class:`Cause` (confidence and evidence as :class:`~gpu_triage.diagnosis.facts.Fact`) or None.
Every number a rule compares with or gives is a field of :class:`Thresholds`, explained in
docs/diagnosis.md. Advice for each mechanism is in advice.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_triage.diagnosis.facts import Fact, HostFacts, ProcFacts
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.units import fmt_rate


@dataclass(slots=True)
class Cause:
    bottleneck: str
    confidence: float
    evidence: list[Fact]
    mechanism: str = ""  # the rule that named it (advice.py keys on it)
    cards: list[int] | None = None  # the cards concerned, when not the pattern's


def ge(x: float, limit: float) -> bool:
    return not math.isnan(x) and x >= limit


def pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.0f} %"


def gbs(x: float) -> str:
    return fmt_rate(x)  # the project's one convention for rates (units.py)


def _cards(ids: Sequence[int]) -> str:
    return ("card " if len(ids) == 1 else "cards ") + ", ".join(map(str, ids))


@dataclass(frozen=True, slots=True)
class WorkersRec:
    """The one num_workers recommendation: from cores, training processes and measured worker saturation."""

    lo: int
    hi: int
    now: int | None  # num_workers now (None: no process information)
    state: str  # "too_few", "cpu_bound" (enough workers, each pegged), "cpu_full" (every core busy), "range"

    def line(self) -> str:
        now = "" if self.now is None else f" (now {self.now})"
        if self.state == "cpu_full":
            return (f"keep num_workers at or below {self.hi} per process{now}: every core is already busy, more "
                    "workers only add contention")
        if self.state == "cpu_bound":
            return (f"num_workers is already {self.now} (at least cores/2 = {self.hi} per process): make each "
                    "worker's preprocessing lighter rather than adding workers")
        lo = self.lo if self.now is None or self.state != "too_few" else max(self.lo, min(self.now + 1, self.hi))
        span = f"{lo}" if lo >= self.hi else f"{lo}..{self.hi}"
        return f"DataLoader(num_workers={span}){now}: between cores/4 and cores/2 per process"


@dataclass(slots=True)
class Context:
    """Everything a rule may read, computed once per verdict."""

    pattern: str
    hf: HostFacts
    pf: ProcFacts
    th: Thresholds
    n_gpus: int
    util: dict[int, float]  # mean GPU-Util of the cards the pattern concerns
    sm: dict[int, float]  # their SM activity
    all_util: dict[int, float]  # every card's
    all_sm: dict[int, float]
    link: dict[int, float]  # every card's PCIe + NVLink traffic over the judged ticks
    stall_util: dict[int, float] = field(default_factory=dict)  # every card's, over the ticks where the cards part ways
    stall_sm: dict[int, float] = field(default_factory=dict)
    stall_d2h: dict[int, float] = field(default_factory=dict)  # peak device-to-host bytes/s there, SMs idle
    quiet_wait_s: float = 0.0  # how long the waiting cards have waited with quiet links (whole window)
    procs_known: bool = True  # any process information in the window (containers may have none)
    loader_ruled_out: bool = False  # the job's own clock says its steps do not wait for data (find_cause)
    # derived in derive()
    gpu_line: Fact = field(default_factory=lambda: Fact(""))
    base: list[Fact] = field(default_factory=list)
    storage: list[Fact] = field(default_factory=list)
    data: list[Fact] = field(default_factory=list)
    workers: WorkersRec | None = None
    strong_data: bool = False

    @property
    def sm_known(self) -> bool:
        return not math.isnan(self.hf.sm_mean)

    @property
    def high(self) -> bool:
        return ge(self.hf.gpu_mean, self.th.high_util_pct)

    @property
    def waiting(self) -> list[int]:
        """Cards at high GPU-Util with low SM activity: kernels that wait (NCCL at a barrier), not compute."""
        th = self.th
        return [i for i, u in self.util.items() if u >= th.high_util_pct and self.sm.get(i, math.nan) < th.sm_low_pct]

    @property
    def no_sm_note(self) -> Fact:
        return Fact("SM activity not available on these cards (no GPM before Hopper): judged from GPU-Util alone")

    def derive(self) -> Context:
        hf, pf, th = self.hf, self.pf, self.th
        self.gpu_line = Fact(f"GPU-Util mean {pct(hf.gpu_mean)}, p5 {pct(hf.gpu_p5)}, p95 {pct(hf.gpu_p95)}",
                             "gpu_util_mean_pct", hf.gpu_mean, tuple(self.util))
        self.base = [self.gpu_line]
        if self.sm_known:
            self.base.append(Fact(f"SM activity mean {pct(hf.sm_mean)}", "sm_active_mean_pct", hf.sm_mean))
        # storage: what the disks do while the GPU waits
        st: list[Fact] = []
        if ge(hf.iowait, th.iowait_pct):
            st.append(Fact(f"iowait {pct(hf.iowait)}", "iowait_pct", hf.iowait))
        if ge(hf.disk_busy, th.disk_busy_pct):
            st.append(Fact(f"disk {hf.disk_name} {pct(hf.disk_busy)} busy", "disk_busy_pct", hf.disk_busy))
        if ge(hf.await_ms, th.await_ms):
            st.append(Fact(f"disk {hf.disk_name} await {hf.await_ms:.0f} ms", "disk_await_ms", hf.await_ms))
        elif st and not math.isnan(hf.await_ms):
            st.append(Fact(f"await {hf.await_ms:.1f} ms", "disk_await_ms", hf.await_ms))
        self.storage = st
        # data pipeline: what the cores and the DataLoader workers do while the GPU waits
        d: list[Fact] = []
        cpu_full = ge(hf.cpu_saturated_share, th.cpu_saturated_share)
        if cpu_full:
            d.append(Fact(f"CPU {pct(hf.cpu_busy)} busy on average over {hf.cores} cores while the GPU waits (at "
                          f"or above {th.cpu_saturated_pct:.0f} % in {hf.cpu_saturated_share * 100:.0f} % of those "
                          "ticks)", "cpu_busy_pct", hf.cpu_busy))
        few_cores = max(2, int(hf.cores / th.lone_cores_per_core))
        lone = 1 <= hf.cores_pegged <= few_cores and (math.isnan(hf.others_busy) or hf.others_busy < th.others_quiet_pct)
        # training processes: as seen, else one per working card (torchrun's layout)
        procs = pf.processes if pf.seen else max(1, sum(1 for u in self.all_util.values() if u >= th.idle_util_pct))
        per = max(hf.cores, 1) / procs
        lo, hi = max(1, int(per // 4)), max(1, int(per // 2))
        saturated = pf.workers_pegged >= 1 and (
            pf.workers_pegged >= th.workers_saturated_share * max(pf.workers_total, 1) or lone
            or pf.workers <= max(2, int(per / th.few_workers_per_core)))
        now = pf.workers if pf.seen else None
        if cpu_full:
            state = "cpu_full"
        elif saturated and pf.workers < hi:
            state = "too_few"
        elif saturated:
            state = "cpu_bound"
        else:
            state = "range"
        self.workers = WorkersRec(lo, hi, now, state)
        if saturated and not cpu_full:
            if lone and hf.cores_pegged >= 1:
                ids = ", ".join(map(str, hf.pegged_ids))
                where = (f"core {ids}" if len(hf.pegged_ids) == 1 else f"cores {ids}") if ids else (
                    f"{hf.cores_pegged} core{'s' if hf.cores_pegged != 1 else ''}")
                d.append(Fact(f"{where} at {pct(hf.max_core)} while the other {max(hf.cores - hf.cores_pegged, 0)} "
                              f"idle ({pct(hf.others_busy)})", "cpu_cores_pegged", float(hf.cores_pegged)))
            split = f" ({pf.workers} per process, {pf.processes} processes)" if pf.processes > 1 else ""
            tail = ("too few workers for this input pipeline" if state == "too_few"
                    else "preprocessing cannot keep up")
            d.append(Fact(f"{pf.workers_pegged} of {pf.workers_total} DataLoader workers{split} at 100 % of a core "
                          f"while the GPU waits: {tail}", "workers_pegged", float(pf.workers_pegged)))
        elif lone and not pf.seen and not (self.sm_known and hf.sm_mean < th.sm_idle_pct):
            state = "too_few"
            self.workers = WorkersRec(lo, hi, None, state)
            d.append(Fact(f"{hf.cores_pegged} of {hf.cores} cores pegged ({pct(hf.max_core)}) while the rest idle "
                          f"({pct(hf.others_busy)}): too few loader processes", "cpu_cores_pegged",
                          float(hf.cores_pegged)))
        if pf.respawns >= th.respawns_min:
            d.append(Fact(f"DataLoader worker pids changed {pf.respawns} times: workers re-spawned each epoch",
                          "worker_respawns", float(pf.respawns)))
        self.data = d
        self.strong_data = state == "too_few" or pf.respawns >= th.respawns_min or cpu_full
        return self


class Rule:
    """detect → evidence (a Cause) or None. ``patterns``: the patterns it applies to (empty: any)."""

    name = ""
    bottleneck = ""
    patterns: tuple[str, ...] = ()

    def applies(self, ctx: Context) -> bool:
        return not self.patterns or ctx.pattern in self.patterns

    def detect(self, ctx: Context) -> Cause | None:  # pragma: no cover - every rule overrides it
        raise NotImplementedError

    def cause(self, confidence: float, evidence: list[Fact], cards: list[int] | None = None) -> Cause:
        return Cause(self.bottleneck, confidence, evidence, self.name, cards)


def _job_present(ctx: Context) -> bool:
    """A process uses the GPUs; without process information, a card holds a context's worth of memory."""
    return ctx.pf.seen or (not ctx.procs_known and ge(ctx.hf.mem_frac, ctx.th.mem_context_frac))


class IdleStorage(Rule):
    name, bottleneck, patterns = "idle_storage", "storage_io", ("idle",)

    def detect(self, ctx: Context) -> Cause | None:
        if _job_present(ctx) and ctx.storage:
            return self.cause(ctx.th.conf_idle_storage, ctx.base + ctx.storage)
        return None


class IdleData(Rule):
    name, bottleneck, patterns = "idle_data", "data_pipeline", ("idle",)

    def detect(self, ctx: Context) -> Cause | None:
        if _job_present(ctx) and ctx.data:
            return self.cause(ctx.th.conf_idle_data, ctx.base + ctx.data)
        return None


class StartUp(Rule):
    """A job whose processes appeared on the cards and do not run yet, one of them busy on the host: imports,
    the CUDA context, building and moving the model, NCCL set-up, then the first steps. Its process holds a
    core while the cards idle, exactly as a loader with num_workers=0 would, but no step has run yet: nothing
    waits for input. (Real lab jobs: 4-8 s of it, SM activity 0.0 and card memory arriving.) The tracker
    shows it without letting it change the held verdict (tracker.py)."""

    name, bottleneck = "start_up", "none"  # any pattern: the judged stretch may still hold the job before it

    def detect(self, ctx: Context) -> Cause | None:
        pf, th = ctx.pf, ctx.th
        if math.isnan(pf.startup_s) or (not math.isnan(pf.startup_cpu) and pf.startup_cpu < th.others_quiet_pct):
            return None  # a process that appeared idle on the host waits for something else: not start-up
        mem = ""
        if not math.isnan(pf.startup_mem_from):
            mem = f"; card memory {pf.startup_mem_from / 2**30:.1f} → {pf.startup_mem_now / 2**30:.1f} GiB"
        cpu = "" if math.isnan(pf.startup_cpu) else f"; its process at {pct(pf.startup_cpu)} of a core"
        ran = ("no kernel since" if math.isnan(pf.startup_kernel_s)
               else f"its first kernels {pf.startup_kernel_s:.0f} s ago")
        return self.cause(th.conf_start_up, ctx.base + [Fact(
            f"the job appeared {pf.startup_s:.0f} s ago, {ran}{cpu}{mem}: starting up (imports, CUDA context, "
            "model build, first steps), not yet waiting for input", "startup_s", pf.startup_s)])


def _fed_slowly(ctx: Context) -> bool:
    """Since the job runs (the tick after the one where the last of its cards ran its first kernel), the
    GPU waited in most ticks, and kernels ran in those waits: a job fed slowly. A job starting up holds a
    core with idle cards too, but runs no kernel; a job that waits in a minority of its running ticks is a
    compute job ramping up (real DDP start: one tick at 71 %, then 97 %), not one starved of input."""
    pf, th = ctx.pf, ctx.th
    if pf.running_waits < 1 or 2 * pf.running_waits <= pf.running_ticks:
        return False
    return not ctx.sm_known or ge(pf.sm_running_waits, th.sm_fed_pct)


class IdleInProcess(Rule):
    """num_workers=0 with a model so small the cards read idle: the training process holds a whole core
    preparing batches while its cards run (almost) nothing."""

    name, bottleneck, patterns = "in_process_loader", "data_pipeline", ("idle",)

    def detect(self, ctx: Context) -> Cause | None:
        th, pf = ctx.th, ctx.pf
        if not (pf.seen and pf.workers == 0 and ge(pf.main_cpu, th.proc_busy_pct)) or _rank_held(ctx):
            return None
        # the cards are fed, slowly: some kernel runs (judged since the job's first kernel, see _fed_slowly)
        if not ctx.sm_known or not _fed_slowly(ctx):
            return None
        return self.cause(th.conf_idle_data, ctx.base + [Fact(
            f"the training process holds {pct(pf.main_cpu)} of a core while its cards run nothing, with no "
            "DataLoader workers (num_workers=0): it prepares the data itself", "main_process_cpu_pct", pf.main_cpu)])


class MemoryIdle(Rule):
    """Memory held on cards that run nothing, with nothing on the host that the job could be waiting for."""

    name, bottleneck, patterns = "memory_idle", "memory_idle", ("idle",)

    def detect(self, ctx: Context) -> Cause | None:
        hf = ctx.hf
        if not ge(hf.mem_frac, ctx.th.mem_held_frac):
            return None
        ev = [Fact(f"card {hf.mem_card} holds {hf.mem_frac * 100:.0f} % of its memory", "gpu_mem_used_frac",
                   hf.mem_frac, () if hf.mem_card is None else (hf.mem_card,)),
              Fact(ctx.gpu_line.text + ": no kernels run", "gpu_util_mean_pct", hf.gpu_mean)]
        if ctx.sm_known:
            ev.append(Fact(f"SM activity {pct(hf.sm_mean)}", "sm_active_mean_pct", hf.sm_mean))
        return self.cause(ctx.th.conf_memory_idle, ev)


class IdleNothing(Rule):
    name, bottleneck, patterns = "idle", "none", ("idle",)

    def detect(self, ctx: Context) -> Cause:
        seen = ctx.pf.seen
        return self.cause(ctx.th.conf_idle_waiting if seen else ctx.th.conf_idle_nothing, ctx.base + [
            Fact("no kernels run" + ("" if seen else " and no process uses the GPUs"))])


class RankBlockedOnStorage(Rule):
    """One rank blocked in IO (a checkpoint with fsync) while the others spin at the next collective.

    Mechanism: the blocked rank's card drops; the others' NCCL kernels wait at the barrier and read ~100 %
    GPU-Util with low SM activity; the host shows the writes (disk busy, await, iowait or write bytes).
    Before the disk sees anything, ``torch.save`` of CUDA tensors copies them to host memory: the blocked
    card sends device-to-host (PCIe TX) with its SMs idle, and the bytes sit in the page cache until fsync
    (real lab checkpoints: 0.59-0.87 GB/s for the 2-5 s of the save, both sizes). That copy is named too,
    with less confidence: the disk has not confirmed it yet."""

    name, bottleneck = "rank_blocked_on_storage", "storage_io"

    def detect(self, ctx: Context) -> Cause | None:
        th = ctx.th
        if not ctx.sm_known or ctx.n_gpus < 2:
            return None
        # read over the ticks where the cards part ways: between checkpoints every rank computes
        util, sm = ctx.stall_util or ctx.all_util, ctx.stall_sm or ctx.all_sm
        waiting = [i for i, u in util.items() if u >= th.high_util_pct and sm.get(i, math.nan) < th.sm_low_pct]
        blocked = [i for i, u in util.items() if u < th.high_util_pct and i not in waiting]
        # a checkpoint goes to the page cache first and hits the disk at fsync: a spike in any tick counts
        hf = ctx.hf
        writes = ge(hf.disk_write_peak, th.disk_write_bytes_per_s)
        slow = ge(hf.await_peak_ms, th.await_ms)
        copying = [i for i in blocked if ge(ctx.stall_d2h.get(i, math.nan), th.d2h_bytes_per_s)]
        if not waiting or not blocked or not (ctx.storage or writes or slow or copying):
            return None
        ev = list(ctx.storage)
        if copying:
            peak = max(ctx.stall_d2h[i] for i in copying)
            ev.append(Fact(f"{_cards(copying)} copies up to {gbs(peak)} to the host with its SMs idle: tensors "
                           "moved off the card outside the step (torch.save of CUDA tensors goes through host "
                           "memory; the disk sees the bytes at fsync)", "pcie_tx_peak_bytes_per_s", peak,
                           tuple(copying)))
        if writes:
            ev.append(Fact(f"disk writes up to {gbs(hf.disk_write_peak)}: a checkpoint being written",
                           "disk_write_peak_bytes_per_s", hf.disk_write_peak))
        if slow and not any(f.metric == "disk_await_ms" for f in ev):
            ev.append(Fact(f"disk await up to {hf.await_peak_ms:.0f} ms", "disk_await_peak_ms", hf.await_peak_ms))
        names = " and ".join(f"rank {i}" for i in blocked)
        ev.insert(0, Fact(f"{_cards(blocked)} dropped to GPU-Util "
                          f"{', '.join(pct(util[i]) for i in blocked)} while blocked on storage",
                          "gpu_util_mean_pct", min(util[i] for i in blocked), tuple(blocked)))
        ev.insert(1, Fact(f"{_cards(waiting)}: GPU-Util ≥ {th.high_util_pct:.0f} % with SM activity "
                          f"< {th.sm_low_pct:.0f} %: waiting for {names} at a collective", "sm_active_mean_pct",
                          max(sm[i] for i in waiting), tuple(waiting)))
        disk = bool(ctx.storage or writes or slow)
        return self.cause(th.conf_rank_blocked if disk else th.conf_rank_blocked_d2h, ev, blocked)


class HungCollective(Rule):
    """Ranks spinning in a collective with no traffic: a peer died, hung or never joined. No bytes move, so
    it is not the topology; the fix is to find the rank that is missing."""

    name, bottleneck = "hung_collective", "communication"

    def detect(self, ctx: Context) -> Cause | None:
        th, waiting = ctx.th, ctx.waiting
        working = [u for u in ctx.util.values() if u >= th.stall_util_pct]
        if not (ctx.sm_known and waiting and ctx.n_gpus >= 2 and len(waiting) * 2 >= max(1, len(working))):
            return None
        link = max((ctx.link.get(i, math.nan) for i in waiting), default=math.nan)
        # quiet over the judged stretch, or quiet for a regime's length now (a hang right after traffic)
        quiet_now = ctx.quiet_wait_s >= th.regime_min_s
        if not quiet_now and (math.isnan(link) or link >= th.link_quiet_bytes_per_s):
            return None
        if quiet_now:
            link = min(link, th.link_quiet_bytes_per_s) if not math.isnan(link) else 0.0
        hung = ctx.quiet_wait_s >= th.hung_min_s
        what = ("a hung collective: no traffic and no progress (a peer died, hung or never joined)" if hung
                else "a collective waiting with no traffic: a peer is late or gone")
        ev = ctx.base + [
            Fact(f"{_cards(waiting)}: GPU-Util ≥ {th.high_util_pct:.0f} % but SM activity "
                 f"< {th.sm_low_pct:.0f} %: kernels waiting, not computing", "sm_active_mean_pct",
                 max(ctx.sm[i] for i in waiting), tuple(waiting)),
            Fact(f"links under {gbs(th.link_quiet_bytes_per_s)} (PCIe + NVLink) for the last {ctx.quiet_wait_s:.0f} s: "
                 f"{what}",
                 "link_bytes_per_s", link, tuple(waiting)),
        ]
        return self.cause(th.conf_hung if hung else th.conf_comm_no_links, ev)


class Communication(Rule):
    """NCCL kernels waiting for a late rank hold their SMs and read 100 % GPU-Util (NVIDIA/nccl#403)."""

    name, bottleneck = "communication", "communication"

    def detect(self, ctx: Context) -> Cause | None:
        th, waiting = ctx.th, ctx.waiting
        working = [u for u in ctx.util.values() if u >= th.stall_util_pct]
        if not (ctx.sm_known and waiting and len(waiting) * 2 >= max(1, len(working))):
            return None
        link_ok = ge(ctx.hf.link_bytes_per_s, th.link_busy_bytes_per_s)
        if not (link_ok or ctx.n_gpus >= 2):
            return None
        ev = ctx.base + [Fact(f"{_cards(waiting)}: GPU-Util ≥ {th.high_util_pct:.0f} % but SM activity "
                              f"< {th.sm_low_pct:.0f} %: kernels waiting, not computing", "sm_active_mean_pct",
                              max(ctx.sm[i] for i in waiting), tuple(waiting))]
        if link_ok:
            ev.append(Fact(f"link traffic {gbs(ctx.hf.link_bytes_per_s)} on the busiest card", "link_bytes_per_s",
                           ctx.hf.link_bytes_per_s))
        strag = [i for i, u in ctx.util.items() if i not in waiting and u >= th.stall_util_pct]
        if strag:
            ev.append(Fact(f"{_cards(strag)} computes while the others wait: a straggler", None, None, tuple(strag)))
        return self.cause(th.conf_comm_links if link_ok else th.conf_comm_no_links, ev)


def _waits(ctx: Context) -> bool:
    return not ctx.high or ctx.pattern in ("sawtooth", "steady_low", "imbalanced")


class Storage(Rule):
    name, bottleneck = "storage", "storage_io"

    def detect(self, ctx: Context) -> Cause | None:
        if not (_waits(ctx) and ctx.storage):
            return None
        th = ctx.th
        return self.cause(min(th.conf_storage_max, th.conf_storage_base + th.conf_storage_per_sign * len(ctx.storage)),
                          ctx.base + ctx.storage)


class DataPipeline(Rule):
    """Every core busy, DataLoader workers pegged, or workers re-spawned each epoch while the GPU waits."""

    name, bottleneck = "data_pipeline", "data_pipeline"

    def detect(self, ctx: Context) -> Cause | None:
        if not (_waits(ctx) and ctx.data):
            return None
        th = ctx.th
        conf = th.conf_data_strong if ctx.strong_data else th.conf_data_weak
        ev = ctx.base + ctx.data
        if not ctx.sm_known:
            conf -= th.conf_no_sm_penalty
            ev.append(ctx.no_sm_note)
        return self.cause(conf, ev)


class HostToDeviceCopy(Rule):
    """Large batches copied from pageable host memory: PCIe RX of several GB/s while the SMs barely work.
    Kernel-launch overhead moves little over PCIe (real launch loops: ≤ 0.3 GB/s)."""

    name, bottleneck = "h2d_copy", "data_pipeline"

    def detect(self, ctx: Context) -> Cause | None:
        th, hf = ctx.th, ctx.hf
        if not (_waits(ctx) and not ctx.high and ge(hf.h2d_bytes_per_s, th.h2d_bytes_per_s)):
            return None
        if ctx.sm_known and hf.sm_mean >= th.sm_low_pct:
            return None
        ev = ctx.base + [Fact(f"PCIe host-to-device {gbs(hf.h2d_bytes_per_s)} on {_cards(hf.h2d_cards or [])} while "
                              "the SMs barely work: the step waits on copying batches to the card",
                              "pcie_rx_bytes_per_s", hf.h2d_bytes_per_s, tuple(hf.h2d_cards))]
        conf = th.conf_h2d
        if not ctx.sm_known:
            conf -= th.conf_no_sm_penalty
            ev.append(ctx.no_sm_note)
        return self.cause(conf, ev)


class LaunchOverhead(Rule):
    name, bottleneck = "launch_overhead", "launch_overhead"

    def detect(self, ctx: Context) -> Cause | None:
        th, hf = ctx.th, ctx.hf
        if not (_waits(ctx) and ctx.sm_known and ge(hf.gpu_mean, th.stall_util_pct) and hf.sm_mean < th.sm_idle_pct):
            return None
        return self.cause(th.conf_launch, ctx.base + [
            Fact(f"GPU-Util {pct(hf.gpu_mean)} with SM activity {hf.sm_mean:.1f} %: many tiny kernels, the GPU "
                 "waits on kernel launches", "sm_active_mean_pct", hf.sm_mean),
            Fact(f"no input pressure: CPU {pct(hf.cpu_busy)}, disks {pct(hf.disk_busy)}, iowait {pct(hf.iowait)}, "
                 f"PCIe host-to-device {gbs(hf.h2d_bytes_per_s)}", "cpu_busy_pct", hf.cpu_busy),
        ])


def _rank_held(ctx: Context) -> bool:
    """Some card waits at a collective (GPU-Util high, SM low) over the ticks where the cards part ways."""
    th = ctx.th
    util, sm = ctx.stall_util or ctx.all_util, ctx.stall_sm or ctx.all_sm
    return ctx.n_gpus >= 2 and any(u >= th.high_util_pct and sm.get(i, math.nan) < th.sm_low_pct
                                   for i, u in util.items())


class HostBoundStep(Rule):
    """The step is bound by the host thread that issues it: the job's own clock says its steps do not wait
    for data, its process holds a whole core, and the GPU is fed steadily below what it could do (no pauses:
    not a sawtooth). A process sleeping or waiting on a service would not hold a core; one loading data would
    show a data wait. What is left is the Python loop launching kernels (and small host work between them)
    faster than nothing but slower than the GPU runs them: launch overhead, whatever the kernels' size
    (real `gpu-triage baseline`, a 16.8 M-parameter MLP on 2 H200: GPU-Util 60-75 %, SM activity 33-36 %,
    the rank at ~92 % of a core, data wait a measured 0 %)."""

    name, bottleneck, patterns = "host_bound_step", "launch_overhead", ("steady_low", "single_card_busy", "imbalanced")

    def detect(self, ctx: Context) -> Cause | None:
        th, pf, hf = ctx.th, ctx.pf, ctx.hf
        if not (ctx.loader_ruled_out and _waits(ctx) and ge(hf.gpu_mean, th.stall_util_pct)):
            return None
        if not (pf.seen and ge(pf.main_cpu, th.proc_busy_pct)):
            return None
        return self.cause(th.conf_host_bound, ctx.base + [
            Fact(f"the training process holds {pct(pf.main_cpu)} of a core while the GPU is fed steadily at "
                 f"{pct(hf.gpu_mean)}: the host thread issuing the step is the limit (kernel launches and the "
                 "Python between them), not the data", "main_process_cpu_pct", pf.main_cpu)])


class InProcessLoader(Rule):
    """num_workers=0 (PyTorch's default): the training process loads data itself and holds ~100 % of one
    core. The scheduler moves it between cores, so no core looks pegged: the process's own CPU is read."""

    name, bottleneck = "in_process_loader", "data_pipeline"

    def detect(self, ctx: Context) -> Cause | None:
        th, pf = ctx.th, ctx.pf
        if not (_waits(ctx) and pf.seen and pf.workers == 0 and ge(pf.main_cpu, th.proc_busy_pct)):
            return None
        if _rank_held(ctx):  # DDP ranks spin at 100 % of a core while they wait at a collective: not loading
            return None
        if not _fed_slowly(ctx):
            return None  # no kernel while the GPU waits, or only a ramp: a job starting up, not one fed slowly
        fact = Fact(f"the training process holds {pct(pf.main_cpu)} of a core while the GPU waits, with no "
                    "DataLoader workers (num_workers=0): it loads the data itself", "main_process_cpu_pct", pf.main_cpu)
        if not ctx.sm_known:  # cannot tell in-process loading from tiny kernels without SM activity
            return Cause("launch_overhead", th.conf_launch_no_sm, ctx.base + [
                Fact("the training process holds one core and has no DataLoader workers: it either launches "
                     "many small kernels or loads data itself (num_workers=0)", "main_process_cpu_pct", pf.main_cpu),
                ctx.no_sm_note], "in_process_or_launch")
        return self.cause(th.conf_in_process, ctx.base + [fact])


class NoProcessInfo(Rule):
    """No process information (containers where NVML cannot map host PIDs): the cores still show a loader."""

    name, bottleneck = "no_process_info", "data_pipeline"

    def detect(self, ctx: Context) -> Cause | None:
        th, hf = ctx.th, ctx.hf
        if ctx.procs_known or not _waits(ctx) or ctx.pattern not in ("sawtooth", "steady_low"):
            return None
        if not ge(hf.cpu_cores_busy, th.proc_busy_pct / 100.0):
            return None
        return self.cause(th.conf_no_procs, ctx.base + [
            Fact(f"{hf.cpu_cores_busy:.1f} cores' worth of CPU busy (busiest core {pct(hf.max_core)}) while the "
                 "GPU waits", "cpu_cores_busy", hf.cpu_cores_busy),
            Fact("no process information (NVML maps no host PIDs here, as in many containers): the loader is "
                 "read from the cores alone")])


class StallUnexplained(Rule):
    name, bottleneck, patterns = "stall_unexplained", "stall_unexplained", ("sawtooth", "steady_low")

    def detect(self, ctx: Context) -> Cause | None:
        th, hf = ctx.th, ctx.hf
        if not _waits(ctx):
            return None
        conf = th.conf_stall_sawtooth if ctx.pattern == "sawtooth" else th.conf_stall_low
        if not ctx.sm_known:
            conf -= th.conf_no_sm_penalty
        parts = [(f"CPU {pct(hf.cpu_busy)} (busiest core {pct(hf.max_core)})", ge(hf.cpu_saturated_share, th.cpu_saturated_share)),
                 (f"disk {pct(hf.disk_busy)}", ge(hf.disk_busy, th.disk_busy_pct)),
                 (f"iowait {pct(hf.iowait)}", ge(hf.iowait, th.iowait_pct)),
                 (f"links {gbs(hf.link_stall_bytes_per_s)}", ge(hf.link_stall_bytes_per_s, th.link_busy_bytes_per_s))]
        quiet = [p for p, busy in parts if not busy]
        busy = [p for p, b in parts if b]
        text = "while the GPU waits: " + ", ".join(quiet) + (": all quiet" if not busy else " quiet")
        if busy:
            text += "; " + ", ".join(busy) + " busy but no rule names them"
        text += ", so the wait is in the job itself (sleeps, syncs, checkpoints, logging)"
        return self.cause(conf, ctx.base + [Fact(text, "link_stall_bytes_per_s", hf.link_stall_bytes_per_s)])


class Healthy(Rule):
    name, bottleneck = "none", "none"

    def detect(self, ctx: Context) -> Cause:
        th = ctx.th
        conf = th.conf_none_busy if ctx.sm_known and ge(ctx.hf.sm_mean, th.sm_low_pct) else th.conf_none_other
        ev = ctx.base + [Fact("the GPUs are kept busy" if ctx.high
                              else "nothing on the host explains the difference between the cards")]
        if not ctx.sm_known:
            ev.append(ctx.no_sm_note)
        return self.cause(conf, ev)


RULES: tuple[Rule, ...] = (
    StartUp(), IdleStorage(), IdleData(), IdleInProcess(), MemoryIdle(), IdleNothing(),
    RankBlockedOnStorage(), HungCollective(), Communication(),
    Storage(), DataPipeline(), HostToDeviceCopy(), LaunchOverhead(), HostBoundStep(), InProcessLoader(),
    NoProcessInfo(),
    StallUnexplained(), Healthy(),
)


# The rules that read an input pipeline from the host (cores, the training process's CPU, workers): they
# stand aside when the job's own clock says its steps do not wait for data (diagnosis/job.py). Not the
# host-to-device copy: it happens inside the step (``.to(device)``), after the loader has returned.
LOADER_RULES = frozenset({"idle_data", "in_process_loader", "data_pipeline", "no_process_info"})


def find_cause(ctx: Context, loader_ruled_out: bool = False) -> Cause:
    """The first rule that holds names the bottleneck (Healthy always holds); with ``loader_ruled_out``
    the rules in :data:`LOADER_RULES` are skipped (and the rules that need the loader ruled out may hold)."""
    ctx.loader_ruled_out = loader_ruled_out
    for rule in RULES:
        if loader_ruled_out and rule.name in LOADER_RULES:
            continue
        if rule.applies(ctx):
            cause = rule.detect(ctx)
            if cause is not None:
                return cause
    raise AssertionError("Healthy always holds")  # pragma: no cover


BOTTLENECKS: tuple[str, ...] = tuple(dict.fromkeys(["none"] + [r.bottleneck for r in RULES]))
