"""The offline diagnosis of a recording: the live engine replayed over it, then read as a whole.

``columns`` turns Arrow batches into the rolling window's views, ``judge`` runs the engine over them (or
over Python ticks through a RollingWindow), ``timeline`` smooths the verdicts into segments and gaps,
``render`` writes the report. Nothing is imported here, so each caller loads only what it reads.
"""
