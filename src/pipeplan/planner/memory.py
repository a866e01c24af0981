"""The memory model: bytes of weights, gradients, optimizer state and activations per rank.

    from pipeplan.planner.memory import MemoryModel, OptimizerBytes
    OptimizerBytes.for_optimizer("adam", dp=8).per_trainable       # 16.0
    OptimizerBytes.for_optimizer("18", dp=8).per_trainable          # 18.0 (bytes per parameter)
    OptimizerBytes.for_mode("adam", data_parallel.get("zero1"), 8).per_trainable   # 6 + 12/8 = 7.5
    memory = MemoryModel(workload, "adam", capacity=72e9)
    memory.static_memory(config, sizes, placement)   # per rank: RankMemory, activations: its transients
    memory.static_memory(config, sizes, placement, ("full", "none"))   # each stage's transients at its own mode

Per parameter (mixed-precision training, bf16 weights):

* ``"adam"``: 2 (bf16 weight) + 2 (bf16 gradient) + 12 (fp32 master weight and
  the two Adam moments) = **16** bytes;
* a number ``x``: ``x`` bytes per trainable parameter, split 2 weight, 2
  gradient, the rest optimizer.

:meth:`OptimizerBytes.for_optimizer` is the one parser of what a user writes
(``plan --optimizer``, ``partition --optimizer``): ``adam`` or a number.
Megatron-LM's distributed optimizer is not an optimizer but a data-parallel mode,
``zero1``, and ``"distributed"`` is refused with that pointer. Below the CLI,
:meth:`OptimizerBytes.for_mode` and :class:`MemoryModel` still take
``"distributed"`` as shorthand for Adam sharded as ``zero1`` under ``ddp``
(2 + 4 + 12 / dp = **6 + 12/dp**, Megatron-LM ``theoretical_memory_usage.py``),
for the benchmarks that model Megatron-LM's own runs.

With Adam, the data-parallel mode (its record in :mod:`pipeplan.data_parallel`,
over ``d`` ranks sharing the state; :meth:`OptimizerBytes.for_mode`) sets the split:

* ``ddp``: 2 + 2 + 12 = 16, nothing sharded (the gradient all-reduced in bf16);
* ``zero1``: 2 + 4 + 12/d (Megatron-LM's distributed optimizer, ``--use-distributed-optimizer``);
* ``zero2``: 2 + 2/d + 12/d (gradients reduce-scattered into their shard during
  each microbatch's backward, so one reduce-scatter per microbatch; ZeRO,
  Rajbhandari et al. 2020, §5: ``2Ψ + 14Ψ/N``);
* ``fsdp`` (FSDP2 with bf16 compute and fp32 reduction, torchtitan's
  ``MixedPrecisionPolicy``): every rank holds its ``1/d`` shard of the fp32
  parameters, fp32 gradients and the two moments, 16/d; without a pipeline the
  parameters are resharded after each layer's forward and backward, and the
  rank holds the unsharded bf16 parameters and gradients of the layer it runs
  and the one it prefetches, ``4 · (p₁ + p₂)`` bytes for its two largest layers
  (:meth:`MemoryModel.static_memory`); with a pipeline (torchtitan keeps the
  parameters unsharded across microbatches, ``reshard_after_forward=False``, and
  accumulates unsharded gradients until the last, in the fp32 reduce dtype) it
  holds 2 + 4 more per parameter: 2 + 4/d, 4, 12/d;
* ``hsdp``: ``fsdp`` with ``d`` the replicas of a stage inside one node
  (:func:`~pipeplan.data_parallel.hsdp_shards`), replicated across nodes.

The bytes each mode puts on the wire per parameter (``reduce``: the gradient
reduction; ``gather``: the parameter all-gather) are kept beside them.

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

Two transients sit on top of the stored activations at a rank's peak (the first
backward of a microbatch), priced here as fixed bytes of the rank that holds the layer
(:meth:`MemoryModel.transient_bytes`; benchmarks/memory_fidelity.py checks them against
published runs):

* **the loss** (an :class:`~pipeplan.models.modules.LMHead`): its fp32 logits,
  ``L = micro-batch × tokens × vocab / tp × 4`` bytes, live :data:`LOSS_LOGIT_COPIES`
  times at once, by engine. PyTorch's ``F.cross_entropy(logits.float(), ...)``
  (torchtitan's loss, ``train.py`` at 9dec370; plain torch) saves the log-softmax
  output and, at the start of the backward, holds its gradient and the input's
  gradient beside it: **3 L** (the forward's bf16 logits, fp32 copy and output are
  2.5 L). Megatron-LM's fused ``vocab_parallel_cross_entropy``
  (megatron/core/tensor_parallel/cross_entropy.py: ``.float()``, ``exp`` and the
  softmax in place, the gradient written into the saved softmax) holds **1.5 L**: the
  fp32 softmax and the bf16 gradient of the logits (DeepSpeed's Megatron-DeepSpeed uses
  it too). The layer profile already stores ``L`` per microbatch in flight under
  every mode (no engine checkpoints the head, ``full`` included); the rest is added once.
  A loss compiled with the model (``--compile on`` under torchtitan:
  ``compiled_loss``) holds **0.5 L**, the bf16 logits it saves and their gradient written
  into them (:data:`COMPILED_LOSS_COPIES`); the profile's stored ``L`` stands for it
  (0.5 L over), so nothing is added;
* **recomputation**: a layer that stores less than everything reruns its forward just
  before its backward and holds all of its activations for it, one layer at a time:
  the largest ``activations(none) − activations(mode)`` over the rank's layers (the
  head excepted: the loss above). Under a torch engine's tensor parallelism with
  sequence parallelism (:data:`GATHERED_INPUT_ENGINES`) the recomputed block holds its
  column-parallel GEMMs' gathered inputs whole, not their ``1/t`` shards: ``(1 − 1/t)`` of
  :func:`~pipeplan.models.layer_costs.gathered_input_bytes` more per recomputed layer, and every
  block's backward (recomputed or not) holds those inputs' gradients over the whole sequence
  before their reduce-scatter, as much again (measured with torchtitan's own block on CPU: the
  peak through a block's backward at tp 8 was 1.7 ``b · s · h · 2`` above the stored and rerun
  bytes, ``(1 − 1/t) · 2 b · s · h · 2`` = 1.75). (The
  same inputs a ``none`` block stores are in the workload's stored activations, where the
  engine's workload says so: :meth:`~pipeplan.planner.workload.Workload.with_saved_gathered_inputs`.)

Both are read per stage at the stage's own mode (a stage that ``relax`` lowered is
charged its lighter mode's), and for Megatron-LM's ``block:N`` / ``uniform:N`` off the
staged profile (:meth:`~pipeplan.planner.workload.Workload.stage_profile`: the head runs
``none`` there and stores ``L``, blocks past the first N recompute nothing), as the
layout and the timeline store them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import data_parallel
from ..data_parallel import DataParallelMode
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..plan import RankMemory, Recompute, recompute_rank, stage_recompute
from ..units import format_gib
from .engine_memory import (
    _FP32,
    COMPILED_LOSS_COPIES,
    GATHERED_INPUT_ENGINES,
    LOSS_LOGIT_COPIES,
    gathered_bytes,
    loss_layers,
)
from .space import Config
from .workload import Workload

__all__ = ["OptimizerBytes", "OPTIMIZERS", "MemoryModel", "DISTRIBUTED_REFUSAL", "MAX_BYTES_PER_PARAM",
           "LOSS_LOGIT_COPIES", "COMPILED_LOSS_COPIES", "GATHERED_INPUT_ENGINES", "loss_layers"]

#: The most bytes per parameter ``--optimizer BYTES`` takes: 64x mixed-precision Adam's 16, far above
#: any optimizer; ``1e308`` overflowed every candidate's memory ("no candidate could be evaluated").
MAX_BYTES_PER_PARAM = 1024.0

#: What ``--optimizer`` names besides a number of bytes per parameter.
OPTIMIZERS = ("adam",)

#: Why ``--optimizer distributed`` is refused, and what to write instead.
DISTRIBUTED_REFUSAL = (f"the distributed optimizer is the data-parallel mode {data_parallel.DISTRIBUTED_OPTIMIZER}: "
                       f"--dp-modes {data_parallel.DISTRIBUTED_OPTIMIZER}")


@dataclass(frozen=True)
class OptimizerBytes:
    """Bytes per parameter, by kind."""

    weights: float = 2.0
    gradients: float = 2.0
    optimizer: float = 12.0
    reduce: float = 2.0
    gather: float = 0.0

    @property
    def per_trainable(self) -> float:
        """Bytes of one trainable parameter."""
        return self.weights + self.gradients + self.optimizer

    @classmethod
    def for_mode(cls, optimizer: str | float, mode: DataParallelMode, shards: int, *,
                 pipelined: bool = False, reduce_bytes: float | None = None) -> OptimizerBytes:
        """The split of ``optimizer`` under data-parallel ``mode`` over ``shards`` ranks (module doc).

        ``pipelined``: the model is cut into pipeline stages (FSDP then keeps its
        parameters unsharded across microbatches). A number of bytes per parameter
        is taken as it is, whatever the mode; ``"distributed"`` (the evaluator's
        shorthand, module doc) is Adam's split under Megatron's distributed
        optimizer (:data:`~pipeplan.data_parallel.DISTRIBUTED_OPTIMIZER`) over ``shards``.
        ``reduce_bytes``: the gradient reduction's bytes per element an engine pins
        (``--grad-reduce-dtype``; ``None``: the mode's own), for Adam's splits.
        """
        if optimizer == "distributed":
            return cls(*data_parallel.get(data_parallel.DISTRIBUTED_OPTIMIZER).bytes_per_param(
                shards, reduce_bytes=reduce_bytes))
        if optimizer != "adam":
            return cls.for_optimizer(optimizer, shards)
        return cls(*mode.bytes_per_param(shards, pipelined=pipelined, reduce_bytes=reduce_bytes))

    @classmethod
    def for_optimizer(cls, optimizer: str | float, dp: int) -> OptimizerBytes:
        """The split for ``"adam"`` or a total number of bytes per parameter (``18`` or ``"18"``), unsharded.

        The one parser of ``--optimizer`` (``dp`` is unused: what data parallelism
        shards is :meth:`for_mode`'s).

        Raises:
            InvalidInputError: anything else; ``"distributed"`` with the pointer to
                ``--dp-modes zero1`` (:data:`DISTRIBUTED_REFUSAL`).
        """
        if optimizer == "adam":
            return cls(2.0, 2.0, 12.0)
        if isinstance(optimizer, str):
            if optimizer.strip().lower() == "distributed":
                raise InvalidInputError(DISTRIBUTED_REFUSAL)
            try:
                optimizer = float(optimizer)
            except ValueError:
                raise InvalidInputError(
                    f"optimizer must be 'adam' or bytes per parameter (weights + gradients + optimizer state, "
                    f"e.g. 16), got {optimizer!r}"
                ) from None
        total = float(optimizer)
        if not 0 < total <= MAX_BYTES_PER_PARAM:
            raise InvalidInputError(f"optimizer bytes per parameter must be in (0, {MAX_BYTES_PER_PARAM:g}] "
                                    f"(weights + gradients + optimizer state, e.g. 16), got {optimizer!r}")
        weights = min(2.0, total)
        gradients = min(2.0, total - weights)
        return cls(weights, gradients, total - weights - gradients, reduce=gradients)


class MemoryModel:
    """Per-rank bytes of one workload under one optimizer, and what fits ``capacity``.

    Args:
        workload: per-layer parameters and activation bytes.
        optimizer: ``"adam"``, bytes per parameter (:meth:`OptimizerBytes.for_optimizer`)
            or ``"distributed"`` (Adam sharded as ``zero1`` under ``ddp``, module doc).
        capacity: bytes one GPU may hold; ``None``: everything fits.
        dp_mode: the data-parallel mode's name (:mod:`pipeplan.data_parallel`; a
            replicated one: as ``optimizer`` says).
        gpus_per_node: GPUs per node of the devices ``dp_mode`` runs on (GPUs
            of a tensor-parallel group count as one), for ``hsdp``'s shards.
        engine: the engine the model runs in (``--engine``; ``None``: Megatron-LM's knobs), for
            its loss's fp32 logits (:data:`LOSS_LOGIT_COPIES`).
        reduce_bytes: bytes per gradient element of the data-parallel reduction where the engine's
            ``--grad-reduce-dtype`` pins it (``None``: each mode's own, :mod:`pipeplan.data_parallel`).
        compiled_loss: the engine compiles its loss (``--compile on`` under torchtitan):
            :data:`COMPILED_LOSS_COPIES` for a torch engine; ignored for the others.
    """

    def __init__(self, workload: Workload, optimizer: str | float, capacity: float | None,
                 dp_mode: str = data_parallel.REPLICATED, gpus_per_node: int = 8, engine: str | None = None,
                 reduce_bytes: float | None = None, compiled_loss: bool = False) -> None:
        self.workload = workload
        self.reduce_bytes = reduce_bytes
        self.engine = engine
        self.compiled_loss = compiled_loss and engine in GATHERED_INPUT_ENGINES
        self.loss_copies = (COMPILED_LOSS_COPIES if self.compiled_loss
                            else LOSS_LOGIT_COPIES.get(engine, LOSS_LOGIT_COPIES[None]))
        self.optimizer = optimizer
        self.capacity = capacity
        self.dp_mode = dp_mode
        self.mode = data_parallel.get(dp_mode)
        self.gpus_per_node = gpus_per_node
        self._static: dict[tuple[Any, ...], tuple[RankMemory, ...]] = {}
        self._memo: dict[tuple[Any, ...], Any] = {}  # what depends on (micro-batch size, [mode,] dp, pp) alone
        self.buffer_bytes = 0.0  # the engine's reduction buffers per rank (engine_buffers)
        self.gather_ahead: tuple[float, float] | None = None  # ZeRO-3's prefetch and live cap (engine_buffers)

    def engine_buffers(self, buffer_bytes: float, gather_ahead: tuple[float, float] | None) -> None:
        """What the engine's gradient sync holds beyond the model's bytes (before any layout is sized).

        ``buffer_bytes``: device bytes every rank holds for the reduction's buckets (DeepSpeed's
        ``contiguous_gradients`` buffers; priced with the parameters). ``gather_ahead``: for a mode
        that gathers per layer without a pipeline, ``(prefetch elements, most elements live)``:
        beside the largest layer gathered, ``min(prefetch, max(0, live − that layer))`` bf16
        elements gathered ahead (DeepSpeed ZeRO-3's ``stage3_prefetch_bucket_size`` and
        ``stage3_max_live_parameters``) instead of the next layer's weights and gradients (FSDP2's);
        ``None``: FSDP2's.
        """
        self.buffer_bytes = float(buffer_bytes)
        self.gather_ahead = gather_ahead
        self._static.clear()

    def shards(self, dp: int, pp: int) -> int:
        """Ranks the optimizer state is sharded over: ``dp`` (ZeRO, FSDP, the distributed optimizer), HSDP's
        shards inside a node, or 1 (DDP)."""
        if self.optimizer == "distributed" and not self.mode.shards_state:
            return dp
        return self.mode.shard_degree(1, pp, dp, self.gpus_per_node)

    def step_bytes(self, dp: int, pp: int) -> dict[str, float]:
        """What one rank's optimizer step reads and writes per parameter, for
        :func:`~pipeplan.planner.step.rank_optimizer_ms`: ``weights``, ``gradients``,
        ``state`` (already divided over the shards) and ``shards``."""
        per = self.bytes_per_param(dp, pp)
        shards = self.shards(dp, pp)
        if shards > 1 and self.optimizer == "adam":  # the shard's bf16 weights, its reduced gradient, its state
            return {"weights": 2.0, "gradients": per.reduce, "state": 12.0 / shards, "shards": shards}
        return {"weights": per.weights, "gradients": per.gradients, "state": per.optimizer, "shards": shards}

    def unsharded_layers(self, pp: int) -> bool:
        """Whether the mode gathers each layer's parameters for its forward and backward (FSDP/HSDP without a pipeline)."""
        return self.mode.per_layer(pp)

    def fits(self, total: float) -> bool:
        """Whether ``total`` bytes fit the capacity (within a part in 10⁹)."""
        return self.capacity is None or total <= self.capacity * (1 + 1e-9)

    def bytes_per_param(self, dp: int, pp: int = 1) -> OptimizerBytes:
        """Bytes per parameter at data-parallel degree ``dp`` and pipeline degree ``pp`` under the mode."""
        return OptimizerBytes.for_mode(self.optimizer, self.mode, self.shards(dp, pp), pipelined=pp > 1,
                                       reduce_bytes=self.reduce_bytes)

    def layer_static_bytes(self, micro_batch_size: int, dp: int, pp: int = 1) -> np.ndarray:
        """Bytes of weights, gradients and optimizer state per layer (cached; read-only)."""
        key = ("layer_static_bytes", micro_batch_size, dp, pp)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._layer_static_bytes(micro_batch_size, dp, pp)
            cached.flags.writeable = False
        return cached

    def _layer_static_bytes(self, micro_batch_size: int, dp: int, pp: int) -> np.ndarray:
        per = self.bytes_per_param(dp, pp)
        profile = self.workload.profile(micro_batch_size)
        params = np.asarray(profile.params)
        return params * per.weights + np.asarray(profile.trainable_params) * (per.gradients + per.optimizer)

    def memory_profile(self, micro_batch_size: int, mode: Recompute, dp: int,
                       pp: int = 1) -> tuple[LayerProfile, float]:
        """The profile the partitioner sees: params scaled so ``bytes_per_param`` × params is each layer's static bytes.

        Cached per ``(micro_batch_size, mode, dp, pp)``.
        """
        key = ("memory_profile", micro_batch_size, mode, dp, pp)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._memory_profile(micro_batch_size, mode, dp, pp)
        return cached

    def _memory_profile(self, micro_batch_size: int, mode: Recompute, dp: int, pp: int) -> tuple[LayerProfile, float]:
        profile = self._with_loss(self.workload.profile(micro_batch_size, mode), micro_batch_size, mode)
        per = self.bytes_per_param(dp, pp)
        if profile.trainable_params == profile.params:
            return profile, per.per_trainable
        scaled = self.layer_static_bytes(micro_batch_size, dp, pp) / per.per_trainable
        # a copy that trains while its table is frozen holds more than the table: counted apart
        tied = [t if t < 0 or scaled[i] <= scaled[t] else -1 for i, t in enumerate(profile.tied_to)]
        return (
            LayerProfile(profile.forward, profile.backward, profile.weight, backward_input=profile.backward_input,
                         activation_bytes=profile.activation_bytes,
                         params=scaled.tolist(), names=profile.names, first_extra=profile.first_extra,
                         last_extra=profile.last_extra, first_extra_bytes=profile.first_extra_bytes,
                         last_extra_bytes=profile.last_extra_bytes, tied_to=tied),
            per.per_trainable,
        )

    def transient_bytes(self, micro_batch_size: int, mode: Recompute,
                        sizes: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per layer, ``(loss, recompute)``: the bytes its loss adds at once beyond what the profile stores, and the
        bytes its recomputed forward holds during its backward (module doc). Cached per ``(micro-batch size, mode)``.

        ``sizes``: layers per stage, for Megatron-LM's ``block:N`` / ``uniform:N``
        (:func:`~pipeplan.plan.stage_recompute`), whose layers run by their place in
        their stage: the transients are then read off
        :meth:`~pipeplan.planner.workload.Workload.stage_profile` (what the layout and
        the timeline store), not off the lower-bound :meth:`Workload.profile`. Other
        modes ignore ``sizes``.
        """
        staged = None if sizes is None or stage_recompute(mode) is None else tuple(int(size) for size in sizes)
        key = ("transient_bytes", micro_batch_size, mode, staged)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._transient_bytes(micro_batch_size, mode, staged)
        return cached

    def _transient_bytes(self, micro_batch_size: int, mode: Recompute,
                         sizes: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        source = (self.workload.profile(micro_batch_size, mode) if sizes is None
                  else self.workload.stage_profile(micro_batch_size, mode, sizes))
        stored = np.asarray(source.activation_bytes, dtype=float)
        loss = np.zeros(len(stored))
        recompute = np.zeros(len(stored))
        if self.workload.spec is None:  # a measured profile: what it gives is all there is
            return loss, recompute
        heads = loss_layers(self.workload)
        for index, logits in heads:
            fp32 = _FP32 * micro_batch_size * logits
            counted = fp32 if stored[index] >= fp32 else 0.0  # the profile stores the logits (none, selective) or not
            loss[index] = max(self.loss_copies * fp32 - counted, 0.0)
        gathered = self.gathered_bytes(micro_batch_size)
        if mode != "none":
            whole = np.asarray(self.workload.source(micro_batch_size, "none").activation_bytes, dtype=float)
            recompute = np.maximum(whole - stored, 0.0)
            recompute[[index for index, _ in heads]] = 0.0
            if not self.workload.saves_gathered_inputs:  # else ``whole`` (none's stored bytes) holds them already
                recompute += gathered * (recompute > 0)
        # every block's backward under a torch engine's sequence parallelism: its gathered inputs' gradients over the
        # whole sequence before their reduce-scatter (measured: benchmarks/torchtitan_activations.py, module doc)
        recompute = recompute + gathered
        for array in (loss, recompute):
            array.flags.writeable = False
        return loss, recompute

    def gathered_bytes(self, micro_batch_size: int) -> np.ndarray:
        """Per layer, the bytes a torch engine's tensor parallelism keeps beyond the profile's ``1/t`` shards
        (:func:`~pipeplan.planner.engine_memory.gathered_bytes`)."""
        return gathered_bytes(self.workload, self.engine, micro_batch_size)

    def _with_loss(self, profile: LayerProfile, micro_batch_size: int, mode: Recompute) -> LayerProfile:
        """``profile`` as the partitioner sees it: the loss's extra bytes on the last stage when the head is the
        last layer, else on the head's activations (charged per microbatch in flight: an upper bound)."""
        loss, _ = self.transient_bytes(micro_batch_size, mode)
        if not loss.any():
            return profile
        last = len(loss) - 1
        activations = np.asarray(profile.activation_bytes, dtype=float).copy()
        activations[:last] += loss[:last]
        return profile.replaced(activation_bytes=activations.tolist(),
                                last_extra_bytes=profile.last_extra_bytes + float(loss[last]))

    def static_memory(self, config: Config, sizes: Sequence[int], placement: Sequence[int],
                      recompute: Sequence[Recompute] | None = None) -> tuple[RankMemory, ...]:
        """Per rank, the weights, gradients and optimizer state of its stages; ``activations``: its transients.

        ``sizes`` are layers per stage, ``placement`` each stage's rank, ``recompute``
        each stage's mode (``None``: ``config.recompute`` on every stage). ``parameters``
        hold the first and last stages' fixed bytes too; ``activations`` the loss's and
        the largest recomputed layer's transient (:meth:`transient_bytes`, each stage's
        layers under its own mode, Megatron-LM's ``block:N`` / ``uniform:N`` per stage),
        which the evaluator adds to the simulated peak of the stored ones. Cached per
        ``(dp, pp, micro-batch size, recompute, sizes, placement)``, all it depends on.
        """
        modes = (config.recompute,) * len(sizes) if recompute is None else tuple(recompute)
        key = (config.dp, config.pp, config.micro_batch_size, modes, tuple(sizes), tuple(placement))
        cached = self._static.get(key)
        if cached is None:
            cached = self._static[key] = self._static_memory(config, sizes, placement, modes)
        return cached

    def _static_memory(self, config: Config, sizes: Sequence[int], placement: Sequence[int],
                       modes: tuple[Recompute, ...]) -> tuple[RankMemory, ...]:
        """:meth:`static_memory`, computed."""
        per = self.bytes_per_param(config.dp, config.pp)
        profile = self.workload.profile(config.micro_batch_size)
        params = np.asarray(profile.params)
        trainable_params = np.asarray(profile.trainable_params)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        weights = [0.0] * config.pp
        grads = [0.0] * config.pp
        extras = [0.0] * config.pp
        transients = [0.0] * config.pp  # the loss's and a recomputed layer's, beside the stored activations
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
        loss = np.zeros(len(params))
        recompute = np.zeros(len(params))
        for mode in set(modes):  # each stage's layers under its own mode
            mode_loss, mode_recompute = self.transient_bytes(config.micro_batch_size, mode, sizes)
            for s in (s for s, m in enumerate(modes) if m == mode):
                loss[bounds[s]:bounds[s + 1]] = mode_loss[bounds[s]:bounds[s + 1]]
                recompute[bounds[s]:bounds[s + 1]] = mode_recompute[bounds[s]:bounds[s + 1]]
        for rank in range(config.pp):
            held = owner == rank
            transients[rank] = float(loss[held].sum()) + float(recompute[held].max(initial=0.0))
        for rank in range(config.pp):
            extras[rank] += self.buffer_bytes
        if self.unsharded_layers(config.pp) and self.gather_ahead is not None:  # DeepSpeed ZeRO-3's own prefetch
            prefetch, live = self.gather_ahead
            largest_layer = float(params.max(initial=0.0))
            extras[0] += 4.0 * largest_layer + 2.0 * min(prefetch, max(0.0, live - largest_layer))
        elif self.unsharded_layers(config.pp):  # the gathered layer and the prefetched one, bf16 weights + gradients
            largest = np.sort(params)[::-1]
            if self.workload.reshard_after_forward:
                extras[0] += 4.0 * float(largest[:2].sum())
            else:  # not resharded after the forward: every layer's bf16 weights gathered at the backward's start
                extras[0] += 2.0 * float(params.sum()) + 2.0 * float(largest[:2].sum())
        return tuple(
            RankMemory(per.weights * weights[r] + extras[r], per.gradients * grads[r], per.optimizer * grads[r],
                       transients[r])
            for r in range(config.pp)
        )

    def least_peak(self, config: Config) -> float:
        """Bytes some rank must hold at its peak whatever the partition, schedule and recompute.

        Every rank holds its weights and state and, at its first backward, at
        least one microbatch of its layers' activations (the least over the
        recompute modes), so the fullest holds at least the ``1/pp`` share of
        both; and at least :meth:`static_bound`. Cached per ``(micro-batch size, dp, pp)``.
        """
        key = ("least_peak", config.micro_batch_size, config.dp, config.pp)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._least_peak(config)
        return cached

    def _least_peak(self, config: Config) -> float:
        profile = self.workload.profile(config.micro_batch_size)
        per = self.bytes_per_param(config.dp, config.pp)
        params, trained = profile.held_params()
        total = per.weights * params + (per.gradients + per.optimizer) * trained
        total += profile.first_extra_bytes + profile.last_extra_bytes
        activations = min(sum(self.workload.profile(config.micro_batch_size, mode).activation_bytes)
                          for mode in self.workload.recompute_modes)
        return max(self.static_bound(config), (total + activations) / config.pp)

    def static_bound(self, config: Config) -> float:
        """Bytes some rank must hold whatever the partition: ``max(static ÷ pp, largest layer)`` (a tied table once).

        Cached per ``(micro-batch size, dp, pp)``.
        """
        key = ("static_bound", config.micro_batch_size, config.dp, config.pp)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._static_bound(config)
        return cached

    def _static_bound(self, config: Config) -> float:
        profile = self.workload.profile(config.micro_batch_size)
        static = self.layer_static_bytes(config.micro_batch_size, config.dp, config.pp)
        per = self.bytes_per_param(config.dp, config.pp)
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
        ceiling = recompute_rank(config.recompute)
        assignment: list[Recompute] = [config.recompute] * len(sizes)
        if ceiling == 0 or self.capacity is None:
            return tuple(assignment)
        static = self.static_memory(config, sizes, placement)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        # the workload's modes up to the ceiling, cheapest in time first (RECOMPUTE_MODES' order)
        candidates = sorted((mode for mode in self.workload.recompute_modes if recompute_rank(mode) <= ceiling),
                            key=recompute_rank)
        act = {
            mode: np.asarray(self.workload.profile(config.micro_batch_size, mode).activation_bytes)
            for mode in candidates
        }
        stage_act = {mode: [float(a[bounds[s]:bounds[s + 1]].sum()) * counts[s] for s in range(len(sizes))]
                     for mode, a in act.items()}
        for s in range(len(sizes)):
            rank = placement[s]
            others = sum(stage_act[assignment[t]][t] for t in range(len(sizes)) if placement[t] == rank and t != s)
            for mode in candidates:
                if self.fits(static[rank].total + others + stage_act[mode][s]):
                    assignment[s] = mode
                    break
        return tuple(assignment)

    def heaviest(self, config: Config, layers: Sequence[int]) -> str:
        """The layer among ``layers`` with the most bytes (static plus one microbatch's activations), described."""
        profile = self.workload.profile(config.micro_batch_size, config.recompute)
        static = self.layer_static_bytes(config.micro_batch_size, config.dp, config.pp)
        act = np.asarray(profile.activation_bytes)
        index = max(layers, key=lambda i: static[i] + act[i])
        return f"{profile.names[index]!r} ({format_gib(static[index])} of weights and optimizer state)"
