"""``check``: one configuration, pinned and priced, beside the best plans, a measured step and more GPUs.

    from pipeplan.check import check
    result = check(config, workload, cluster, global_batch=256, measured_step_s=2.98, scaling_gpus=[8, 16, 32])
    result.step_ms, result.measured.text, result.scaling[1].efficiency

Each part is one module: :mod:`.pin` (the configuration as given, open fields searched),
:mod:`.breakdown` (where the step goes), :mod:`.best` (the best plans in the engine and
in any), :mod:`.measured` (what a measured step holds that the model does not),
:mod:`.scaling` (the configuration on more GPUs); :mod:`.result` holds the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._validation import positive_int
from ..engines import RunConfig
from ..errors import InvalidInputError
from .. import engines
from ..planner import Cluster, Workload
from ..planner.error_band import error_band
from .best import BestPlan, best_plans
from .breakdown import breakdown, tp_exposed_ms
from .measured import residual
from .pin import pin
from .result import CheckResult
from .scaling import scaling

__all__ = ["check"]


def check(config: RunConfig, workload: Workload, cluster: Cluster, *, global_batch: int | None = None,
          measured_step_s: float | None = None, scaling_gpus: Sequence[int] = (), top: int = 3,
          tolerance: float | None = None) -> CheckResult:
    """Answer for ``config`` on ``cluster``.

    Args:
        config: the user's configuration (:meth:`pipeplan.engines.Engine.read`, or built by hand).
        workload: the model's workload on ``cluster``'s device, without knobs
            (``Workload.from_spec(spec, cluster.device, tp_link=cluster.intra_node)``).
        cluster: the GPUs (``cluster.num_gpus``: the world size checked).
        global_batch: samples per step where the files give none.
        measured_step_s: a measured step, seconds: what the model cannot explain is named.
        scaling_gpus: GPU counts for the scaling rows (empty: none).
        top: best plans to show in each list (0: no search for them).
        tolerance: the model's error allowed before a measured step's residual is named
            (default the worst error of the step model's error band for this device,
            engine and model: :func:`pipeplan.planner.error_band.error_band`).

    Raises:
        InvalidInputError: a configuration that contradicts itself or the GPUs, a
            measured step that is not a positive time, a bad GPU count or ``top``.
        InfeasiblePlanError: open fields and no plan with the given values fits.
    """
    if measured_step_s is not None and not (isinstance(measured_step_s, (int, float)) and measured_step_s > 0):
        raise InvalidInputError(f"the measured step must be a time > 0 s, got {measured_step_s!r}")
    if not (isinstance(top, int) and top >= 0):
        raise InvalidInputError(f"top must be an integer >= 0, got {top!r}")
    for gpus in scaling_gpus:
        positive_int("gpus", gpus)
    pinned = pin(config, workload, cluster, global_batch=global_batch)
    plan = pinned.plan
    parts = breakdown(plan, tp_exposed_ms(plan, pinned.workload, cluster, pinned.sync, pinned.engine_costs))
    notes = list(config.notes) + list(pinned.notes)
    if plan.tp > 1 and parts.tp_exposed_ms is None:
        notes.append("the tensor-parallel collectives' cost is not priced apart: the workload has no model spec")
    same: list[BestPlan] = []
    anywhere: list[BestPlan] = []
    if top:
        same, anywhere, searched = best_plans(pinned, cluster, config.engine, top=top)
        notes += searched
    band = error_band(cluster.device.name, config.engine, gpt=workload.spec is not None
                      and not engines.get("megatron").model_refusal(workload.spec))
    basis = (f"the worst error of {band.basis.runs} published runs, {band.basis.command}"
             + ("" if band.checked else f"; not checked: {', '.join(band.unchecked)}"))
    if measured_step_s is not None and not parts.step_ms > 0:
        notes.append("the measured step is not compared: the configuration has no predicted step")
        measured_step_s = None
    measured = None if measured_step_s is None else residual(
        parts.step_ms, 1e3 * measured_step_s, band.basis.worst if tolerance is None else tolerance,
        basis if tolerance is None else "given")
    rows = scaling(pinned, cluster, scaling_gpus) if scaling_gpus else []
    return CheckResult(config, pinned, parts, tuple(same), tuple(anywhere), measured, tuple(rows), tuple(notes),
                       band)
