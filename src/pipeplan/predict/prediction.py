"""The step a measured profile predicts: what ``pipeplan run`` should measure, before running it.

    >>> import pipeplan
    >>> from pipeplan.layers import LayerProfile
    >>> from pipeplan.predict import predict
    >>> profile = LayerProfile.uniform(10, forward=1.0)          # or LayerProfile.from_file("prof.json")
    >>> schedule = pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=4)
    >>> predict(profile, schedule, [6, 4]).makespan              # ms, the runtime's median step should match
    78.0

What it charges: the profile's per-layer costs summed per stage
(:meth:`~pipeplan.layers.LayerProfile.stage_costs`, the split halves as the
runtime runs them), messages at the calibrated latency and bandwidth for the
boundary sizes the profile measured, and core sharing: while ``k`` ranks
compute at once each is ``slowdown[k - 1]`` times slower
(:func:`pipeplan.simulate` with its ``slowdown``). A profile without a calibration
predicts free messages and a core per rank. Torch-free.

Calibration mode (reported apart from the profile-only prediction):
:func:`fit_kind_factors` compares one measured step of one schedule with its
prediction and returns, per action kind, measured over predicted time;
:func:`scale_profile` applies those factors to the profile to predict the
other schedules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .._validation import expect_instance
from ..calibration import Calibration
from ..costs import CommModel, StageCosts
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..schedule import Schedule
from ..simulate import simulate
from ..timeline import Timeline

__all__ = ["costs_as_run", "fit_kind_factors", "predict", "prediction_inputs", "scale_profile"]


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


def prediction_inputs(profile: LayerProfile, layers_per_stage: Sequence[int], *,
                      checkpoint: bool = False) -> tuple[StageCosts, CommModel]:
    """The stage costs (as the runtime runs them) and the calibrated messages :func:`predict` uses.

    Without a calibration in the profile, messages are free.
    """
    expect_instance("profile", profile, LayerProfile, "LayerProfile.from_file('prof.json')")
    costs = costs_as_run(profile.stage_costs(layers_per_stage), checkpoint)
    sizes = profile.boundary_bytes(layers_per_stage)
    return costs, (profile.calibration or Calibration()).comm_model(sizes if sizes else 0.0)


def predict(profile: LayerProfile, schedule: Schedule, layers_per_stage: Sequence[int], *,
            checkpoint: bool = False) -> Timeline:
    """The step the profile predicts for ``schedule`` on this partition (see the module doc).

    Without a calibration in the profile, messages are free and cores are not shared.
    """
    costs, comm = prediction_inputs(profile, layers_per_stage, checkpoint=checkpoint)
    return simulate(schedule, costs, comm, slowdown=(profile.calibration or Calibration()).slowdown)


def fit_kind_factors(predicted: Timeline, measured: Timeline) -> dict[str, float]:
    """Calibration from one measured step: per action kind, measured over predicted time.

    ``factor[kind] = Σ measured durations / Σ predicted durations`` over the
    actions of that kind (``"F"``, ``"B"``, ``"I"``, ``"W"``), both timelines of the same
    schedule. :func:`scale_profile` applies them to predict other schedules.

    Raises:
        InvalidInputError: timelines of different schedules, or a kind with no predicted time.
    """
    from .compare import compare

    comparison = compare(predicted, measured)
    factors = {}
    for kind in sorted({a.kind for a in comparison.actions}):
        mask = np.array([a.kind == kind for a in comparison.actions])
        measured_total = float(comparison.measured_duration[mask].sum())
        predicted_total = float((comparison.measured_duration[mask] + comparison.duration_error[mask]).sum())
        if predicted_total <= 0:
            raise InvalidInputError(f"the prediction gives {kind} actions no time; cannot fit a factor for them")
        factors[str(kind)] = measured_total / predicted_total
    return factors


def scale_profile(profile: LayerProfile, factors: Mapping[str, float]) -> LayerProfile:
    """The profile with its times scaled by :func:`fit_kind_factors`' factors.

    ``F`` scales ``forward``, ``I`` ``backward_input``, ``W`` ``weight`` and ``B``
    the full ``backward``. Factors fitted on a split-backward schedule have no
    ``B``: the full backward then takes the time-weighted mean of ``I`` and ``W``;
    fitted on a full-backward schedule (no ``I``, ``W``), ``B`` scales both split
    halves too. (Stage 0's split ``W`` is its whole backward, so it scales like
    ``backward``.)
    """
    forward = factors.get("F", 1.0)
    whole = factors.get("B")
    inputs = factors.get("I", 1.0 if whole is None else whole)
    weights = factors.get("W", 1.0 if whole is None else whole)
    halves = profile.backward_input or tuple(b - w for b, w in zip(profile.backward, profile.weight))
    full = []
    for b, i, w in zip(profile.backward, halves, profile.weight):
        if whole is not None:
            full.append(b * whole)
        else:
            full.append(b * ((inputs * i + weights * w) / (i + w) if i + w > 0 else inputs))
    return profile.replaced(
        forward=[f * forward for f in profile.forward],
        backward=full,
        weight=[w * weights for w in profile.weight],
        backward_input=[i * inputs for i in halves],
        spread={},
        measurement={**profile.measurement, "scaled_by": dict(factors)},
    )
