"""Recording: ticks, each with its judged raw verdict, into a trace file or a rotating dataset.

* :mod:`.session` one recording's lifecycle (:class:`~.session.Recording`: open a file or a dataset, where a
  judge's window starts afresh, append, rotate, close into Parquet or keep the stream for ``recover``).
* :mod:`.headless` the ``record`` command's body (and ``gpu-triage run --record``'s): sampling, pacing, signals.
* :mod:`.background` the dashboard's recorder, appended on its own thread.
* :mod:`.resilient` ``export --record``'s dataset, which outlives a full disk.
* :mod:`.source` what a recorder samples: the source with the job's pulse and log beside it.

The file format is :mod:`gpu_triage.trace`; the dataset's layout on disk is :mod:`gpu_triage.storage.dataset`.
"""
