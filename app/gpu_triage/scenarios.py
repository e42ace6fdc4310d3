"""Names of the simulated server's scenarios, one per case of the two-minute method.

Kept apart from sources/sim.py (numpy and all) so that the command line can list them without importing
the simulator.
"""

SCENARIOS: tuple[str, ...] = (
    "healthy",
    "data_pipeline",
    "too_few_workers",
    "storage_io",
    "communication",
    "single_card_busy",
    "imbalanced",
    "launch_overhead",
    "memory_idle",
    "periodic_stall",
)
