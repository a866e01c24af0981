"""What ``pipeplan check`` answers for a configuration, and its JSON (names scripts depend on).

    result = check(config, workload, cluster, global_batch=256)    # pipeplan.check.check
    result.step_ms, result.samples_per_s, result.tokens_per_s_per_gpu, result.mfu
    result.to_dict()["predicted"]["breakdown"]     # {'compute_ms': ..., 'bubble_ms': ..., ...}

``to_dict()``: ``predicted`` (``step_ms``, ``samples_per_s``, ``tokens_per_s_per_gpu``,
``mfu``, ``peak_memory_bytes`` per pipeline rank, ``memory`` per rank by kind,
``memory_capacity_bytes``, ``fits``, ``breakdown``, ``plan``), ``config`` (the
:class:`~pipeplan.engines.RunConfig`'s own ``to_dict()`` plus ``pinned``: every planner
field with its value and source, and ``searched``: the fields the search filled),
``best`` (``same_engine``, ``any_engine``: rows of :class:`~pipeplan.check.best.BestPlan`),
``measured`` (when a step was given) and ``scaling`` (when GPU counts were given),
``notes`` and ``error_band`` (:meth:`pipeplan.planner.error_band.ErrorBand.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engines import RunConfig
from ..plan import Plan
from ..planner.error_band import ErrorBand
from .best import BestPlan
from .breakdown import Breakdown
from .measured import Residual
from .pin import Pinned
from .scaling import ScalingRow

__all__ = ["CheckResult"]


@dataclass(frozen=True)
class CheckResult:
    """The check of one configuration.

    Attributes:
        config: the configuration as read.
        pinned: it pinned and priced, each value with its source.
        breakdown: the step in parts (and the tensor-parallel collectives' cost).
        same_engine, any_engine: the best plans in the configuration's engine and in any.
        measured: the measured step against the prediction (``None``: none given).
        scaling: one row per GPU count asked (empty: none asked).
        notes: what the check approximated or could not do, one sentence each.
        error_band: how far the step model is from published runs for this device,
            engine and model (:mod:`pipeplan.planner.error_band`).
    """

    config: RunConfig
    pinned: Pinned
    breakdown: Breakdown
    same_engine: tuple[BestPlan, ...] = ()
    any_engine: tuple[BestPlan, ...] = ()
    measured: Residual | None = None
    scaling: tuple[ScalingRow, ...] = ()
    notes: tuple[str, ...] = ()
    error_band: ErrorBand | None = None

    @property
    def plan(self) -> Plan:
        """The configuration's plan."""
        return self.pinned.plan

    @property
    def step_ms(self) -> float:
        """The predicted step, ms."""
        return self.plan.milliseconds(self.plan.step_time)

    @property
    def samples_per_s(self) -> float | None:
        """Samples per second, all GPUs."""
        return self.plan.samples_per_second

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        """Tokens per second per GPU (``None`` where the model has no token count)."""
        rate = self.plan.tokens_per_second
        return None if rate is None else rate / self.plan.num_gpus

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation."""
        return self.plan.mfu

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (module doc)."""
        plan = self.plan
        predicted = {
            "step_ms": self.step_ms, "samples_per_s": self.samples_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu,
            "peak_memory_bytes": list(plan.peak_memory), "memory": [rank.to_dict() for rank in plan.memory],
            "memory_capacity_bytes": plan.memory_capacity, "fits": plan.fits, "reason": plan.reason,
            "breakdown": self.breakdown.to_dict(), "plan": plan.to_dict(),
        }
        config = {**self.config.to_dict(),
                  "pinned": {name: filled.to_dict() for name, filled in self.pinned.values.items()},
                  "searched": list(self.pinned.searched)}
        out: dict[str, Any] = {
            "predicted": predicted, "config": config,
            "best": {"same_engine": [row.to_dict() for row in self.same_engine],
                     "any_engine": [row.to_dict() for row in self.any_engine]},
            "notes": list(self.notes),
            "error_band": None if self.error_band is None else self.error_band.to_dict(),
        }
        if self.measured is not None:
            out["measured"] = self.measured.to_dict()
        if self.scaling:
            out["scaling"] = {"batch_held": self.pinned.batch_held, "rows": [row.to_dict() for row in self.scaling]}
        return out
