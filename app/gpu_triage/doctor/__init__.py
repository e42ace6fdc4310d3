"""Doctor: the single-machine check-up before the first training step."""
