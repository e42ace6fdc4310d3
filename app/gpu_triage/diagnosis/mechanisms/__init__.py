"""Why the GPUs wait: one module per family of mechanisms, each rule beside its evidence and its advice.

A rule (:class:`~gpu_triage.diagnosis.mechanisms.base.Rule`) names a mechanism and the bottleneck it
shows, says what it needs (patterns, measurements), reads :class:`~gpu_triage.diagnosis.measure.Measurements`
in ``detect`` and returns a :class:`~gpu_triage.diagnosis.mechanisms.base.Cause` or None, and says what to
change in ``advise``. The order the rules are tried in is ``diagnosis/rules.py``'s one tuple.
"""
