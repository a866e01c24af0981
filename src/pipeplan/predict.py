"""The step a measured profile predicts: what ``pipeplan run`` should measure, before running it.

    from pipeplan.predict import predict
    timeline = predict(LayerProfile.from_file("prof.json"), schedule, [6, 4])
    timeline.makespan                                  # ms, the runtime's median step should match

What it charges: the profile's per-layer costs summed per stage
(:meth:`~pipeplan.layers.LayerProfile.stage_costs`, the split halves as the
runtime runs them), messages at the calibrated latency and bandwidth for the
boundary sizes the profile measured, and core sharing: while ``k`` ranks
compute at once each is ``slowdown[k - 1]`` times slower
(:func:`pipeplan.contention.simulate_shared`). A profile without a calibration
predicts free messages and a core per rank. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from .calibration import Calibration
from .contention import simulate_shared
from .costs import StageCosts
from .layers import LayerProfile
from .schedule import Schedule
from .timeline import Timeline

__all__ = ["costs_as_run", "predict"]


def costs_as_run(costs: StageCosts, checkpoint: bool) -> StageCosts:
    """Stage costs adjusted to what the runtime does with checkpointing.

    The backward repeats the forward, and (split schedules) a checkpointed
    stage's ``B`` computes both halves, so its ``W`` is empty.
    """
    if not checkpoint:
        return costs
    full = [b + f for b, f in zip(costs.backward, costs.forward)]
    return StageCosts(
        forward=costs.forward,
        backward=full,
        weight=[0.0] * costs.num_stages,
        activation_bytes=costs.activation_bytes,
        backward_input=None if costs.backward_input is None else full,
    )


def predict(profile: LayerProfile, schedule: Schedule, layers_per_stage: Sequence[int], *,
            checkpoint: bool = False) -> Timeline:
    """The step the profile predicts for ``schedule`` on this partition (see the module doc).

    Without a calibration in the profile, messages are free and cores are not shared.
    """
    costs = costs_as_run(profile.stage_costs(layers_per_stage), checkpoint)
    calibration = profile.calibration or Calibration()
    sizes = profile.boundary_bytes(layers_per_stage)
    comm = calibration.comm_model(sizes if sizes else 0.0)
    return simulate_shared(schedule, costs, comm, slowdown=calibration.slowdown)
