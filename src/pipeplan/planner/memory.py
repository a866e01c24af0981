"""The memory model: bytes of weights, gradients, optimizer state and activations per rank.

    from pipeplan.planner.memory import MemoryModel, OptimizerBytes
    OptimizerBytes.for_optimizer("adam", dp=8).per_trainable       # 16.0
    OptimizerBytes.for_optimizer("distributed", dp=8).per_trainable  # 6 + 12/8 = 7.5
    memory = MemoryModel(workload, "adam", capacity=72e9)
    memory.static_memory(config, sizes, placement)   # per rank: RankMemory, activations 0

Per parameter (mixed-precision training, bf16 weights):

* ``"adam"``: 2 (bf16 weight) + 2 (bf16 gradient) + 12 (fp32 master weight and
  the two Adam moments) = **16** bytes;
* ``"distributed"`` (Megatron-LM's distributed optimizer, fp32 gradients, the
  12 bytes of optimizer state sharded over data parallel): 2 + 4 + 12 / dp =
  **6 + 12/dp** (Megatron-LM ``theoretical_memory_usage.py``);
* a number ``x``: ``x`` bytes per trainable parameter, split 2 weight, 2
  gradient, the rest optimizer.

A frozen layer (``Workload.trainable``) holds only its weights. Per rank:

``static_r = Σ_{layers on r} (weights + [trainable] · (gradients + optimizer)) · params + extras``

with a tied group (``LayerProfile.tied_to``: a tied LM head and its embedding)
counted once per rank that holds any of it (:meth:`LayerProfile.held_params`):
once at ``pp = 1``, on each of two ranks (weights, gradients and optimizer
state: Megatron-LM's copy on the last stage) when they sit apart.

``activations_r = peak over the step of Σ_{stages s on r} (microbatches of s in flight) · A_s``

where ``A_s`` is the stage's activation bytes per microbatch under its recompute
mode. Before simulating, the in-flight count of a stage is its peak under the
schedule's order (1F1B: ``min(m, P − s)``), which bounds the rank's peak from
above; the plan reports the simulated peak.

:class:`MemoryModel` applies this to one workload, optimizer and capacity: the
static bytes of a partition per rank, what some rank holds whatever the
partition, whether a rank fits, and the cheapest recompute per stage that fits.
A total fits when it is at most the capacity (less than a part in 10⁹ over
counts as fitting, so rounding never rejects a plan).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..plan import RECOMPUTE_MODES, RankMemory, Recompute
from ..viz.tables import format_decimal_bytes
from .space import Config
from .workload import Workload

__all__ = ["OptimizerBytes", "OPTIMIZERS", "MemoryModel", "gb"]

OPTIMIZERS = ("adam", "distributed")


@dataclass(frozen=True)
class OptimizerBytes:
    """Bytes per parameter, by kind."""

    weights: float = 2.0
    gradients: float = 2.0
    optimizer: float = 12.0

    @property
    def per_trainable(self) -> float:
        """Bytes of one trainable parameter."""
        return self.weights + self.gradients + self.optimizer

    @classmethod
    def for_optimizer(cls, optimizer: str | float, dp: int) -> OptimizerBytes:
        """The split for ``"adam"``, ``"distributed"`` or a total number of bytes per parameter."""
        if optimizer == "adam":
            return cls(2.0, 2.0, 12.0)
        if optimizer == "distributed":
            return cls(2.0, 4.0, 12.0 / dp)
        if isinstance(optimizer, str):
            try:
                optimizer = float(optimizer)
            except ValueError:
                raise InvalidInputError(
                    f"optimizer must be 'adam', 'distributed' or bytes per parameter, got {optimizer!r}"
                ) from None
        total = float(optimizer)
        if not 0 < total < float("inf"):
            raise InvalidInputError(f"bytes per parameter must be a finite number > 0, got {optimizer!r}")
        weights = min(2.0, total)
        gradients = min(2.0, total - weights)
        return cls(weights, gradients, total - weights - gradients)


def gb(num_bytes: float) -> str:
    """Bytes as the planner prints them: ``3.36 GB`` (10⁹ bytes, four significant digits)."""
    return format_decimal_bytes(num_bytes, digits=4, unit="GB")


class MemoryModel:
    """Per-rank bytes of one workload under one optimizer, and what fits ``capacity``.

    Args:
        workload: per-layer parameters and activation bytes.
        optimizer: ``"adam"``, ``"distributed"`` or bytes per parameter
            (:meth:`OptimizerBytes.for_optimizer`).
        capacity: bytes one GPU may hold; ``None``: everything fits.
    """

    def __init__(self, workload: Workload, optimizer: str | float, capacity: float | None) -> None:
        self.workload = workload
        self.optimizer = optimizer
        self.capacity = capacity

    def fits(self, total: float) -> bool:
        """Whether ``total`` bytes fit the capacity (within a part in 10⁹)."""
        return self.capacity is None or total <= self.capacity * (1 + 1e-9)

    def bytes_per_param(self, dp: int) -> OptimizerBytes:
        """The optimizer's bytes per parameter at data-parallel degree ``dp``."""
        return OptimizerBytes.for_optimizer(self.optimizer, dp)

    def layer_static_bytes(self, micro_batch_size: int, dp: int) -> np.ndarray:
        """Bytes of weights, gradients and optimizer state per layer."""
        per = self.bytes_per_param(dp)
        profile = self.workload.profile(micro_batch_size)
        params = np.asarray(profile.params)
        return params * per.weights + np.asarray(profile.trainable_params) * (per.gradients + per.optimizer)

    def memory_profile(self, micro_batch_size: int, mode: Recompute, dp: int) -> tuple[LayerProfile, float]:
        """The profile the partitioner sees: params scaled so ``bytes_per_param`` × params is each layer's static bytes."""
        profile = self.workload.profile(micro_batch_size, mode)
        per = self.bytes_per_param(dp)
        if profile.trainable_params == profile.params:
            return profile, per.per_trainable
        scaled = self.layer_static_bytes(micro_batch_size, dp) / per.per_trainable
        # a copy that trains while its table is frozen holds more than the table: counted apart
        tied = [t if t < 0 or scaled[i] <= scaled[t] else -1 for i, t in enumerate(profile.tied_to)]
        return (
            LayerProfile(profile.forward, profile.backward, profile.weight, activation_bytes=profile.activation_bytes,
                         params=scaled.tolist(), names=profile.names, first_extra=profile.first_extra,
                         last_extra=profile.last_extra, first_extra_bytes=profile.first_extra_bytes,
                         last_extra_bytes=profile.last_extra_bytes, tied_to=tied),
            per.per_trainable,
        )

    def static_memory(self, config: Config, sizes: Sequence[int], placement: Sequence[int]) -> tuple[RankMemory, ...]:
        """Per rank, the weights, gradients and optimizer state of its stages (activations 0).

        ``sizes`` are layers per stage, ``placement`` each stage's rank.
        """
        per = self.bytes_per_param(config.dp)
        profile = self.workload.profile(config.micro_batch_size)
        params = np.asarray(profile.params)
        trainable_params = np.asarray(profile.trainable_params)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        weights = [0.0] * config.pp
        grads = [0.0] * config.pp
        extras = [0.0] * config.pp
        for s, rank in enumerate(placement):
            weights[rank] += float(params[bounds[s]:bounds[s + 1]].sum())
            grads[rank] += float(trainable_params[bounds[s]:bounds[s + 1]].sum())
        owner = np.repeat(np.asarray(placement), sizes)  # each layer's rank
        for group in profile.tied_groups:  # a rank holding several layers of one table holds it once
            for rank in {int(owner[i]) for i in group}:
                held = [i for i in group if owner[i] == rank]
                once, trained_once = profile.held_params(held)
                weights[rank] -= float(params[held].sum()) - once
                grads[rank] -= float(trainable_params[held].sum()) - trained_once
        extras[placement[0]] += profile.first_extra_bytes
        extras[placement[-1]] += profile.last_extra_bytes
        return tuple(
            RankMemory(per.weights * weights[r] + extras[r], per.gradients * grads[r], per.optimizer * grads[r], 0.0)
            for r in range(config.pp)
        )

    def least_peak(self, config: Config) -> float:
        """Bytes some rank must hold at its peak whatever the partition, schedule and recompute.

        Every rank holds its weights and state and, at its first backward, at
        least one microbatch of its layers' activations (the least over the
        recompute modes), so the fullest holds at least the ``1/pp`` share of
        both; and at least :meth:`static_bound`.
        """
        profile = self.workload.profile(config.micro_batch_size)
        per = self.bytes_per_param(config.dp)
        params, trained = profile.held_params()
        total = per.weights * params + (per.gradients + per.optimizer) * trained
        total += profile.first_extra_bytes + profile.last_extra_bytes
        activations = min(sum(self.workload.profile(config.micro_batch_size, mode).activation_bytes)
                          for mode in self.workload.recompute_modes)
        return max(self.static_bound(config), (total + activations) / config.pp)

    def static_bound(self, config: Config) -> float:
        """Bytes some rank must hold whatever the partition: ``max(static ÷ pp, largest layer)`` (a tied table once)."""
        profile = self.workload.profile(config.micro_batch_size)
        static = self.layer_static_bytes(config.micro_batch_size, config.dp)
        per = self.bytes_per_param(config.dp)
        params, trained = profile.held_params()
        total = per.weights * params + (per.gradients + per.optimizer) * trained
        total += profile.first_extra_bytes + profile.last_extra_bytes
        return max(total / config.pp, float(static.max()))

    def over_capacity(self, static: Sequence[RankMemory], activations: Sequence[float]) -> tuple[int, float] | None:
        """The fullest rank and its bytes (static plus ``activations``, per rank), when it does not fit."""
        if self.capacity is None:
            return None
        totals = [s.total + a for s, a in zip(static, activations)]
        worst = int(np.argmax(totals))
        return None if self.fits(totals[worst]) else (worst, totals[worst])

    def relax(self, config: Config, sizes: Sequence[int], placement: Sequence[int],
              counts: Sequence[int]) -> tuple[Recompute, ...]:
        """Per stage, the cheapest recompute mode (in time) that keeps its rank within capacity.

        No stage goes past ``config.recompute``; ``counts`` are the in-flight
        microbatches per stage the activations are charged for.
        """
        ceiling = RECOMPUTE_MODES.index(config.recompute)
        assignment: list[Recompute] = [config.recompute] * len(sizes)
        if ceiling == 0 or self.capacity is None:
            return tuple(assignment)
        static = self.static_memory(config, sizes, placement)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        act = {
            mode: np.asarray(self.workload.profile(config.micro_batch_size, mode).activation_bytes)
            for mode in RECOMPUTE_MODES[: ceiling + 1]
        }
        stage_act = {mode: [float(a[bounds[s]:bounds[s + 1]].sum()) * counts[s] for s in range(len(sizes))]
                     for mode, a in act.items()}
        for s in range(len(sizes)):
            rank = placement[s]
            others = sum(stage_act[assignment[t]][t] for t in range(len(sizes)) if placement[t] == rank and t != s)
            for mode in RECOMPUTE_MODES[: ceiling + 1]:
                if mode not in self.workload.recompute_modes:
                    continue
                if self.fits(static[rank].total + others + stage_act[mode][s]):
                    assignment[s] = mode
                    break
        return tuple(assignment)

    def heaviest(self, config: Config, layers: Sequence[int]) -> str:
        """The layer among ``layers`` with the most bytes (static plus one microbatch's activations), described."""
        profile = self.workload.profile(config.micro_batch_size, config.recompute)
        static = self.layer_static_bytes(config.micro_batch_size, config.dp)
        act = np.asarray(profile.activation_bytes)
        index = max(layers, key=lambda i: static[i] + act[i])
        return f"{profile.names[index]!r} ({gb(static[index])} of weights and optimizer state)"
