"""The simulated server's scenarios: one record each (name, ground truth, what it shows, its static setup).

Kept apart from sources/sim.py (numpy and all) so that the command line can list them without importing
the simulator. The simulator reads everything static from here (expected verdict, DataLoader workers per
rank, memory held, dataset-disk read rate, whether NVML maps process ids); only the per-tick behaviour of
each scenario (GPU-Util samples, CPU per thread) is code in sim.py, keyed by the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    pattern: str  # ground truth: what a correct diagnosis must find (8 cards)
    bottleneck: str
    shows: str  # what it shows, and the real recording it is shaped after
    workers: Callable[[int, int], int] = lambda cores, ranks: 0  # DataLoader workers per rank
    memory: str = "model"  # "model" (62-78 % held), "small" (3-8 %), "idle_hog" (65-75 %), "one_card"
    disk_reads_per_s: float = 0.0  # dataset disk, cached-friendly sequential reads
    procs: bool = True  # NVML maps the processes (False: a container where it cannot)
    listed: bool = True  # offered by the CLI and the demo (False: tests and scripts only)

    @property
    def expected(self) -> tuple[str, str]:
        return (self.pattern, self.bottleneck)


def _spare(most: int) -> Callable[[int, int], int]:
    """Workers per rank from the cores left after one per rank, at most ``most``."""
    return lambda cores, ranks: max(1, min(most, (cores - ranks) // ranks))


REGISTRY: dict[str, Scenario] = {s.name: s for s in (
    Scenario("healthy", "steady_high", "none", "util 97-99 %, SM ~95 %, busy workers; compute_healthy, "
             "dataloader_tuned",
             _spare(6), disk_reads_per_s=260.0),
    Scenario("data_pipeline", "sawtooth", "data_pipeline", "every core 85-100 % (workers), bursts between waits; "
             "dataloader_cpu_saturated", lambda cores, ranks: max(1, -(-cores // ranks)), disk_reads_per_s=150.0),
    Scenario("too_few_workers", "steady_low", "data_pipeline", "one worker core per rank pegged, rest idle; "
             "dataloader_starved", lambda cores, ranks: 2 if ranks <= 2 else 1, disk_reads_per_s=40.0),
    Scenario("storage_io", "steady_low", "storage_io", "dataset disk 100 % busy, iowait ~40 %; io_bound",
             _spare(4)),
    Scenario("communication", "steady_high", "communication", "util ~96 %, SM ~23 %, NVLink 45-75 GB/s, one "
             "straggler (NVIDIA/nccl#403)", _spare(3), disk_reads_per_s=220.0),
    Scenario("single_card_busy", "single_card_busy", "placement", "every rank on cuda:0", _spare(2), memory="one_card",
             disk_reads_per_s=30.0),
    Scenario("imbalanced", "imbalanced", "imbalance", "cards flat at 95 % down to ~35 %", _spare(3),
             disk_reads_per_s=200.0),
    Scenario("launch_overhead", "steady_low", "launch_overhead", "util 20-31 %, SM ~0.04 %, PCIe RX ~0.25 GB/s; "
             "launch_bound", memory="small"),
    Scenario("memory_idle", "idle", "memory_idle", "cards 65-75 % full, nothing runs; mem_hog_idle", memory="idle_hog"),
    Scenario("periodic_stall", "sawtooth", "stall_unexplained", "24 s period: 10 s at 98 %, 14 s at 0 %, host "
             "quiet; sawtooth_stall", memory="small"),
    Scenario("h2d_copy", "steady_low", "data_pipeline", "large batches copied from pageable memory to a small "
             "model: util ~15 %, SM ~0.3 %, PCIe RX 6-9 GB/s, one core copying", lambda cores, ranks: 2,
             memory="small", disk_reads_per_s=40.0),
    Scenario("in_process_loader", "steady_low", "host_or_input", "num_workers=0: the training process holds "
             "~100 % of a core that the scheduler moves between cores (busiest core ~60-75 %); without its stacks "
             "or its clock, the same as its own Python on one core", memory="small"),
    Scenario("checkpoint_stall", "imbalanced", "storage_io", "rank 0 writes a checkpoint with fsync: its card "
             "drops, the others spin at the barrier (util ~99 %, SM ~15 %), system disk writes ~1.5 GB/s",
             _spare(2)),
    Scenario("hung_collective", "steady_high", "hung_collective", "every rank spinning in a collective whose peer "
             "is gone: util 100 %, SM 15-20 %, no NVLink or PCIe traffic", _spare(2)),
    Scenario("starved_no_procs", "steady_low", "data_pipeline", "too_few_workers in a container: NVML maps no "
             "process ids, so only the cores show the loader", lambda cores, ranks: 2 if ranks <= 2 else 1,
             disk_reads_per_s=40.0, procs=False),
    Scenario("epoch_restart", "sawtooth", "data_pipeline", "DataLoader workers re-spawned every 7.5 s epoch; "
             "dataloader_epoch_restart", _spare(12), listed=False),
    Scenario("shared_box", "imbalanced", "imbalance", "one job per card: card 0 stalls 14 s in every 24 (as "
             "periodic_stall), card 1 computes steadily (as healthy), the others idle; the dashboard's "
             "screenshot of the three shapes side by side", _spare(2), memory="small", listed=False),
)}

SCENARIOS: tuple[str, ...] = tuple(name for name, s in REGISTRY.items() if s.listed)
