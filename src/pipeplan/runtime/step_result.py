"""What one step of :class:`~pipeplan.runtime.executor.PipelineRuntime` measured, on one rank.

    result = runtime.step(inputs, targets)
    result.loss, result.step_time                  # the full-batch loss; ms from barrier to all-reduce end
    result.forward_time[stage], result.saved_activation_bytes[stage]
    result.activation_bytes_saved                  # bytes per microbatch checkpointing saved on this rank
    result.to_dict()                               # JSON-ready, the timeline as its summary

A plain record: times in ms, bytes per microbatch, keyed by this rank's stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..timeline import Timeline

__all__ = ["StepResult"]


@dataclass
class StepResult:
    """What one training step measured.

    Attributes:
        loss: the full-batch loss (mean over the batch; over all replicas with dp), on every rank.
        timeline: the measured :class:`~pipeplan.timeline.Timeline` (ms, ``source="measured"``)
            on the pipeline's rank 0, ``None`` elsewhere.
        rank: this process's rank in the pipeline.
        step_time: ms from the step's barrier to the end of the gradient all-reduce.
        forward_time, backward_time, weight_time: ms of compute per stage of this rank,
            summed over microbatches (``backward_time`` includes any recomputation).
        saved_activation_bytes: per stage of this rank, the bytes its forward leaves
            for the backward, per microbatch, as run (with checkpointing when on): measured
            on the stage's first forward with this batch's shapes (microbatches of different
            shapes, :meth:`PipelineRuntime.step_microbatches`: that microbatch's).
        saved_activation_bytes_without_checkpoint: the same measured without
            checkpointing (a probe forward of the same microbatch for checkpointed stages).
        recompute_time: per checkpointed stage, the forward time the backward
            repeats (ms, the measured forward time of those stages).
        checkpoint: per stage of this rank, whether it was checkpointed.
    """

    loss: float
    timeline: Timeline | None
    rank: int
    step_time: float
    forward_time: dict[int, float] = field(default_factory=dict)
    backward_time: dict[int, float] = field(default_factory=dict)
    weight_time: dict[int, float] = field(default_factory=dict)
    saved_activation_bytes: dict[int, float] = field(default_factory=dict)
    saved_activation_bytes_without_checkpoint: dict[int, float] = field(default_factory=dict)
    recompute_time: dict[int, float] = field(default_factory=dict)
    checkpoint: dict[int, bool] = field(default_factory=dict)

    @property
    def activation_bytes_saved(self) -> float:
        """Bytes per microbatch that checkpointing saved on this rank (summed over its stages)."""
        return float(sum(self.saved_activation_bytes_without_checkpoint.values())
                     - sum(self.saved_activation_bytes.values()))

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form (JSON-ready); the timeline as its summary."""
        return {
            "loss": self.loss,
            "rank": self.rank,
            "step_time": self.step_time,
            "forward_time": self.forward_time,
            "backward_time": self.backward_time,
            "weight_time": self.weight_time,
            "saved_activation_bytes": self.saved_activation_bytes,
            "saved_activation_bytes_without_checkpoint": self.saved_activation_bytes_without_checkpoint,
            "recompute_time": self.recompute_time,
            "checkpoint": self.checkpoint,
            "timeline": None if self.timeline is None else self.timeline.summary(),
        }
