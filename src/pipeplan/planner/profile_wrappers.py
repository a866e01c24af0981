"""What an engine changes in a workload's per-layer profiles: wrappers of its profile sources.

    from pipeplan.planner.profile_wrappers import backward_floor, gathered_source
    saved = gathered_source(spec, workload.tensor_source, sequence_parallel=True)
    saved(2, "none", 8).activation_bytes    # each none block: its profile's bytes + (1 − 1/8) of its gathered inputs
    floored = backward_floor([0.5] * layers)  # a profile → the same with each backward at least 0.5 (time units)

**Gathered inputs** (:func:`gathered_source`).
torch's DTensor ``ColwiseParallel`` under sequence parallelism keeps the all-gathered, whole-sequence input
of wq/wk/wv and w1/w3 for their weight gradients, where Megatron-LM keeps the ``1/t`` shard the layer
profile stores (measured on CPU with torchtitan's own block: ``benchmarks/torchtitan_activations.py``).
A block that runs ``none`` (or ``selective``, which reruns the attention core only) stores them for every
microbatch in flight; a recomputed block holds them only while it reruns (a transient:
:mod:`pipeplan.planner.memory`). :meth:`~pipeplan.planner.workload.Workload.with_saved_gathered_inputs`
wraps a workload's profiles with :func:`gathered_source`.

**A floor on each backward** (:func:`backward_floor`): what the host must do per layer and microbatch beside
the GPU (an engine's gradient hooks) shows only where it is longer than the layer's GPU time
(:meth:`~pipeplan.planner.workload.Workload.with_backward_floor`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..models.layer_costs import gathered_input_bytes
from ..plan import Recompute

__all__ = ["backward_floor", "gathered_source"]

#: ``(micro_batch_size, recompute, tp, *stage_sizes) → LayerProfile``, a workload's ``tensor_source``.
TensorSource = Callable[..., LayerProfile]


def gathered_source(spec: Any, base: TensorSource, sequence_parallel: bool) -> TensorSource:
    """``base`` with each stored block's gathered inputs beyond its ``1/t`` shards added to its activation bytes,
    ``(1 − 1/t)`` of their whole-sequence bytes (none at ``tp = 1`` or without sequence parallelism)."""

    def saved(size: int, mode: Recompute | Mapping[str, Recompute], tp: int, *stages: Any) -> LayerProfile:
        profile = base(size, mode, tp, *stages)
        if tp == 1 or not sequence_parallel:
            return profile
        kept = gathered_input_bytes(spec, size, mode, stages[0] if stages else None)  # the blocks that store them
        if len(kept) != profile.num_layers or not any(kept):
            return profile
        share = 1.0 - 1.0 / tp
        return profile.replaced(activation_bytes=[float(a) + share * g for a, g in zip(profile.activation_bytes, kept)])

    return saved


def backward_floor(floor: list[float]) -> Callable[[LayerProfile], LayerProfile]:
    """A profile → the same with each layer's backward at least ``floor[l]`` (the profile's time unit).

    Raises (when applied): InvalidInputError: a profile whose layer count is not ``len(floor)``.
    """

    def floored(profile: LayerProfile) -> LayerProfile:
        if len(floor) != profile.num_layers:
            raise InvalidInputError(f"a backward floor needs one value per layer ({profile.num_layers}), "
                                    f"got {len(floor)}")
        return profile.replaced(backward=[max(float(b), f) for b, f in zip(profile.backward, floor)])

    return floored
