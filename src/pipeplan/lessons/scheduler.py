"""The seed lessons' exercise APIs, kept with their original meaning.

Lesson 16 (``AsymmetricPipelineScheduler``) lives here; seed 003's ``Pipeline``,
``PipelineStage`` and ``bubble_fraction`` live in :mod:`pipeplan.lessons.pipeline`
because they need torch::

    >>> from pipeplan import AsymmetricPipelineScheduler
    >>> AsymmetricPipelineScheduler().simulate_1f1b_execution([30, 10, 10, 20], 8)   # the lesson's numbers
    (280.0, 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence

from .._validation import finite_floats, non_negative_float, positive_int
from ..costs import StageCosts
from ..errors import InvalidInputError
from ..schedules import build_schedule
from ..simulate import simulate

__all__ = ["AsymmetricPipelineScheduler"]


class AsymmetricPipelineScheduler:
    """Lesson 16's exercise: simulate 1F1B on unequal stages and re-balance layers."""

    def simulate_1f1b_execution(
        self,
        stage_latencies: Sequence[float],
        num_microbatches: int,
        *,
        backward_latencies: Sequence[float] | None = None,
        include_backward: bool = False,
    ) -> tuple[float, float]:
        """Simulate 1F1B on stages with the given per-microbatch times (ms).

        By default this is the lesson's forward phase: the makespan is
        ``Σt + (m − 1)·max t`` and the bubble ``1 − mΣt / (P·makespan)``.
        With ``include_backward=True`` (or ``backward_latencies`` given) the full
        1F1B step is simulated, backward defaulting to twice the forward.

        Returns:
            ``(total_time, bubble_ratio)``: the makespan and the fraction of
            device time spent idle.
        """
        forward = finite_floats("stage_latencies", stage_latencies)
        m = positive_int("num_microbatches", num_microbatches)
        full = include_backward or backward_latencies is not None
        schedule = build_schedule(
            "1f1b", num_stages=len(forward), num_microbatches=m, backward="full" if full else "none"
        )
        timeline = simulate(schedule, StageCosts(forward, backward_latencies))
        return timeline.makespan, timeline.bubble_ratio

    def solve_optimal_layer_partition(
        self,
        total_layers: int,
        layer_cost: float,
        s0_fixed_cost: float,
        s_tail_fixed_cost: float,
        num_stages: int,
    ) -> list[int]:
        """Layers per stage that minimise the slowest stage (fixed costs on the ends).

        Exact (:func:`pipeplan.partition_layers`), not the lesson's greedy loop; among
        the answers with the smallest slowest stage, the one whose stage times have the
        smallest variance, as the lesson asks. Lesson 16's case gives [3, 11, 11, 7].
        """
        from ..partition import PartitionOptions, partition_layers

        layers = positive_int("total_layers", total_layers)
        stages = positive_int("num_stages", num_stages)
        if layers < stages:
            raise InvalidInputError(
                f"total_layers must be >= num_stages ({stages}) so no stage is empty, got {layers}"
            )
        cost = finite_floats("layer_cost", [layer_cost])[0]
        first = non_negative_float("s0_fixed_cost", s0_fixed_cost)
        tail = non_negative_float("s_tail_fixed_cost", s_tail_fixed_cost)
        options = PartitionOptions(first_extra=first, last_extra=tail, tie_break="variance")
        result = partition_layers([cost] * layers, stages, options)
        return list(result.layers_per_stage)
