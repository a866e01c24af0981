"""The best plans beside the user's: in the same engine (with its files) and in any engine.

    from pipeplan.check.best import best_plans
    same, anywhere, notes = best_plans(pinned, cluster, "deepspeed", top=3)
    same[0].changes       # ('dp mode zero1 → zero2', 'b×m 1×16 → 2×8', 'step 812 → 760 ms (-6.4%)')
    same[0].speedup       # the user's step ÷ this plan's
    same[0].files         # the engine's files for it (ExportFile: name, text)
    anywhere[0].engines   # ('megatron', 'torchtitan'): the engines that run it

Two searches (:func:`pipeplan.planner.search`) on the same model, GPUs and global batch,
with the configuration's tensor-parallel knobs and gradient sync kept and everything
else open (recompute included), pipeplan's headroom kept as ``plan`` keeps it: one over
everything, whose plans, fastest first, are the rows across engines, each naming the
engines whose export accepts it (:meth:`pipeplan.engines.Engine.refusal`); one over what
the engine runs (:attr:`~pipeplan.planner.SearchOptions.engine`, as ``plan --engine E``
searches), whose plans the engine's export accepts are the rows in the same engine (when
it accepts none, the best plan it runs: :meth:`~pipeplan.planner.SearchResult.best_for`).
Each row says what it changes of the user's configuration
(:func:`~pipeplan.planner.engine_choice.plan_changes`) and its speed-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import engines
from ..engines import ExportFile, LayerName
from ..errors import PipeplanError
from ..plan import Plan
from ..planner import Cluster, SearchOptions, search
from ..planner.engine_choice import plan_changes
from .pin import Pinned, engine_knobs

__all__ = ["BestPlan", "best_plans"]


@dataclass(frozen=True)
class BestPlan:
    """One plan proposed instead of the user's.

    Attributes:
        plan: the plan.
        engines: the engines whose files run it (registry order).
        changes: what it changes of the user's configuration, the step last.
        speedup: the user's predicted step ÷ this plan's (> 1: faster).
        files: the engine's files for it (rows in the same engine; empty otherwise).
    """

    plan: Plan
    engines: tuple[str, ...]
    changes: tuple[str, ...]
    speedup: float | None
    files: tuple[ExportFile, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """``plan``, ``step_ms``, ``samples_per_s``, ``engines``, ``changes``, ``speedup``, ``files`` ({name: text})."""
        return {"plan": self.plan.to_dict(), "step_ms": self.plan.milliseconds(self.plan.step_time),
                "samples_per_s": self.plan.samples_per_second, "engines": list(self.engines),
                "changes": list(self.changes), "speedup": self.speedup,
                "files": {file.name: file.text for file in self.files}}


def _names(spec: Any, plan: Plan) -> list[LayerName] | None:
    """The model's own layer names, where its reference code gives one per layer (else the export guesses)."""
    if spec is None:
        return None
    names = engines.layer_names_in_reference(spec)
    return list(names) if len(names) == plan.num_layers else None


def _row(user: Plan, plan: Plan, engine: str | None = None, spec: Any = None,
         knobs: dict[str, str] | None = None) -> BestPlan:
    runs = tuple(name for name in engines.names() if not engines.get(name).refusal(plan))
    ours, theirs = user.milliseconds(user.step_time), plan.milliseconds(plan.step_time)
    files = tuple(engines.export_files(plan, engine, _names(spec, plan), knobs=knobs)) if engine is not None else ()
    return BestPlan(plan, runs, tuple(plan_changes(user, plan)), ours / theirs if theirs else None, files)


def best_plans(pinned: Pinned, cluster: Cluster, engine: str, *,
               top: int = 3) -> tuple[list[BestPlan], list[BestPlan], list[str]]:
    """The ``top`` best plans in ``engine`` and in any engine, and notes on what could not be searched (module doc)."""
    user = pinned.plan
    notes: list[str] = []
    anywhere: list[BestPlan] = []
    try:
        result = search(pinned.knobbed, cluster, user.global_batch, SearchOptions(sync=pinned.sync, top=top))
        anywhere = [_row(user, plan) for plan in result.plans[:top]]
    except PipeplanError as error:
        notes.append(f"no better plan was searched: {error}")
    record = engines.get(engine)
    ran: list[Plan] = []
    try:
        own = search(pinned.knobbed, cluster, user.global_batch, SearchOptions(sync=pinned.sync, top=top,
                                                                                engine=engine,
                                                                                engine_costs=pinned.engine_costs,
                                                                                compiled_loss=pinned.compiled_loss))
        ran = [plan for plan in own.plans if not record.refusal(plan)][:top] or [own.best_for(engine)[0]]
    except PipeplanError as error:
        notes.append(f"no plan {engine} runs was found: {error}")
    knobs = engine_knobs(pinned)  # the configuration's own knobs (compile), written again
    return [_row(user, plan, engine, pinned.workload.spec, knobs) for plan in ran], anywhere, notes
