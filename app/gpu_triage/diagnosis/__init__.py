"""Diagnosis: pure functions from a window of ticks to a verdict (pattern, bottleneck, evidence, advice)."""
