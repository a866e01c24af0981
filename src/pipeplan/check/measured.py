"""A measured step against the predicted one: what the model cannot explain, named.

    from pipeplan.check.measured import residual
    residual(predicted_ms=880.0, measured_ms=2980.0).text
    # '2.1 s of 2.98 s is not compute or communication: look at the data loader or the host ...'
    residual(predicted_ms=1000.0, measured_ms=800.0).verdict    # 'pessimistic'

The step model's own error sets the tolerance: the worst |error| of its error band
(:func:`pipeplan.planner.error_band.error_band`: the fidelity benchmark's runs nearest the
device and engine asked about; ``python benchmarks/engine_fidelity.py``: 18 published
Megatron-LM runs, mean 7.7 %, worst 15.1 %); :data:`TOLERANCE` is that worst, for a caller
without a band. A measured step longer than the prediction by more than that is time the model
does not hold (the model holds compute, pipeline idle time, communication and the
optimizer step; not the data loader, the host's launches, logging, checkpoints or
stragglers); one shorter by more than that means the model is pessimistic for the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..planner.error_band import CHECKED
from ..units import format_figures

__all__ = ["Residual", "residual", "TOLERANCE", "format_time"]

#: The step model's worst error on published runs it was not fitted to (the error band's basis).
TOLERANCE = CHECKED[0].worst


def format_time(ms: float) -> str:
    """``2980.0`` → ``"2.98 s"``, ``850.0`` → ``"850 ms"`` (three significant figures)."""
    return f"{format_figures(ms / 1e3)} s" if abs(ms) >= 1e3 else f"{format_figures(ms)} ms"


@dataclass(frozen=True)
class Residual:
    """A measured step beside the prediction.

    Attributes:
        measured_ms, predicted_ms: the two steps.
        tolerance: the model's error allowed before anything is named (a share).
        verdict: ``"unexplained"`` (measured longer than the prediction allows),
            ``"pessimistic"`` (shorter) or ``"within"``.
        unexplained_ms: ``measured - predicted`` (negative: measured faster).
        text: one sentence saying so.
    """

    measured_ms: float
    predicted_ms: float
    tolerance: float
    verdict: str
    unexplained_ms: float
    text: str

    @property
    def error(self) -> float:
        """``predicted / measured - 1``: > 0 the model is slow (pessimistic), < 0 fast."""
        return self.predicted_ms / self.measured_ms - 1

    def to_dict(self) -> dict[str, Any]:
        """``measured_ms``, ``predicted_ms``, ``unexplained_ms``, ``error``, ``tolerance``, ``verdict``, ``text``."""
        return {"measured_ms": self.measured_ms, "predicted_ms": self.predicted_ms,
                "unexplained_ms": self.unexplained_ms, "error": self.error, "tolerance": self.tolerance,
                "verdict": self.verdict, "text": self.text}


def residual(predicted_ms: float, measured_ms: float, tolerance: float = TOLERANCE,
             basis: str = "its worst error on published runs") -> Residual:
    """What ``measured_ms`` holds that ``predicted_ms`` does not (module doc); both > 0.

    ``basis``: where ``tolerance`` comes from, in words, for the sentence.
    """
    if not (measured_ms > 0 and predicted_ms > 0):
        raise ValueError(f"steps must be > 0 ms, got measured {measured_ms!r}, predicted {predicted_ms!r}")
    gap = measured_ms - predicted_ms
    where = f"(predicted {format_time(predicted_ms)}; the model's tolerance {tolerance:.1%}: {basis})"
    if measured_ms > predicted_ms * (1 + tolerance):
        verdict = "unexplained"
        text = (f"{format_time(gap)} of {format_time(measured_ms)} is not compute or communication: look at the "
                f"data loader or the host {where}")
    elif measured_ms < predicted_ms * (1 - tolerance):
        verdict = "pessimistic"
        text = (f"measured {format_time(measured_ms)} is faster than predicted {format_time(predicted_ms)}: the "
                f"model is pessimistic for this run by {predicted_ms / measured_ms - 1:.0%} (a kernel or link "
                "faster than the device preset, or overlap the model does not count)")
    else:
        verdict = "within"
        text = (f"measured {format_time(measured_ms)} is within the model's error of the prediction {where}: "
                "nothing left to name")
    return Residual(measured_ms, predicted_ms, tolerance, verdict, gap, text)
