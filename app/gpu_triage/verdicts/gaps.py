"""The one definition of a gap in a recording, shared by the offline reading (``offline/judge``: where a
stretch of ticks ends and the window starts afresh) and the live judge (:mod:`.judge`), which must start its
window at the same ticks. Plain Python: the recorder loads no pyarrow."""

from __future__ import annotations

GAP_INTERVALS = 5.0  # a step longer than this many intervals (and than MIN_GAP_S) is a gap in the recording
MIN_GAP_S = 1.0


def gap_limit(interval_s: float) -> float:
    """The longest step between two ticks of one stretch, for a recording made every ``interval_s``."""
    return max(GAP_INTERVALS * interval_s, MIN_GAP_S)
