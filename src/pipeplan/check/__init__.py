"""``pipeplan check``: bring what you run. A user's engine configuration, priced as given, beside the best plans.

    from pipeplan import engines
    from pipeplan.check import check
    from pipeplan.planner import Cluster, Workload
    config = engines.get("deepspeed").read("ds_config.json")      # a RunConfig (or build one by hand)
    cluster = Cluster.of("h100-80g", 16)
    workload = Workload.from_spec(spec, cluster.device, tp_link=cluster.intra_node)
    result = check(config, workload, cluster, global_batch=256, measured_step_s=2.98, scaling_gpus=[8, 16, 32])
    result.step_ms, result.samples_per_s, result.tokens_per_s_per_gpu, result.mfu
    result.breakdown.parts()            # compute, bubble, exposed data-parallel communication, optimizer (ms)
    result.pinned.values["dp_mode"]     # Filled(value='zero2', source='ds_config.json: zero_optimization.stage = 2')
    result.same_engine[0].changes       # what the best plan in the same engine changes, and its step
    result.measured.text                # '2.1 s of 2.98 s is not compute or communication: ...'
    result.to_dict()                    # predicted, config, best, measured, scaling (docs/check.md)

Modules, one job each: :mod:`.pin` (the configuration as given, its open fields
searched), :mod:`.breakdown` (where the step goes), :mod:`.best` (the best plans in the
engine, with its files, and in any engine), :mod:`.measured` (a measured step's
residual), :mod:`.scaling` (the configuration on more GPUs), :mod:`.result` (the answer
and its JSON), :mod:`.answer` (:func:`check`, calling them in turn). docs/check.md.
"""

from __future__ import annotations

from .answer import check
from .best import BestPlan
from .breakdown import Breakdown
from .measured import TOLERANCE, Residual
from .pin import Filled, Pinned
from .result import CheckResult
from .scaling import ScalingRow

__all__ = ["check", "CheckResult", "Pinned", "Filled", "Breakdown", "BestPlan", "Residual", "ScalingRow",
           "TOLERANCE"]
