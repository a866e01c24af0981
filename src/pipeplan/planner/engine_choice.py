"""The plan an engine's export is written for: plan 1, or the best plan it runs, with what changed and why.

    from pipeplan.planner.engine_choice import engine_choice
    choice = engine_choice(result, "deepspeed")     # result: pipeplan.planner.search(...)
    choice.index       # 0: plan 1; 2: plan 3; None: the best plan of a search over what DeepSpeed runs
    choice.why         # why the engine cannot run plan 1 ("" when it does)
    choice.changes     # ("tp×pp×dp 1×1×8 → 1×2×4", "dp mode zero2 → zero1", ..., "step 812 → 830 ms (+2.2%)")
    choice.to_dict()   # what `plan --json --export ENGINE` carries under "export"

When an engine cannot run the best plan (a schedule it lacks, a data-parallel mode it
runs only without a pipeline), :meth:`SearchResult.best_for
<pipeplan.planner.search.SearchResult.best_for>` finds the best plan it does run; this
record names that plan in full beside plan 1, knob by knob, so nothing changes quietly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..plan import Plan
from ..units import format_figures

if TYPE_CHECKING:
    from .search import SearchResult

__all__ = ["EngineChoice", "engine_choice", "plan_changes"]


def _knobs(plan: Plan) -> dict[str, str]:
    """The knobs a plan row shows, as text: degrees, mode, schedule, b×m, split, recompute."""
    return {
        "tp×pp×dp": f"{plan.tp}×{plan.pp}×{plan.dp}",
        "dp mode": plan.dp_mode if plan.dp > 1 else "—",
        "schedule": plan.schedule_label if plan.pp > 1 else "— (no pipeline)",
        "b×m": f"{plan.micro_batch_size}×{plan.num_microbatches}",
        "layers per stage": ",".join(str(count) for count in plan.layers_per_stage),
        "recompute": "/".join(plan.recompute or ("none",)) if len(set(plan.recompute or ("none",))) > 1
        else (plan.recompute or ("none",))[0],
    }


def plan_changes(before: Plan, after: Plan) -> list[str]:
    """What ``after`` changes of ``before``, one ``"knob old → new"`` each, then the predicted step time.

    The step time is in milliseconds with the change in percent (``"step 812 → 830 ms (+2.2%)"``);
    an identical plan gives only that line.
    """
    old, new = _knobs(before), _knobs(after)
    changes = [f"{knob} {old[knob]} → {new[knob]}" for knob in old if old[knob] != new[knob]]
    first, second = before.milliseconds(before.step_time), after.milliseconds(after.step_time)
    share = f" ({(second / first - 1):+.1%})" if first else ""
    changes.append(f"step {format_figures(first)} → {format_figures(second)} ms{share}")
    return changes


@dataclass(frozen=True)
class EngineChoice:
    """The plan written for one export target, beside the search's best.

    Attributes:
        target: the ``--export`` target (``"deepspeed"``).
        plan: the plan its files are written for.
        index: its place in the search's plans (0: plan 1); ``None``: the best plan of a
            search over only what the engine runs (in no printed row of the table).
        why: the engine's one-line refusal of plan 1 (``""`` when ``index`` is 0).
        changes: :func:`plan_changes` from plan 1 (empty when ``index`` is 0).
    """

    target: str
    plan: Plan
    index: int | None
    why: str
    changes: tuple[str, ...]

    @property
    def label(self) -> str:
        """How the table names the plan: ``"plan 3"``, or ``"instead"`` for one outside the table."""
        return f"plan {self.index + 1}" if self.index is not None else "instead"

    def to_dict(self) -> dict[str, Any]:
        """``{"target", "plan_index", "plan", "why", "changes"}``: ``plan_index`` 0-based or ``None``."""
        return {"target": self.target, "plan_index": self.index, "plan": self.plan.to_dict(), "why": self.why,
                "changes": list(self.changes)}


def engine_choice(result: SearchResult, target: str) -> EngineChoice:
    """The plan ``target``'s export is written for (:meth:`SearchResult.best_for`), with what changed and why.

    Raises:
        InvalidInputError: an unknown target, or no schedule of the search that the engine runs.
        InfeasiblePlanError: no plan the engine runs fits.
    """
    from ..engines import by_target

    plan, index = result.best_for(target)
    if index == 0:
        return EngineChoice(target, plan, 0, "", ())
    why = by_target(target).refusal(result.best)
    return EngineChoice(target, plan, index, why, tuple(plan_changes(result.best, plan)))
