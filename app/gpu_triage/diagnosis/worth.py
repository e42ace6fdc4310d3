"""The value of a headroom estimate (:func:`gpu_triage.diagnosis.headroom.headroom` makes it): its own module so
that the verdict can carry one without importing the estimate's rules, which read the verdict."""

from __future__ import annotations

from dataclasses import dataclass

BOUND, LOST, NONE = "bound", "lost", "none"


@dataclass(frozen=True, slots=True)
class Headroom:
    """``bound``: up to ``factor``x; ``lost``: ``share`` of the judged time is lost; ``none``: nothing to win."""

    kind: str
    factor: float | None  # the bound on the speed-up (samples/s, else GPU-busy time); only for "bound"
    share: float | None  # 0..1: the share of the judged time the cards wait (or lose)
    busy: float | None  # 0..1: the GPU-busy share of the judged ticks, the cards the verdict names
    basis: str  # what the number rests on, in figures
    assumes: str  # what must hold for it ("" when nothing is bounded)
    unit: str = "GPU-busy time"  # what the factor multiplies: samples/s where the job's clock gave the wait

    def line(self) -> str:
        """One line for the pane and text reports."""
        if self.kind == BOUND and self.factor is not None:
            return f"worth fixing: up to {self.factor:.1f}x {self.unit} ({self.basis}; assumes {self.assumes})"
        if self.kind == LOST:
            return f"lost: {self.basis}"
        return f"nothing to win: {self.basis}"

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "factor": self.factor, "share": self.share, "busy": self.busy,
                "basis": self.basis, "assumes": self.assumes, "unit": self.unit}
