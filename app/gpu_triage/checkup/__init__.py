"""The check-up's middle steps, between the doctor and the tuned launch.

``baseline``: what the machine does with no input pipeline at all (a small model on fixed random tensors,
one card then N with DDP), and the scaling efficiency. ``loader``: the user's input pipeline measured alone,
one setting of ``num_workers`` / ``pin_memory`` / ``prefetch_factor`` at a time.

Both need PyTorch, an optional extra (``gpu-triage[torch]``); nothing here imports it at module level, so
``gpu-triage --help`` stays fast and works without it.
"""
