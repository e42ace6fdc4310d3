"""Storage: a fleet's recordings on disk as one dataset, beside the recorder that writes it (gpu_triage.recording).

* :mod:`.dataset` the rotating, Hive-partitioned layout (``host=NAME/date=YYYY-MM-DD/…``) and its writer.
* :mod:`.compact` a host's finished days into one daily file and the flat table (``gpu-triage compact``):
  :mod:`.compact_types` what its steps share, :mod:`.compact_day` one day, :mod:`.flat` the tables,
  :mod:`.compact_fs` the link-proof file steps; :mod:`.retention` what ``--keep`` removes.

What the stored history says (``diagnose DIR --summary``, ``compare DIR``) is :mod:`gpu_triage.fleet_history`.
"""
