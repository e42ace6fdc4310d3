"""The one judge of a stream of ticks: the rolling window, the engine and the hysteresis, each tick diagnosed
once (:mod:`.judge`); where a window starts afresh (:mod:`.gaps`); the settings the stored verdicts were
judged with (:mod:`.settings`). Every reader of live or replayed ticks (the dashboard, ``record``, export,
``snapshot``, replay) and ``diagnose FILE`` through :mod:`gpu_triage.offline.judge` get their verdicts here."""
