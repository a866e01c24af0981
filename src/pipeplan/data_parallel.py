"""Data-parallel modes, one record each, and their registry: what each holds per parameter and what it sends.

    from pipeplan import data_parallel
    zero1 = data_parallel.get("zero1")
    zero1.bytes_per_param(8).state, zero1.reductions_per_step(4)   # 1.5 (12/8 bytes), 1
    data_parallel.names()                                           # ("ddp", "zero1", "zero2", "fsdp", "hsdp")

A mode says how the ``d`` ranks sharing a stage's state (its data-parallel
replicas) hold mixed-precision Adam's weights, gradients and optimizer state,
in bytes per trained parameter (docs/planner.md, "Data-parallel modes"):

* ``ddp``: 2 + 2 + 12, nothing sharded; an all-reduce of bf16 gradients once a step;
* ``zero1`` (Megatron-LM's distributed optimizer): 2 + 4 (fp32) + 12/d; a reduce-scatter
  of fp32 gradients and an all-gather of bf16 weights once a step;
* ``zero2``: 2 + 2/d + 12/d; a reduce-scatter of bf16 gradients every microbatch
  (the gradients are held sharded) and an all-gather of bf16 weights;
* ``fsdp`` (ZeRO-3): 4/d + 4/d + 8/d; per layer, every microbatch, an all-gather of
  bf16 weights before its forward and again before its backward and a
  reduce-scatter of fp32 gradients after it; behind a pipeline (unsharded weights
  across microbatches, gradients accumulated in fp32) 2 + 4/d, 4, 12/d with one
  gather and one reduce-scatter a step;
* ``hsdp``: as ``fsdp`` with ``d`` the replicas of a stage inside a node, the shard's
  reduction all-reduced across nodes.

Those reduction dtypes are each mode's own default. An engine's knob
(``--grad-reduce-dtype fp32|bf16``: Megatron-LM's ``--grad-reduce-in-bf16``, DeepSpeed's
``communication_data_type``, FSDP2's ``reduce_dtype``) pins one dtype for every mode:
``bytes_per_param(d, reduce_bytes=2.0)`` sends 2 bytes per parameter and holds the
replicated gradient buffer (``ddp``, ``zero1``, ``fsdp`` behind a pipeline) in 2 bytes
too, since the engine keeps that buffer in the reduction's dtype; a sharded gradient
(``zero2``'s, ``fsdp``'s fp32 shard) keeps its own.

What each collective can hide behind: the once-a-step reductions of ``ddp``
and ``zero1`` overlap the last backward as ``--grad-sync`` says
(:mod:`pipeplan.planner.step`), ``zero2``'s per-microbatch reductions each hide
behind their own microbatch's backward (the last as ``--grad-sync`` says), and the weight all-gather of the
sharded modes overlaps the next forward with ``--overlap-param-gather``;
``fsdp`` and ``hsdp`` prefetch one layer's gather behind the layer before
and reduce-scatter behind the backward of the layers after (behind a pipeline:
after the stage's last backward, exposed from the rank's own end).

A new mode is one :class:`DataParallelMode` record plus one line in
:data:`_REGISTRY`; nothing outside this module compares a mode's name.
The planner, the memory model, the presets' reference training, :class:`~pipeplan.plan.Plan`
and ``plan --dp-modes`` read the records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .errors import InvalidInputError

__all__ = ["DataParallelMode", "Share", "StateSplit", "ParameterBytes", "get", "names", "parse_modes",
           "check_mode", "check_modes", "hsdp_shards", "REPLICATED", "DISTRIBUTED_OPTIMIZER", "FULLY_SHARDED"]


@dataclass(frozen=True)
class Share:
    """Bytes per trained parameter over ``d`` shards: ``replicated + sharded / d``."""

    replicated: float
    sharded: float = 0.0

    def at(self, shards: float) -> float:
        """The bytes per parameter with ``shards`` ranks sharing the state."""
        return self.replicated + self.sharded / shards


class ParameterBytes(NamedTuple):
    """One rank's bytes per trained parameter under a mode, and per parameter on the wire.

    Attributes:
        weights: weight bytes held (bf16, plus FSDP's fp32 shard).
        gradients: gradient bytes held.
        state: optimizer-state bytes held (fp32 master weights, two Adam moments).
        reduce: bytes per parameter of the gradient reduction.
        gather: bytes per parameter of the parameter all-gather (0: none).
    """

    weights: float
    gradients: float
    state: float
    reduce: float
    gather: float


@dataclass(frozen=True)
class StateSplit:
    """Adam's bytes per trained parameter under a mode: what a rank holds and what it sends."""

    weights: Share
    gradients: Share
    state: Share
    reduce: float
    gather: float

    def at(self, shards: float, reduce_bytes: float | None = None) -> ParameterBytes:
        """The split with ``shards`` ranks sharing the state.

        ``reduce_bytes``: bytes per gradient element of the reduction (4 fp32, 2 bf16; ``None``: the
        mode's own); the replicated gradient buffer is then held in that dtype too (module doc).
        """
        if reduce_bytes is None:
            return ParameterBytes(self.weights.at(shards), self.gradients.at(shards), self.state.at(shards),
                                  self.reduce, self.gather)
        gradients = Share(reduce_bytes if self.gradients.replicated else 0.0, self.gradients.sharded)
        return ParameterBytes(self.weights.at(shards), gradients.at(shards), self.state.at(shards),
                              reduce_bytes, self.gather)


@dataclass(frozen=True)
class DataParallelMode:
    """How data parallelism holds and moves the model state (module doc).

    Attributes:
        name: what ``--dp-modes``, ``Plan.dp_mode`` and the JSON say (``"zero1"``).
        label: the mode in words (``"ZeRO-1, Megatron-LM's distributed optimizer"``).
        split: bytes per parameter without a pipeline (:class:`StateSplit`).
        pipelined_split: the same behind a pipeline, where it differs (``None``: as ``split``).
        shards_state: the optimizer state is sharded over the replicas (everything but ``ddp``);
            the weights are then all-gathered after the optimizer step.
        gathers_per_layer: without a pipeline the parameters are sharded and each layer is
            gathered before its forward and backward and reduce-scattered after its
            backward, every microbatch, one layer prefetched (FSDP); such a mode keeps its
            own per-layer overlap instead of ``--grad-sync``.
        reduces_every_microbatch: gradients are held sharded, so each microbatch's are
            reduce-scattered into their shard (ZeRO-2 under gradient accumulation).
        shards_within_node: shards only over a stage's replicas inside a node and
            all-reduces the shard across nodes (HSDP); needs both to be more than one.
        fallback: the mode that runs where ``shards_within_node`` finds no such split
            (one node: HSDP is FSDP).
    """

    name: str
    label: str
    split: StateSplit
    pipelined_split: StateSplit | None = None
    shards_state: bool = True
    gathers_per_layer: bool = False
    reduces_every_microbatch: bool = False
    shards_within_node: bool = False
    fallback: str | None = None

    def bytes_per_param(self, shards: float, *, pipelined: bool = False,
                        reduce_bytes: float | None = None) -> ParameterBytes:
        """Adam's bytes per trained parameter over ``shards`` ranks; ``pipelined``: behind a pipeline;
        ``reduce_bytes``: the gradient reduction's bytes per element where an engine pins it (module doc)."""
        split = self.pipelined_split if pipelined and self.pipelined_split is not None else self.split
        return split.at(shards, reduce_bytes)

    def reductions_per_step(self, num_microbatches: int) -> int:
        """Gradient collectives per optimizer step: one, or one per microbatch (:attr:`reduces_every_microbatch`)."""
        return num_microbatches if self.reduces_every_microbatch else 1

    def per_layer(self, pp: int) -> bool:
        """Whether each layer is gathered and reduce-scattered every microbatch at pipeline degree ``pp``."""
        return self.gathers_per_layer and pp == 1

    def shard_degree(self, tp: int, pp: int, dp: int, gpus_per_node: int) -> int:
        """Ranks sharing the optimizer state at ``tp × pp × dp``: 1 (replicated), ``dp``, or a node's replicas."""
        if not self.shards_state:
            return 1
        return hsdp_shards(tp, pp, dp, gpus_per_node) if self.shards_within_node else dp

    def applies(self, tp: int, pp: int, dp: int, gpus_per_node: int) -> bool:
        """Whether the mode is itself at ``tp × pp × dp`` (HSDP needs replicas both inside and across nodes)."""
        return not self.shards_within_node or hsdp_shards(tp, pp, dp, gpus_per_node) > 1

    def runs_as(self, tp: int, pp: int, dp: int, gpus_per_node: int) -> str:
        """The mode that runs at ``tp × pp × dp``: this one, :data:`REPLICATED` without data parallelism,
        or :attr:`fallback` where it does not apply."""
        if dp == 1:
            return REPLICATED
        if not self.applies(tp, pp, dp, gpus_per_node) and self.fallback is not None:
            return self.fallback
        return self.name


def hsdp_shards(tp: int, pp: int, dp: int, gpus_per_node: int) -> int:
    """The shard degree of HSDP: a stage's data-parallel replicas inside one node (1: no HSDP).

    GPUs are laid out ``tp`` innermost, then the pipeline, then its replicas
    (:mod:`pipeplan.planner.cluster`), so a node holds ``gpus_per_node / (tp · pp)``
    replicas of each stage; HSDP shards over those and replicates across nodes,
    and needs both to be more than one.
    """
    per_node = gpus_per_node // (tp * pp) if gpus_per_node % (tp * pp) == 0 else 1
    shards = math.gcd(per_node, dp)
    return shards if 1 < shards < dp else 1


_FSDP = StateSplit(Share(0.0, 4.0), Share(0.0, 4.0), Share(0.0, 8.0), reduce=4.0, gather=2.0)
# behind a pipeline (torchtitan, reshard_after_forward=False): unsharded bf16 weights, gradients accumulated in fp32
_FSDP_PIPELINED = StateSplit(Share(2.0, 4.0), Share(4.0), Share(0.0, 12.0), reduce=4.0, gather=2.0)

_REGISTRY: dict[str, DataParallelMode] = {
    mode.name: mode
    for mode in (
        DataParallelMode("ddp", "DDP, everything replicated",
                         StateSplit(Share(2.0), Share(2.0), Share(12.0), reduce=2.0, gather=0.0), shards_state=False),
        DataParallelMode("zero1", "ZeRO-1, Megatron-LM's distributed optimizer",
                         StateSplit(Share(2.0), Share(4.0), Share(0.0, 12.0), reduce=4.0, gather=2.0)),
        DataParallelMode("zero2", "ZeRO-2, gradients sharded too (Rajbhandari et al. 2020, §5)",
                         StateSplit(Share(2.0), Share(0.0, 2.0), Share(0.0, 12.0), reduce=2.0, gather=2.0),
                         reduces_every_microbatch=True),
        DataParallelMode("fsdp", "FSDP (ZeRO-3), parameters sharded too", _FSDP, _FSDP_PIPELINED,
                         gathers_per_layer=True),
        DataParallelMode("hsdp", "HSDP, FSDP inside a node, replicated across nodes", _FSDP, _FSDP_PIPELINED,
                         gathers_per_layer=True, shards_within_node=True, fallback="fsdp"),
    )
}

#: The mode without sharding: what runs without data parallelism and with a byte count per parameter.
REPLICATED = "ddp"
#: Megatron-LM's distributed optimizer (``--use-distributed-optimizer``) as a mode.
DISTRIBUTED_OPTIMIZER = "zero1"
#: Parameters, gradients and state sharded over every replica: the ``reference-fsdp`` baseline's default.
FULLY_SHARDED = "fsdp"


def names() -> tuple[str, ...]:
    """Every mode's name, from least sharded to most (the planner's order)."""
    return tuple(_REGISTRY)


def get(name: str) -> DataParallelMode:
    """The record of mode ``name``.

    Raises:
        InvalidInputError: an unknown name (naming the modes there are).
    """
    mode = _REGISTRY.get(name)
    if mode is None:
        raise InvalidInputError(f"dp_mode must be one of {', '.join(_REGISTRY)}, got {name!r}")
    return mode


def check_mode(field: str, name: str) -> None:
    """Refuse ``name`` unless it is a mode: ``{field} must be one of ddp, ..., got 'x'``."""
    if name not in _REGISTRY:
        raise InvalidInputError(f"{field} must be one of {', '.join(_REGISTRY)}, got {name!r}")


def check_modes(modes: Sequence[str]) -> None:
    """Refuse an empty list of modes or one that names no mode: ``dp modes must be among ddp, ..., got [...]``."""
    if not modes or any(mode not in _REGISTRY for mode in modes):
        raise InvalidInputError(f"dp modes must be among {', '.join(_REGISTRY)}, got {list(modes)}")


def parse_modes(text: str, flag: str = "--dp-modes") -> list[str]:
    """What ``--dp-modes`` accepts: comma-separated mode names, each once or more.

    Raises:
        InvalidInputError: an empty entry or a name that is no mode (naming them all).
    """
    modes = [mode.strip() for mode in text.split(",")]
    if not all(modes):
        raise InvalidInputError(f"{flag} has an empty entry: {text!r}")
    unknown = [mode for mode in modes if mode not in _REGISTRY]
    if unknown:
        raise InvalidInputError(f"{flag}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a "
                                f"data-parallel mode; give some of {', '.join(_REGISTRY)} (ZeRO-3 is fsdp)")
    return modes
