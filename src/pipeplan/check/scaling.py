"""The pinned configuration on more GPUs: samples/s, scaling efficiency and the part of the step that grows.

    from pipeplan.check.scaling import scaling
    rows = scaling(pinned, cluster, [8, 16, 32, 64])
    rows[2].efficiency          # per-GPU samples/s at 32 GPUs ÷ that at 8
    rows[2].grows               # 'exposed data-parallel communication 4% → 31%'

Each row keeps everything of the pinned configuration (:mod:`pipeplan.check.pin`: tp,
pp, schedule, v, micro batch, layers per stage, recompute, data-parallel mode, sync)
and scales ``dp = gpus / (tp · pp)``. What the batch keeps is the configuration's
(:attr:`~pipeplan.check.pin.Pinned.batch_held`): a global batch the files (or
``--global-batch``) fix stays, and the microbatches per replica shrink
(``m = B / (dp · b)``); files that fix only the micro batch and the gradient
accumulation keep both, and the global batch grows with ``dp``. A size the layout does
not divide (or a batch it cannot split) is a row with the reason instead of numbers.
The part that grows is the breakdown part (:mod:`pipeplan.check.breakdown`) whose share
of the step rises most from the first size that has a plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import PipeplanError
from ..plan import Plan
from ..planner import Cluster
from ..planner.evaluate import evaluate_layout
from .breakdown import PARTS, Breakdown, breakdown
from .pin import Pinned, config_of

__all__ = ["ScalingRow", "scaling"]


@dataclass(frozen=True)
class ScalingRow:
    """One GPU count.

    Attributes:
        gpus: GPUs.
        plan: the pinned configuration on them (``None``: see ``why``).
        breakdown: its step in parts.
        efficiency: per-GPU samples/s ÷ the first row's with a plan (1.0 there).
        grows: the part whose share rose most since that row, ``"label a% → b%"``
            (``""`` on that row or when no share rose).
        why: why there is no plan at this size (``""`` when there is).
    """

    gpus: int
    plan: Plan | None
    breakdown: Breakdown | None = None
    efficiency: float | None = None
    grows: str = ""
    why: str = ""

    @property
    def samples_per_s(self) -> float | None:
        """The plan's samples per second."""
        return None if self.plan is None else self.plan.samples_per_second

    def to_dict(self) -> dict[str, Any]:
        """``gpus``, ``dp``, ``global_batch``, ``micro_batch_size``, ``microbatches``, ``step_ms``,
        ``samples_per_s``, ``efficiency``, ``breakdown``, ``grows``, ``fits``, ``why``."""
        plan = self.plan
        return {"gpus": self.gpus, "dp": None if plan is None else plan.dp,
                "global_batch": None if plan is None else plan.global_batch,
                "micro_batch_size": None if plan is None else plan.micro_batch_size,
                "microbatches": None if plan is None else plan.num_microbatches,
                "step_ms": None if plan is None else plan.milliseconds(plan.step_time),
                "samples_per_s": self.samples_per_s, "efficiency": self.efficiency,
                "breakdown": None if self.breakdown is None else self.breakdown.to_dict(),
                "grows": self.grows, "fits": None if plan is None else plan.fits, "why": self.why}


def _at(pinned: Pinned, cluster: Cluster, gpus: int) -> Plan | str:
    """The pinned configuration on ``gpus`` GPUs, or why it cannot run there."""
    plan = pinned.plan
    ranks = plan.tp * plan.pp
    if gpus % ranks:
        return f"tp {plan.tp} × pp {plan.pp} does not divide {gpus} GPUs"
    dp = gpus // ranks
    config = config_of(plan)
    if pinned.batch_held == "global batch":
        per = dp * plan.micro_batch_size
        if plan.global_batch % per:
            return (f"global batch {plan.global_batch} is no multiple of dp {dp} × micro batch "
                    f"{plan.micro_batch_size}")
        config = replace(config, dp=dp, num_microbatches=plan.global_batch // per)
    else:
        config = replace(config, dp=dp)
    try:
        sized = replace(cluster, num_gpus=gpus)
        return evaluate_layout(pinned.workload, sized, config, plan.layers_per_stage, recompute=plan.recompute,
                               memory_capacity=cluster.memory_bytes, sync=pinned.sync,
                               engine_costs=pinned.engine_costs, engine=pinned.engine,
                               compiled_loss=pinned.compiled_loss)
    except PipeplanError as error:
        return str(error)


def _grows(first: Breakdown, now: Breakdown) -> str:
    before, after = first.shares(), now.shares()
    name = max(after, key=lambda key: after[key] - before[key])
    if after[name] <= before[name]:
        return ""
    return f"{PARTS[name]} {before[name]:.0%} → {after[name]:.0%}"


def scaling(pinned: Pinned, cluster: Cluster, sizes: Sequence[int]) -> list[ScalingRow]:
    """One :class:`ScalingRow` per GPU count of ``sizes``, in the order given (module doc)."""
    rows: list[ScalingRow] = []
    base: tuple[int, Plan, Breakdown] | None = None
    for gpus in sizes:
        found = _at(pinned, cluster, gpus)
        if isinstance(found, str):
            rows.append(ScalingRow(gpus, None, why=found))
            continue
        parts = breakdown(found)
        if base is None:
            base = (gpus, found, parts)
        rate, base_rate = found.samples_per_second or 0.0, base[1].samples_per_second or 0.0
        efficiency = (rate / gpus) / (base_rate / base[0]) if base_rate else None
        rows.append(ScalingRow(gpus, found, parts, efficiency, _grows(base[2], parts) if base[0] != gpus else ""))
    return rows
