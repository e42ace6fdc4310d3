"""Thresholds of the diagnosis, each derived from a mechanism or a public figure (see docs/diagnosis.md).

Every number a rule compares with, and every confidence a rule gives, lives here: a rule in mechanisms/
names the field it uses, docs/diagnosis.md gives its reason. They are configurable under ``[diagnosis]``
in the config file; every field here is a valid key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DEFAULT_WINDOW_S = 300.0  # the two-minute method's window: 5 minutes of ticks (the config's default)


@dataclass(frozen=True, slots=True)
class Thresholds:
    # -- levels ---------------------------------------------------------------------------------------------
    idle_util_pct: float = 5.0  # below: no kernel ran (KempnerPulse's idle)
    stall_util_pct: float = 10.0  # below: a stalled tick (SageMaker's "GPU < 10 %")
    high_util_pct: float = 80.0  # steady_high when the card holds above this
    cpu_saturated_pct: float = 75.0  # mean busy of all cores: the host cannot prepare more input
    cpu_saturated_share: float = 0.5  # ... in at least this share of the stall ticks (SageMaker: > half the time)
    core_pegged_pct: float = 90.0  # one core at or above this is pegged (a lone DataLoader worker)
    proc_busy_pct: float = 85.0  # a training process at or above this % of one core computes all the time
    starved_main_max_pct: float = 60.0  # a training process starved by its DataLoader waits for each batch off
    # CPU: for more than half of each step (job_wait_share_pct's line: then the input sets the pace), so its main
    # thread is on a CPU at most half the time, its helper threads (pin memory, CUDA's) adding a few points; above
    # this its pegged children are not a starved loader. Real starved loaders 8-53 % of a core, a process that
    # was not waiting for its children 70-98 %: 60 is 7 points above the one and 10 below the other
    others_quiet_pct: float = 25.0  # the cores that are not pegged are "idle" below this mean busy (and a
    # starting process below this share of a core waits for something else: not a start-up)
    lone_cores_per_core: float = 8.0  # "a few pegged cores": at most max(2, cores / this)
    few_workers_per_core: float = 4.0  # "few workers": at most max(2, cores / this) (num_workers' lower bound)
    workers_saturated_share: float = 0.5  # this share of the DataLoader workers pegged: the workers are the limit
    respawns_min: float = 2.0  # worker pid sets replaced this often: re-spawned each epoch
    disk_busy_pct: float = 80.0  # iostat %util near saturation for one-request-at-a-time devices
    iowait_pct: float = 20.0  # share of CPU time waiting on IO
    await_ms: float = 20.0  # mean time per IO, queue included
    disk_write_bytes_per_s: float = 2e8  # sustained writes of a checkpoint, not a log flush (bytes/s: 200 MB/s)
    sm_low_pct: float = 50.0  # SM activity below this is "likely ineffective" (DCGM guide: SM_ACTIVE < 0.5)
    sm_idle_pct: float = 5.0  # SMs essentially unused
    sm_trace_pct: float = 0.0  # above: a kernel ran in the tick (an idle card reads 0.0 exactly; the faintest
    # step seen read 0.0001 %) ...
    sm_trace_ticks: float = 3.0  # ... on this many ticks: a loop's steps (the job runs, span.job_span; an idle
    # card's job still steps, Unexplained), not a start-up's initialisation (one or two faint ticks seen)
    sm_fed_pct: float = 0.1  # above: some kernel runs (no kernel reads 0.0; lab num_workers=0 with a tiny MLP: 0.4 %)
    link_busy_bytes_per_s: float = 1e9  # PCIe or NVLink traffic worth noticing (KempnerPulse: 1 GB/s)
    link_quiet_bytes_per_s: float = 1e8  # below: no traffic at all (a tenth of busy; a launch loop moves ~0.25 GB/s)
    h2d_bytes_per_s: float = 5e8  # PCIe RX of a copy-bound step as NVML reads it (launch loops: <= 0.27 GB/s)
    d2h_bytes_per_s: float = 5e8  # the same pageable copy by one CPU thread, device to host (PCIe TX)
    round_trip_share: float = 0.5  # device-to-host at least this share of host-to-device: bytes going both ways
    # (gradients down, parameters up: an optimizer or model part on the host), not input batches
    round_trip_min_bytes_per_s: float = 1e9  # ... and at least this back, or d2h_bytes_per_s with the process
    # above one_thread_max_cores (recordings whose PCIe came from wrapping byte counters read 0.46-0.66 GB/s
    # back with nothing going back, their process at 99-101 %)
    one_thread_max_cores: float = 1.5  # a process's CPU above this many cores is more than one thread's work: a
    # pageable copy or a Python loop is one thread (99-101 % on the real recordings); an optimizer on 2: 188 %
    trickle_util_pct: float = 0.3  # an idle card's mean GPU-Util at or above this: its job still runs kernels
    startup_max_s: float = 60.0  # a job "starting up" longer than this is not starting up any more
    host_compute_cores: float = 2.5  # a training process holding more cores than this computes on the host with
    # intra-op threads (a copy from pageable memory or a Python loop holds one); starting, it may for a while
    startup_busy_max_s: float = 10.0  # (a model built on every thread: real ResNet-50 start-up at 10-19 cores
    # for 2-4 s), for longer it is host compute, not a start-up
    host_compute_threads: float = 2.5  # a training process's threads busy at a dump (its stacks) above which
    # torch's own code computes on the host: more than a launching thread and autograd's
    inside_min_samples: float = 2.0  # stack samples of a process's main thread before its phases count (the
    # sampler dumps a waiting process every 2 s: two in regime_min_s, the shortest stretch judged on its own)
    inside_phase_share: float = 0.5  # a phase (or a family of them) in at least this share of those samples
    inside_likely_samples: float = 4.0  # a stack-based reading resting on fewer samples in its phase (in the
    # process with the fewest) is possible, not likely: 2 of 2 happen by chance to a phase taking 30 % of the
    # step 9 % of the time, 4 of 4 under 1 %; at one dump per 2 s tick, 8 s of waiting: longer than hold_s
    inside_tie_sigmas: float = 2.0  # a phase leads another only by more than this many standard deviations of
    # the split of their samples (sqrt of their sum; 2: the usual 95 %): 7 against 5, or 5 against 2, is a tie
    job_wait_share_pct: float = 50.0  # job's data-wait share above: more than half of each step without a batch
    job_wait_low_pct: float = 10.0  # ... below: the steps do not wait for data; the loader rules stand aside
    hung_min_s: float = 30.0  # a collective waiting this long with no traffic is hung, not slow
    mem_held_frac: float = 0.10  # memory held: share of the card's memory in use
    mem_context_frac: float = 0.01  # a process holds a context (an idle H200 with none: 0.4 %)
    imbalance_pct: float = 30.0  # spread of mean GPU-Util between cards
    sawtooth_min_swing_pct: float = 50.0  # p95 - p5 of GPU-Util (ticks, or min/max inside ticks) for a sawtooth
    burst_util_pct: float = 70.0  # a burst reaches this (SageMaker "fluctuating": p95 > 70 while p5 < 10)
    sawtooth_min_acf: float = 0.3  # autocorrelation at the period for a periodic stall
    # -- time -----------------------------------------------------------------------------------------------
    hold_s: float = 6.0  # a new verdict must hold this long before it replaces the old one
    recent_s: float = 20.0  # the current verdict judges this much recent history (levels, causes)
    regime_min_s: float = 4.0  # a steady stretch this long at the end is a new regime of its own
    # how far a tick may sit from the regime's median and still belong to it (span.judged_span)
    regime_band_util_pct: float = 15.0  # GPU-Util, card mean (percentage points)
    regime_band_minmax_pct: float = 25.0  # min and max inside the tick
    regime_band_mem_pct: float = 5.0  # share of memory in use
    regime_band_cpu_pct: float = 20.0  # mean core busy
    regime_band_disk_pct: float = 30.0  # busiest disk %util
    regime_band_iowait_pct: float = 15.0  # iowait
    job_stale_steps: float = 3.0  # no step for this many median step times: the last step's figures are stale
    job_stale_min_s: float = 1.0  # ... and at least this long (and 2 ticks): the source's own "stopped"
    no_progress_steps: float = 10.0  # no step for this many median step times (and no_progress_min_s): no progress
    no_progress_min_s: float = 5.0  # a few seconds: pulse publication, a tick of lag and a slow step all fit under
    job_rate_min_s: float = 3.0  # the job's samples/s sets num_workers once it has reported this long (the
    # first ticks of a job hold its warm-up steps: real 2-card starved run, both cards at 95-99 % for one tick)
    warmup_s: float = 6.0  # no verdict before the window holds this much ("collecting"), and 3 ticks
    short_judged_s: float = 10.0  # a judged stretch shorter than this lowers the confidence
    # -- confidences ----------------------------------------------------------------------------------------
    conf_memory_idle: float = 0.85
    conf_idle_storage: float = 0.7
    conf_idle_data: float = 0.6
    conf_idle_nothing: float = 0.8  # idle and no process on the GPUs
    conf_idle_waiting: float = 0.6  # idle with processes but nothing explains it
    conf_rank_blocked: float = 0.8
    conf_rank_blocked_d2h: float = 0.65  # ... seen only as the blocked card's copy to the host (no disk yet)
    conf_hung: float = 0.85  # waiting with no traffic for hung_min_s (and the job's no-progress rule)
    conf_job_wait: float = 0.9  # the job's own clock: most of each step waits for data
    conf_comm_links: float = 0.75
    conf_comm_no_links: float = 0.6
    conf_storage_base: float = 0.55
    conf_storage_per_sign: float = 0.15
    conf_storage_max: float = 0.9
    conf_data_strong: float = 0.85  # few workers pegged, re-spawns, or every core busy
    conf_data_weak: float = 0.6
    conf_h2d: float = 0.8
    conf_launch: float = 0.8
    conf_launch_no_sm: float = 0.35
    conf_host_bound: float = 0.7  # a core-bound process, a steady GPU and a measured low data wait
    conf_in_process: float = 0.7
    conf_start_up: float = 0.6  # a job that has run no kernel since it appeared, its process busy on the host
    conf_recompile: float = 0.8  # the main thread compiling in most samples: the stack names it
    conf_host_compute: float = 0.8  # ... in an optimizer or model part with several threads busy
    conf_python_step: float = 0.7  # ... in its own Python on one core (the frames say where, not what it does)
    conf_input_latency: float = 0.8  # ... waiting for batches while the workers wait inside the Dataset
    conf_external_wait: float = 0.75  # ... off CPU on a socket, a poll or a sleep, in a job that runs kernels
    conf_inside_few: float = 0.55  # the most an inside reading resting on < inside_likely_samples may have
    conf_other_thread: float = 0.7  # the main thread off CPU while another thread holds the GIL (trace v4)
    conf_no_procs: float = 0.45
    conf_stall_sawtooth: float = 0.7
    conf_stall_low: float = 0.4
    conf_none_busy: float = 0.85
    # several processes on the one busy card, the others idle: the process table is direct evidence
    conf_placement: float = 0.8
    conf_none_other: float = 0.6
    # headroom (headroom.py): what fixing the bottleneck can give back
    headroom_min_ticks: float = 3  # fewer judged ticks carry no bound: one stall is not a share
    headroom_max_factor: float = 100.0  # a card busy under 1 % bounds nothing useful: what is lost is said instead
    headroom_max_wait_share: float = 0.99  # the job's data wait read at most this share of a step (1/(1-w) finite)
    conf_unexplained: float = 0.3  # the GPU waits, a job holds it, and no rule names why: said, not guessed
    conf_no_sm_penalty: float = 0.1  # less sure without SM activity (pre-Hopper cards)
    conf_short_factor: float = 0.8  # judged stretch under short_judged_s
    conf_tiny_factor: float = 0.5  # judged stretch under 3 ticks
    quick_hold_conf: float = 0.6  # a fresh regime this confident needs half the hold (its rule had own evidence)
    destructive_min_conf: float = 0.8  # kill/free/restart advice only at this confidence, held for hold_s

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]
