"""Where a plan's step goes: compute, pipeline idle, exposed data-parallel communication, optimizer step.

    from pipeplan.check.breakdown import breakdown, tp_exposed_ms
    parts = breakdown(plan)                  # Breakdown(compute_ms=..., bubble_ms=..., ...)
    parts.shares()                           # {'compute': 0.81, 'bubble': 0.12, ...}: they add up to 1
    tp_exposed_ms(plan, workload, cluster)   # what the tensor-parallel collectives add to the step, ms

The step is ``pipeline + exposed data-parallel time + optimizer`` (docs/planner.md); the
pipeline splits into its busy part (compute, with the tensor-parallel collectives the
layers wait for and the pipeline messages) and its idle part (the bubble), as
:func:`pipeplan.planner.explain.explain` splits it. The four parts add up to the step.

The tensor-parallel collectives sit inside the layers' times, so their share is not a
part of the sum: :func:`tp_exposed_ms` prices the same plan again with the collectives
free (a link of no latency and unbounded bandwidth inside the tensor-parallel group)
and reports the difference, the bubble's change included — what the collectives cost
the step. One more evaluation of one layout; only for a workload built from a model spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware import Link
from ..plan import Plan
from ..planner import Cluster, Workload
from ..planner.engine_costs import EngineCosts
from ..planner.evaluate import evaluate_layout
from .pin import config_of

__all__ = ["Breakdown", "breakdown", "tp_exposed_ms", "PARTS"]

#: Each part's key → how the output names it.
PARTS = {"compute": "compute", "bubble": "pipeline idle (bubble)",
         "dp_exposed": "exposed data-parallel communication", "optimizer": "optimizer step"}

#: A link that costs nothing: the tensor-parallel collectives priced free.
_FREE = Link("free", 0.0, 1e30, "no cost: tensor-parallel collectives priced free")


@dataclass(frozen=True)
class Breakdown:
    """A step in parts, milliseconds.

    Attributes:
        compute_ms: the pipeline's busy time (layers, their TP collectives, messages).
        bubble_ms: the pipeline's idle time.
        dp_exposed_ms: the data-parallel communication the backward does not hide.
        optimizer_ms: the optimizer step.
        tp_exposed_ms: what the tensor-parallel collectives add (inside ``compute_ms``
            and ``bubble_ms``; ``None`` at tp 1 or without a model spec).
    """

    compute_ms: float
    bubble_ms: float
    dp_exposed_ms: float
    optimizer_ms: float
    tp_exposed_ms: float | None = None

    @property
    def step_ms(self) -> float:
        """The four parts together: the step."""
        return self.compute_ms + self.bubble_ms + self.dp_exposed_ms + self.optimizer_ms

    def parts(self) -> dict[str, float]:
        """``{"compute", "bubble", "dp_exposed", "optimizer"}`` in ms (they add up to the step)."""
        return {"compute": self.compute_ms, "bubble": self.bubble_ms, "dp_exposed": self.dp_exposed_ms,
                "optimizer": self.optimizer_ms}

    def shares(self) -> dict[str, float]:
        """Each part's share of the step (0 for an empty step)."""
        step = self.step_ms
        return {name: (value / step if step else 0.0) for name, value in self.parts().items()}

    def to_dict(self) -> dict[str, float | None]:
        """The parts in ms as ``{part}_ms``, and ``tp_exposed_ms`` (``None`` where not priced)."""
        return {**{f"{name}_ms": value for name, value in self.parts().items()}, "tp_exposed_ms": self.tp_exposed_ms}


def breakdown(plan: Plan, tp_exposed: float | None = None) -> Breakdown:
    """``plan``'s step in parts (module doc); ``tp_exposed``: :func:`tp_exposed_ms`'s answer, if priced."""
    pipeline = plan.milliseconds(plan.pipeline_time)
    idle = pipeline * (plan.bubble_ratio or 0.0)
    return Breakdown(pipeline - idle, idle, plan.milliseconds(plan.exposed_dp_time),
                     plan.milliseconds(plan.optimizer_time), tp_exposed)


def tp_exposed_ms(plan: Plan, workload: Workload, cluster: Cluster, sync: str,
                  engine_costs: EngineCosts | None = None) -> float | None:
    """What ``plan``'s tensor-parallel collectives add to its step, ms: the step less the step with them free.

    ``workload``: the one ``plan`` was priced with (its spec, knobs and recompute are
    kept). ``None`` at tp 1, or for a workload without a model spec (a measured profile).
    """
    if plan.tp == 1 or workload.spec is None or plan.step_time is None:
        return None
    # the same workload but for the link: its engine's kernels, TP overlap, resharding and recompute pins kept
    free = Workload.from_spec(workload.spec, cluster.device, tensor_parallel=plan.tp, tp_link=_FREE,
                              sequence_parallel=workload.sequence_parallel, tp_comm_overlap=workload.tp_comm_overlap,
                              compute_factor=workload.compute_factor)
    if not workload.reshard_after_forward:
        free = free.with_reshard_after_forward(False)
    if workload.recompute_by_module:
        free = free.with_recompute(dict(workload.recompute_by_module))
    elif workload.recompute_modes != free.recompute_modes:
        free = free.with_recompute(workload.recompute_modes[0])
    again = evaluate_layout(free, cluster, config_of(plan), plan.layers_per_stage, recompute=plan.recompute,
                            memory_capacity=plan.memory_capacity, sync=sync, engine_costs=engine_costs)
    return plan.milliseconds(plan.step_time) - again.milliseconds(again.step_time)
