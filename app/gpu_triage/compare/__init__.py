"""``gpu-triage compare``: two runs side by side (``runs``), their jobs' own clocks too (``jobs``)."""
