"""One ``Plan`` type: how to lay a model out on GPUs, and what that is predicted to cost.

A plan is what the partitioner, the chunk placement and the planner return, and
what every export reads: pipeline and data-parallel degrees, layers per stage,
the stage → rank placement, the schedule and its options, the micro-batch size
and microbatches per step, recompute per stage, the predicted Timeline, step
time and memory per rank::

    from pipeplan.plan import Plan, as_plan
    plan = as_plan([3, 11, 11, 7])                     # one stage per rank
    plan.layers_per_stage, plan.placement, plan.pp     # (3, 11, 11, 7), (0, 1, 2, 3), 4

:class:`~pipeplan.partition.PartitionResult` (the min-max partitioner's answer) and
:class:`~pipeplan.partition.placement.ChunkPlacement` (chunks placed on ranks) are
subclasses: Plans with ``dp = 1`` that add their solver's fields. :func:`as_plan`
is the one converter from a bare list of layers per stage. It sits beside the
partitioner, below the planner, so both can return it; :mod:`pipeplan.planner`
re-exports it.

Units: times in the profile's unit (:attr:`Plan.time_unit` seconds each; the CLI
and presets use milliseconds, ``1e-3``), bytes in bytes, throughput per second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from . import data_parallel
from .errors import InvalidInputError
from .schedules import schedule_label
from .timeline import Timeline

__all__ = ["Plan", "RankMemory", "Recompute", "RECOMPUTE_MODES", "TORCHTITAN_RECOMPUTE", "STAGE_RECOMPUTE",
           "check_recompute", "recompute_at", "recompute_rank", "stage_recompute", "TpCommOverlap", "TP_COMM_OVERLAPS",
           "MEGATRON_TP_COMM_OVERLAPS", "as_plan"]

#: A recompute mode: one of :data:`RECOMPUTE_MODES` (Megatron-LM's), torchtitan's ``"op"`` (its per-op
#: selective checkpointing) and ``"every:N"`` (full recompute of every Nth block, the rest none), or
#: Megatron-LM's ``"block:N"`` and ``"uniform:N"`` (``--recompute-granularity full --recompute-method
#: block|uniform --recompute-num-layers N``): :func:`check_recompute` says which strings are modes.
Recompute = str
#: Recompute modes from cheapest in time to cheapest in memory (Megatron-LM's; the planner's default search).
RECOMPUTE_MODES: tuple[Recompute, ...] = ("none", "selective", "full")
#: torchtitan's activation-checkpointing modes as pipeplan names them (``every:N`` for any N >= 1).
TORCHTITAN_RECOMPUTE: tuple[str, ...] = ("none", "op", "every:N", "full")
#: Megatron-LM's full-recompute methods whose cost depends on a layer's place in its stage
#: (:func:`stage_recompute`): ``block:N`` and ``uniform:N`` for any N >= 1.
STAGE_RECOMPUTE: tuple[str, ...] = ("block:N", "uniform:N")
_COUNTED = ("every", "block", "uniform")


def check_recompute(mode: object) -> Recompute:
    """``mode`` when it is a recompute mode: ``none``, ``selective``, ``full``, ``op``, ``every:N``, ``block:N``
    or ``uniform:N`` (N >= 1).

    Raises:
        InvalidInputError: anything else (one line naming the modes).
    """
    if isinstance(mode, str) and (mode in RECOMPUTE_MODES or mode == "op" or _counted(mode) is not None):
        return mode
    raise InvalidInputError(f"recompute must be 'none', 'selective', 'full', 'op', 'every:N', 'block:N' or "
                            f"'uniform:N' (N >= 1), got {mode!r}")


def _counted(mode: str) -> tuple[str, int] | None:
    """``(kind, N)`` of ``"every:N"``, ``"block:N"`` or ``"uniform:N"`` (N a positive integer), else ``None``."""
    head, _, count = mode.partition(":")
    if head not in _COUNTED or not count.isdigit() or int(count) < 1:
        return None
    return head, int(count)


def _every(mode: str) -> int | None:
    """N of ``"every:N"`` (a positive integer), else ``None``."""
    counted = _counted(mode)
    return counted[1] if counted is not None and counted[0] == "every" else None


def stage_recompute(mode: Recompute) -> tuple[str, int] | None:
    """``("block", N)`` or ``("uniform", N)`` for Megatron-LM's positional full-recompute modes, else ``None``.

    What Megatron-LM runs (megatron/core/transformer/transformer_block.py, ``_checkpointed_forward``,
    megatron-core 0.16.1 and Megatron-LM d98e8a64), per pipeline stage, a virtual chunk included (its
    ``TransformerBlock`` counts ``num_layers_per_pipeline_rank = len(self.layers)``, transformer layers
    only: the embedding and the output layer are outside it):

    * ``block:N`` (``--recompute-method block --recompute-num-layers N``): the first N transformer layers
      of each stage are checkpointed one by one (each keeps only its input and runs its forward again
      before its backward); the rest keep every activation and recompute nothing.
    * ``uniform:N`` (``--recompute-method uniform``): the stage's layers in groups of N from its first,
      each group checkpointed as one (only the group's input kept; every layer's forward runs again).
      ``uniform:1`` is pipeplan's ``full``.
    """
    counted = _counted(mode)
    return counted if counted is not None and counted[0] in ("block", "uniform") else None


def recompute_at(mode: Recompute, index: int) -> Recompute:
    """The mode block ``index`` (0-based, within its stack) runs under ``mode``.

    ``"every:N"`` is torchtitan's selective *layer* checkpointing (``selective_ac_option = "N"``,
    torchtitan/parallelisms/parallelize_llama.py at 0413364, ``checkpoint_wrapper``): its counter
    wraps the ``N``-th, ``2N``-th, ... block in full checkpointing and leaves the others alone, so
    block ``index`` is ``"full"`` when ``(index + 1) % N == 0``, else ``"none"``. Every other mode
    applies to every block alike (``block:N`` and ``uniform:N`` depend on the stage instead:
    :func:`stage_recompute`).
    """
    count = _every(mode)
    if count is None:
        return mode
    return "full" if (index + 1) % count == 0 else "none"


def recompute_rank(mode: Recompute) -> float:
    """A total order of the modes from cheapest in time to cheapest in memory (:data:`RECOMPUTE_MODES`' order).

    ``none`` 0, ``selective`` 1, ``op`` 2 (torchtitan's per-op: elementwise work and every second
    GEMM again), ``every:N`` ``2 + 1/N`` (a fraction ``1/N`` of the blocks fully recomputed),
    ``block:N`` ``3 - 1/(N + 1)`` (the first N blocks of each stage fully recomputed), ``full`` 3
    (``every:1``, ``uniform:1``), ``uniform:N`` ``4 - 1/N`` (full's time, one kept input per N
    blocks). Only ``none``, ``selective`` and ``full`` are ordered in both time and memory; the
    others are placed by the time they add, then the memory they keep.
    """
    counted = _counted(check_recompute(mode))
    if counted is not None:
        kind, count = counted
        return {"every": 2.0 + 1.0 / count, "block": 3.0 - 1.0 / (count + 1), "uniform": 4.0 - 1.0 / count}[kind]
    return {"none": 0.0, "selective": 1.0, "op": 2.0, "full": 3.0}[mode]


TpCommOverlap = Literal["off", "backward", "on", "async"]
#: What a tensor-parallel group's collectives hide behind: ``"off"`` nothing (forward and backward exposed:
#: torch's DTensor tensor parallelism, torchtitan's vanilla TP), ``"backward"`` the backward's behind the
#: weight-gradient GEMMs (Megatron-LM without ``--tp-comm-overlap``), ``"on"`` the forward's behind the forward
#: GEMMs too (``--tp-comm-overlap``), ``"async"`` a fitted share of each collective behind its layer's GEMMs
#: (torch's async TP, torchtitan's ``enable_async_tensor_parallel``: pipeplan.engines._eager.ASYNC_TP_HIDDEN).
TP_COMM_OVERLAPS: tuple[TpCommOverlap, ...] = ("off", "backward", "on", "async")
#: Megatron-LM's ``--tp-comm-overlap`` knob's values (``async`` is torch's, not Megatron-LM's).
MEGATRON_TP_COMM_OVERLAPS: tuple[TpCommOverlap, ...] = ("off", "backward", "on")


@dataclass(frozen=True)
class RankMemory:
    """Peak bytes one rank holds, by what holds them.

    Attributes:
        parameters: model weights (2 bytes per parameter in bf16).
        gradients: weight gradients (none for frozen layers).
        optimizer: optimizer state (fp32 master weights and Adam moments; sharded
            over data parallel with Megatron's distributed optimizer).
        activations: the peak of activations held for later backwards, from the
            simulated timeline (or the schedule's in-flight counts before it).
    """

    parameters: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        """All of it, bytes."""
        return self.parameters + self.gradients + self.optimizer + self.activations

    def to_dict(self) -> dict[str, float]:
        """JSON-ready breakdown, with ``total``."""
        return {
            "parameters": self.parameters,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "total": self.total,
        }


@dataclass(frozen=True)
class Plan:
    """A pipeline × data-parallel layout of a model and its predicted cost.

    The partitioner's :class:`~pipeplan.partition.PartitionResult` and the chunk
    placement's :class:`~pipeplan.partition.placement.ChunkPlacement` are Plans too
    (subclasses that derive ``pp`` and ``dp = 1`` and add their solver's fields).

    Attributes:
        pp: pipeline-parallel degree (ranks per pipeline).
        dp: data-parallel degree (pipeline replicas); ``tp · pp · dp`` GPUs.
        tp: tensor-parallel degree (GPUs sharing each layer, inside a node;
            Megatron-LM's ``--tensor-model-parallel-size``); 1: none.
        sequence_parallel: with ``tp > 1``, norms and dropouts split over the
            sequence too (Megatron-LM's ``--sequence-parallel``).
        tp_comm_overlap: with ``tp > 1``, which tensor-parallel collectives the step
            hides behind GEMMs: ``"off"`` none, ``"backward"`` the backward's
            (Megatron-LM's default), ``"on"`` the forward's too (``--tp-comm-overlap``).
        dp_mode: how data parallelism holds the model state, a mode's name
            (:func:`pipeplan.data_parallel.names`).
        recompute_by_module: the recompute mode of each module of the model,
            by module name (empty: the per-stage ``recompute`` says it all).
        grad_sync: how the gradients were timed to be reduced for ``ddp``,
            ``zero1`` and ``zero2`` (:data:`pipeplan.planner.step.SYNCS`:
            ``"megatron"`` after the backward, ``"megatron-overlap"`` with
            ``--overlap-grad-reduce --overlap-param-gather``, ``"torch-ddp"``).
        grad_reduce_dtype: the dtype the gradients were timed to be reduced in and their
            replicated buffer held in, where the engine's ``--grad-reduce-dtype`` pinned it
            (``"fp32"``, ``"bf16"``); ``None``: each data-parallel mode's own
            (:mod:`pipeplan.data_parallel`). The exports write it.
        layers_per_stage: layers of each stage in model order (``pp · v`` stages).
        placement: ``placement[s]`` is the pipeline rank holding stage ``s``.
        schedule: registered schedule name (``"1f1b"``, ``"interleaved"``, ...).
        schedule_options: options it was built with (``virtual_stages``,
            ``memory_limits``, each rank's activation bytes, for ``"adaptive"``).
        micro_batch_size: samples per microbatch.
        num_microbatches: microbatches per step per pipeline (``m``); the global
            batch is ``micro_batch_size · m · dp``.
        recompute: activation recompute of each stage: ``"none"``,
            ``"selective"`` (attention recomputed) or ``"full"`` (each layer's
            forward re-run in its backward).
        step_time: predicted time of one optimizer step: ``pipeline_time +
            dp_exposed_time + optimizer_time`` (``None`` when not simulated).
        pipeline_time: the simulated pipeline makespan alone.
        dp_comm_time: the data-parallel communication in full, slowest rank: the
            gradient all-reduce (reduce-scatter and parameter all-gather with the
            distributed optimizer), overlapped or not.
        dp_exposed_time: the part of it that lengthens the step (what the
            backward and the pipeline's drain do not hide); ``None``: all of
            ``dp_comm_time`` (nothing overlapped).
        optimizer_time: the optimizer step after the reduction, slowest rank.
        memory: peak bytes per pipeline rank, by kind.
        memory_capacity: bytes each GPU has (``None``: unchecked).
        layer_names: one name per layer (module names for the torch exports).
        time_unit: seconds per time unit of ``step_time`` (``1e-3``: milliseconds).
        flops_per_sample: model FLOPs of one training sample (forward and
            backward, without recompute) when known; gives MFU.
        peak_flops: dense FLOP/s of one GPU (for MFU), when known.
        tokens_per_sample: tokens one sample carries (for tokens/s), when known.
        timeline: the predicted :class:`~pipeplan.timeline.Timeline` of one pipeline.
        fits: every rank's peak fits ``memory_capacity``.
        reason: why it does not fit (which rank, by how many bytes), else ``""``.
    """

    pp: int
    dp: int
    layers_per_stage: tuple[int, ...]
    placement: tuple[int, ...]
    schedule: str = "1f1b"
    schedule_options: Mapping[str, Any] = field(default_factory=dict)
    micro_batch_size: int = 1
    num_microbatches: int = 1
    recompute: tuple[Recompute, ...] = ()
    step_time: float | None = None
    pipeline_time: float | None = None
    dp_comm_time: float = 0.0
    memory: tuple[RankMemory, ...] = ()
    memory_capacity: float | None = None
    layer_names: tuple[str, ...] = ()
    time_unit: float = 1e-3
    flops_per_sample: float | None = None
    peak_flops: float | None = None
    tokens_per_sample: float | None = None
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    fits: bool = True
    reason: str = ""
    dp_exposed_time: float | None = None
    optimizer_time: float = 0.0
    tp: int = 1
    sequence_parallel: bool = False
    tp_comm_overlap: TpCommOverlap = "backward"
    dp_mode: str = data_parallel.REPLICATED
    recompute_by_module: Mapping[str, Recompute] = field(default_factory=dict, hash=False)
    grad_sync: str = "megatron"
    grad_reduce_dtype: str | None = None

    def __post_init__(self) -> None:
        sizes = self.layers_per_stage
        if not sizes or any(int(n) != n or n < 1 for n in sizes):
            raise InvalidInputError(f"layers_per_stage must be counts >= 1, got {list(sizes)}")
        if len(self.placement) != len(sizes):
            raise InvalidInputError(
                f"placement has {len(self.placement)} entries, expected {len(sizes)} (one per stage)"
            )
        data_parallel.check_mode("dp_mode", self.dp_mode)
        if isinstance(self.tp, bool) or not isinstance(self.tp, (int, np.integer)) or self.tp < 1:
            raise InvalidInputError(f"tp must be an integer >= 1, got {self.tp!r}")
        if sorted(set(self.placement)) != list(range(self.pp)):
            raise InvalidInputError(
                f"placement {list(self.placement)} must use every rank 0..{self.pp - 1} of pp={self.pp}"
            )
        if self.recompute and len(self.recompute) != len(sizes):
            raise InvalidInputError(
                f"recompute has {len(self.recompute)} entries, expected {len(sizes)} (one per stage)"
            )
        if self.layer_names and len(self.layer_names) != sum(sizes):
            raise InvalidInputError(
                f"layer_names has {len(self.layer_names)} entries, expected {sum(sizes)} (one per layer)"
            )

    # ------------------------------------------------------------------ shape
    @property
    def num_stages(self) -> int:
        """Stages ``pp · v``."""
        return len(self.layers_per_stage)

    @property
    def num_layers(self) -> int:
        """Layers of the model."""
        return sum(self.layers_per_stage)

    @property
    def num_ranks(self) -> int:
        """Pipeline ranks (GPUs) the stages are placed on: ``pp``."""
        return self.pp

    @property
    def virtual_stages(self) -> int:
        """Stages per rank ``v`` (1 for one stage per rank)."""
        return self.num_stages // self.pp

    @property
    def num_gpus(self) -> int:
        """``tp · pp · dp``."""
        return self.tp * self.pp * self.dp

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step: ``micro_batch_size · m · dp``."""
        return self.micro_batch_size * self.num_microbatches * self.dp

    @property
    def boundaries(self) -> tuple[int, ...]:
        """Layer offsets ``(0, ..., L)``; stage ``s`` is layers ``[b[s], b[s+1])``."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.layers_per_stage)]))

    @property
    def layer_ranges(self) -> tuple[range, ...]:
        """The layer indices of each stage."""
        bounds = self.boundaries
        return tuple(range(bounds[s], bounds[s + 1]) for s in range(self.num_stages))

    def stages_of(self, rank: int) -> tuple[int, ...]:
        """The stages on pipeline ``rank``, in model order."""
        return tuple(s for s, r in enumerate(self.placement) if r == rank)

    @property
    def schedule_label(self) -> str:
        """``"interleaved v=3"``, ``"adaptive v=3"``, ``"zb-v"``, ``"1f1b"`` ..."""
        return schedule_label(self.schedule, self.virtual_stages)

    @property
    def one_stage_per_rank(self) -> bool:
        """Stage ``s`` on rank ``s`` (no chunks)."""
        return self.placement == tuple(range(self.num_stages))

    @property
    def uniform_recompute(self) -> Recompute | None:
        """The recompute mode when every stage uses the same one, else ``None``."""
        modes = set(self.recompute or ("none",))
        return next(iter(modes)) if len(modes) == 1 else None

    # ------------------------------------------------------------- headline
    @property
    def exposed_dp_time(self) -> float:
        """``dp_exposed_time``, or all of ``dp_comm_time`` when it was not given."""
        return self.dp_comm_time if self.dp_exposed_time is None else self.dp_exposed_time

    @property
    def step_seconds(self) -> float | None:
        """Step time in seconds."""
        return None if self.step_time is None else self.step_time * self.time_unit

    def milliseconds(self, value: float | None) -> float:
        """A time of this plan, in its :attr:`time_unit`, as milliseconds (``None``: 0)."""
        return 0.0 if value is None else value * self.time_unit * 1e3

    @property
    def samples_per_second(self) -> float | None:
        """Global batch ÷ step time."""
        seconds = self.step_seconds
        return None if not seconds else self.global_batch / seconds

    @property
    def tokens_per_second(self) -> float | None:
        """Samples per second × tokens per sample, when known."""
        rate = self.samples_per_second
        return None if rate is None or self.tokens_per_sample is None else rate * self.tokens_per_sample

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation: model FLOPs per second ÷ (GPUs × peak FLOP/s)."""
        rate = self.samples_per_second
        if rate is None or self.flops_per_sample is None or not self.peak_flops:
            return None
        return rate * self.flops_per_sample / (self.num_gpus * self.peak_flops)

    @property
    def bubble_ratio(self) -> float | None:
        """Idle share of the pipeline timeline (``None`` without one)."""
        return None if self.timeline is None else float(self.timeline.bubble_ratio)

    @property
    def peak_memory(self) -> tuple[float, ...]:
        """Peak bytes per pipeline rank."""
        return tuple(rank.total for rank in self.memory)

    @property
    def worst_rank(self) -> int | None:
        """The rank with the most bytes (``None`` without a memory model)."""
        peaks = self.peak_memory
        return int(np.argmax(peaks)) if peaks else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready plan (the ``pipeplan plan --json`` contract's fields and more)."""
        return {
            "pp": self.pp,
            "dp": self.dp,
            "tp": self.tp,
            "sequence_parallel": self.sequence_parallel,
            **({"tp_comm_overlap": self.tp_comm_overlap} if self.tp > 1 else {}),
            "dp_mode": self.dp_mode,
            "recompute_by_module": dict(self.recompute_by_module),
            "grad_sync": self.grad_sync,
            **({"grad_reduce_dtype": self.grad_reduce_dtype} if self.grad_reduce_dtype is not None else {}),
            "schedule": self.schedule,
            "schedule_options": dict(self.schedule_options),
            "virtual_stages": self.virtual_stages,
            "micro_batch_size": self.micro_batch_size,
            "microbatches": self.num_microbatches,
            "global_batch": self.global_batch,
            "layers_per_stage": list(self.layers_per_stage),
            "placement": list(self.placement),
            "recompute": list(self.recompute or ("none",) * self.num_stages),
            "step_time": self.step_time,
            "pipeline_time": self.pipeline_time,
            "dp_comm_time": self.dp_comm_time,
            "dp_exposed_time": self.exposed_dp_time,
            "optimizer_time": self.optimizer_time,
            "time_unit_seconds": self.time_unit,
            "samples_per_second": self.samples_per_second,
            "tokens_per_second": self.tokens_per_second,
            "mfu": self.mfu,
            "bubble_ratio": self.bubble_ratio,
            "peak_memory": list(self.peak_memory),
            "memory": [rank.to_dict() for rank in self.memory],
            "memory_capacity": self.memory_capacity,
            "fits": self.fits,
            "reason": self.reason,
        }


def as_plan(source: Plan | Sequence[int]) -> Plan:
    """The :class:`Plan` itself, or the one a list of layer counts per stage describes.

    A :class:`~pipeplan.partition.PartitionResult` or a
    :class:`~pipeplan.partition.placement.ChunkPlacement` is a Plan already and is
    returned as it is. A list of counts is one stage per rank; memory and data
    parallelism are unknown there (``dp = 1``).

    Raises:
        InvalidInputError: anything else, or counts < 1.
    """
    if isinstance(source, Plan):
        return source
    if isinstance(source, (str, bytes)) or not isinstance(source, Sequence):
        raise InvalidInputError(
            f"expected a Plan, a PartitionResult, a ChunkPlacement or layers per stage, got {type(source).__name__}"
        )
    sizes = tuple(source)
    if not sizes or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in sizes):
        raise InvalidInputError(f"layers_per_stage must be counts >= 1, got {list(sizes)}")
    return Plan(pp=len(sizes), dp=1, layers_per_stage=tuple(int(n) for n in sizes),
                placement=tuple(range(len(sizes))))
