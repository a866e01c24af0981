"""The rest of a training step after the pipeline: gradient reduction over data parallel and the optimizer step.

    from pipeplan.planner.step import SYNCS, adam_step_bytes, exposed_reduction_ms, optimizer_ms
    adam_step_bytes(1e9)                                   # 2.8e10: 28 bytes per parameter
    optimizer_ms(adam_step_bytes(1e9), 1e9, device)        # HBM-bound pass, ms
    exposed_reduction_ms(10.0, window_ms=8.0, last_bucket_ms=1.0)   # 2.0

Everything here is milliseconds and bytes; the planner converts to its profile
unit (:mod:`pipeplan.planner.evaluate`). Torch-free.

**The optimizer step** is a memory-bound pass over each rank's trainable
parameters. Mixed-precision Adam, fused (apex ``multi_tensor_adam`` /
TransformerEngine ``FusedAdam(master_weights=True)``: one kernel over the lists
grad, bf16 weight, m, v, fp32 master), per parameter reads the fp32 master
weight, m and v (12 bytes) and the gradient (2 bytes bf16, 4 with Megatron's fp32
gradient buffer), and writes master, m and v (12) and the bf16 weight (2):
``2 · 12 + gradient + 2`` = **28** bytes (30 with fp32 gradients). Megatron's
distributed optimizer (ZeRO-1) shards this over ``dp`` ranks, so each rank moves
``1 / dp`` of it. Time = bytes / (HBM bandwidth × memory efficiency) + launches ×
launch overhead, one launch per ``320 × 65536`` elements (the multi-tensor-apply
kernels' most blocks per launch × elements per block: apex
``csrc/multi_tensor_apply.cuh``, PyTorch ``ATen/native/cuda/MultiTensorApply.cuh``).
The device supplies ``memory_bandwidth`` (bytes/s), ``memory_efficiency`` and
``launch_overhead_ms``; a device without ``memory_bandwidth`` costs 0 here.

**The gradient reduction** of a rank's ``G`` gradient bytes over its ``dp``
replicas is a ring all-reduce (``2 (dp − 1) / dp · G`` at the link's all-reduce
bus bandwidth), or with the distributed optimizer a reduce-scatter (half of it)
followed after the step by an all-gather of the bf16 parameters
(:func:`~pipeplan.planner.cluster.ring_pass_ms`). Where the engine overlaps it
(:class:`GradientSync`):

* without overlap (Megatron-LM's default, ``overlap_grad_reduce=False``) the whole
  reduction is exposed and charged after the pipeline;
* with overlap (Megatron ``--overlap-grad-reduce``, PyTorch DDP) gradients go
  into buckets and a bucket's collective starts as soon as its gradients are
  final, i.e. during the rank's *last* microbatch's weight-gradient work (earlier
  microbatches only accumulate). What can hide is the time from the first
  bucket being ready to the end of that work (:func:`overlap_window`); the last
  bucket cannot start before the backward ends, so its own reduction always
  stays exposed: ``exposed = max(T − window, T_last_bucket)``
  (:func:`exposed_reduction_ms`). Each rank's exposed tail starts at its own
  last gradient, so a rank that finishes early (the last stage of 1F1B) hides
  its tail in the pipeline's drain; the step is extended by
  ``max over ranks (end_r + exposed_r) − makespan`` when positive. Megatron
  buckets only the first pipeline stage (the others reduce in one bucket: "not on
  the critical path", ``distributed_data_parallel.py``);
* the distributed optimizer's parameter all-gather follows the step and is
  exposed, unless ``overlap_param_gather`` (Megatron ``--overlap-param-gather``
  overlaps it with the next forward): then only its first bucket's gather is.

**Sharded data parallelism without a pipeline** (FSDP/HSDP at ``pp = 1``):
each layer's parameters are all-gathered before its forward and again before
its backward, and its gradients reduce-scattered after it, every microbatch.
FSDP2 prefetches the next layer's gather while one layer computes, so per
microbatch (:func:`fsdp_exposed_ms`) the forward exposes its first gather and
whatever the gathers take beyond the compute they hide behind, and the backward
likewise for its gathers and reduce-scatters, plus the last layer's
reduce-scatter, which nothing follows.

Step = pipeline makespan + exposed data-parallel time + optimizer time (the
slowest rank's; the optimizer waits for every rank's gradients, since the
gradient-norm clip reduces over all of them). Not modelled: collectives slowing
the compute they overlap (SM and memory contention), per-bucket latencies (but
for a sync with :attr:`GradientSync.bucket_calls`: PyTorch DDP with ``--bucket-cap-mb``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.pipelining import DDP_BUCKET_CAP_MB
from ..errors import InvalidInputError
from ..hardware import Link
from .cluster import allreduce_ms, ring_pass_ms

__all__ = [
    "GradientSync",
    "SYNCS",
    "gradient_sync",
    "ELEMENTS_PER_LAUNCH",
    "adam_step_bytes",
    "optimizer_ms",
    "rank_optimizer_ms",
    "reduction_ms",
    "bucket_calls",
    "overlap_window",
    "exposed_reduction_ms",
    "RankRest",
    "StepRest",
    "step_rest",
    "fsdp_exposed_ms",
]

#: Elements one multi-tensor-apply launch covers: 320 blocks × 65536-element chunks
#: (apex ``csrc/multi_tensor_apply.cuh``: ``depth_to_max_blocks = 320``, ``chunk_size = 2048 * 32``).
ELEMENTS_PER_LAUNCH = 320 * 65536

#: PyTorch DDP's default bucket, bytes: ``bucket_cap_mb=25`` MiB (its owner: :data:`pipeplan.engines.pipelining.DDP_BUCKET_CAP_MB`).
_TORCH_DDP_BUCKET_BYTES = DDP_BUCKET_CAP_MB * 2**20


@dataclass(frozen=True)
class GradientSync:
    """How an engine reduces gradients over data parallel.

    Attributes:
        name: preset name.
        overlap_grad_reduce: buckets start their collective during the last
            microbatch's backward (else one collective after it).
        bucket_bytes: bucket size in bytes; ``None``: Megatron-LM's
            ``max(40_000_000, 1_000_000 · dp)`` parameters of gradient
            (``megatron/core/distributed/distributed_data_parallel.py``).
        bucket_first_stage_only: only pipeline rank 0 buckets (Megatron); the
            other ranks reduce in one bucket.
        overlap_param_gather: the distributed optimizer's parameter all-gather
            overlaps the next forward (Megatron ``--overlap-param-gather``).
        bucket_elements: bucket size in gradient elements (DeepSpeed's
            ``reduce_bucket_size``); overrides ``bucket_bytes``.
        overlap_in_pipeline: the overlap also runs beside a pipeline (``False``:
            with ``pp > 1`` every reduction waits for the schedule's end, as in
            DeepSpeed's pipeline engine).
        overlap_scatter: for the modes that gather per layer (FSDP, ZeRO-3), the
            gradient reduce-scatters overlap the backward (``False``: DeepSpeed
            ZeRO-3 with ``overlap_comm`` off, each on the compute stream, exposed).
        bucket_calls: each bucket is its own collective call and pays the
            collective's latency (PyTorch DDP with ``--bucket-cap-mb``:
            :func:`bucket_calls`); ``False``: the reduction is priced as one call.
        walk_us: the host's time once per step on each rank before its last
            backward, µs ``(per trainable parameter tensor, per autograd node)``
            of the rank's graph, exposed (DDP's ``find_unused_parameters``).
        buffer_bytes: device bytes each rank holds for the buckets (DeepSpeed's
            ``contiguous_gradients`` buffers), priced in its memory.
        gather_ahead: for the modes that gather per layer, ``(prefetch elements,
            most elements live)`` gathered beside the layer running (DeepSpeed
            ZeRO-3's ``stage3_*`` knobs); ``None``: the next layer (FSDP2).
    """

    name: str = "megatron"
    overlap_grad_reduce: bool = False
    bucket_bytes: float | None = None
    bucket_first_stage_only: bool = True
    overlap_param_gather: bool = False
    bucket_elements: float | None = None
    overlap_in_pipeline: bool = True
    overlap_scatter: bool = True
    bucket_calls: bool = False
    walk_us: tuple[float, float] = (0.0, 0.0)
    buffer_bytes: float = 0.0
    gather_ahead: tuple[float, float] | None = None

    def overlaps(self, pp: int) -> bool:
        """Whether the reduction overlaps the backward in a plan with ``pp`` pipeline ranks."""
        return self.overlap_grad_reduce and (pp == 1 or self.overlap_in_pipeline)

    def bucket(self, dp: int, gradient_bytes_per_param: float, *, pipeline_rank: int = 0) -> float:
        """Bytes of one bucket on ``pipeline_rank`` (``inf``: everything in one bucket)."""
        if not self.overlap_grad_reduce or (self.bucket_first_stage_only and pipeline_rank > 0):
            return math.inf
        if self.bucket_elements is not None:
            return self.bucket_elements * gradient_bytes_per_param
        if self.bucket_bytes is not None:
            return self.bucket_bytes
        return max(40_000_000, 1_000_000 * dp) * gradient_bytes_per_param


#: The engines' settings: Megatron-LM's defaults (no overlap), Megatron with
#: ``--overlap-grad-reduce --overlap-param-gather``, and PyTorch DDP (25 MiB buckets on every rank).
SYNCS: dict[str, GradientSync] = {
    sync.name: sync
    for sync in (
        GradientSync("megatron"),
        GradientSync("megatron-overlap", overlap_grad_reduce=True, overlap_param_gather=True),
        GradientSync("torch-ddp", overlap_grad_reduce=True, bucket_bytes=_TORCH_DDP_BUCKET_BYTES,
                     bucket_first_stage_only=False),
    )
}


def gradient_sync(sync: GradientSync | str) -> GradientSync:
    """A :class:`GradientSync`, or the preset of that name.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets).
    """
    if isinstance(sync, GradientSync):
        return sync
    if sync not in SYNCS:
        raise InvalidInputError(f"gradient sync must be one of {', '.join(SYNCS)}, got {sync!r}")
    return SYNCS[sync]


def adam_step_bytes(trainable_params: float, *, state_bytes: float = 12.0, gradient_bytes: float = 2.0,
                    weight_bytes: float = 2.0, shards: int = 1) -> float:
    """HBM bytes one rank's fused mixed-precision Adam step moves.

    Per trainable parameter: read the optimizer state (fp32 master, m, v:
    ``state_bytes``) and the gradient, write the state and the low-precision
    weight: ``2 · state + gradient + weight`` (28 with the defaults), over
    ``shards`` ranks (``dp`` for the distributed optimizer, else 1).
    """
    return trainable_params / shards * (2.0 * state_bytes + gradient_bytes + weight_bytes)


def optimizer_ms(num_bytes: float, num_params: float, device: Any) -> float:
    """Time of a memory-bound pass moving ``num_bytes`` over ``num_params`` elements on ``device``, ms.

    ``bytes / (memory_bandwidth × memory_efficiency) + launches × launch_overhead_ms``
    with one launch per :data:`ELEMENTS_PER_LAUNCH` elements. 0 for a device
    without ``memory_bandwidth`` (or for nothing to update).
    """
    bandwidth = getattr(device, "memory_bandwidth", None)
    if not bandwidth or num_params <= 0:
        return 0.0
    efficiency = getattr(device, "memory_efficiency", None) or 1.0
    launch = getattr(device, "launch_overhead_ms", None) or 0.0
    launches = math.ceil(num_params / ELEMENTS_PER_LAUNCH)
    return 1e3 * num_bytes / (bandwidth * efficiency) + launches * launch


def rank_optimizer_ms(trainable_params: float, *, weights: float, gradients: float, state: float, shards: int,
                      device: Any) -> float:
    """One rank's Adam step over ``trainable_params``, ms: ``weights``, ``gradients`` and ``state`` are
    bytes per parameter as the rank holds them (state already divided over ``shards``)."""
    moved = adam_step_bytes(trainable_params, state_bytes=state * shards, gradient_bytes=gradients,
                            weight_bytes=weights, shards=shards)
    return optimizer_ms(moved, trainable_params / shards, device)


def reduction_ms(link: Link, gradient_bytes: float, dp: int, *, distributed: bool) -> float:
    """The gradient collective of ``gradient_bytes`` per rank over ``dp`` ranks, ms.

    A ring all-reduce, or a reduce-scatter (one ring pass) for the distributed optimizer.
    """
    if distributed:
        return ring_pass_ms(link, gradient_bytes, dp)
    return allreduce_ms(link, gradient_bytes, dp)


def bucket_calls(num_bytes: float, bucket_bytes: float) -> int:
    """Collective calls that reduce ``num_bytes`` in buckets of ``bucket_bytes``: ``ceil(bytes / bucket)``, at
    least 1 (one for an infinite bucket)."""
    if not math.isfinite(bucket_bytes) or bucket_bytes <= 0 or num_bytes <= bucket_bytes:
        return 1
    return math.ceil(num_bytes / bucket_bytes)


def overlap_window(gradient_work: Sequence[tuple[float, float, float]], bucket_bytes: float) -> float:
    """Time a rank's gradient collective can run behind its last microbatch's gradient work.

    Args:
        gradient_work: ``(start, end, bytes)`` of each action that finalises a
            stage's gradients (its last ``W``, or ``B`` without a split backward),
            producing ``bytes`` evenly over ``[start, end]``.
        bucket_bytes: bytes of one bucket (``inf``: one bucket).

    Returns:
        From the moment the first ``bucket_bytes`` are ready to the end of the
        last action; 0 when everything fits one bucket (it is ready only at the end).
    """
    work = sorted((start, end, size) for start, end, size in gradient_work if size > 0)
    if not work:
        return 0.0
    total = sum(size for _, _, size in work)
    finish = max(end for _, end, _ in work)
    if bucket_bytes >= total:
        return 0.0
    ready = 0.0
    for start, end, size in work:
        if ready + size >= bucket_bytes:
            first = start + (end - start) * (bucket_bytes - ready) / size
            return max(0.0, finish - first)
        ready += size
    return 0.0  # unreachable: bucket_bytes < total


def exposed_reduction_ms(total_ms: float, *, window_ms: float, last_bucket_ms: float) -> float:
    """What of a ``total_ms`` collective stays exposed after the backward: ``max(T − window, T_last)``, within ``[0, T]``."""
    return min(total_ms, max(total_ms - window_ms, last_bucket_ms, 0.0))


@dataclass(frozen=True)
class RankRest:
    """One pipeline rank's share of the rest of the step, ms.

    Attributes:
        end: when its last gradient is final (its last action ends), pipeline clock.
        reduction: its gradient collective in full.
        exposed: what of it runs after ``end`` (all of it without overlap).
        param_gather: the distributed optimizer's parameter all-gather in full (else 0).
        param_gather_exposed: what of that is not hidden behind the next forward.
        optimizer: its optimizer step.
        walk: the host's time before its last backward that the step waits for
            (DDP's ``find_unused_parameters`` graph walk; 0 without).
    """

    end: float
    reduction: float
    exposed: float
    param_gather: float
    param_gather_exposed: float
    optimizer: float
    walk: float = 0.0


@dataclass(frozen=True)
class StepRest:
    """What a step adds to the pipeline makespan, ms.

    Attributes:
        dp_comm: the slowest rank's data-parallel communication in full
            (gradient collective + parameter all-gather).
        dp_exposed: the part of it that lengthens the step, with the ranks' DDP
            graph walks (:attr:`RankRest.walk`, summed).
        optimizer: the slowest rank's optimizer step.
        ranks: each rank's parts.
    """

    dp_comm: float
    dp_exposed: float
    optimizer: float
    ranks: tuple[RankRest, ...] = ()

    @property
    def total(self) -> float:
        """``dp_exposed + optimizer``: what the step adds after the pipeline."""
        return self.dp_exposed + self.optimizer


def step_rest(ranks: Sequence[RankRest], makespan: float | None, *, overlap_grad_reduce: bool) -> StepRest:
    """Combine the ranks' parts into what the step adds after a pipeline of ``makespan`` ms.

    Without overlap every reduction runs after the pipeline: ``max_r reduction_r``
    (an upper bound; Megatron starts a rank's reduction when its own schedule
    returns). With overlap each rank's exposed tail starts at its own ``end``:
    ``max(0, max_r (end_r + exposed_r) − makespan)``. Then the parameter
    all-gather's exposed part and the optimizer, the slowest rank's each. The
    ranks' DDP graph walks (:attr:`RankRest.walk`) add up: each runs after the
    rank has received its last output gradient (``PipelineStage.backward_maybe_with_nosync``
    calls ``prepare_for_backward`` there), on the drain's chain of last backwards.

    ``makespan=None`` (timing unknown) gives the least the rest can add: with
    overlap, the rank that ends the pipeline pays at least its own exposed tail,
    so ``min_r exposed_r`` (pass each rank's least exposed part, its last
    bucket); the other parts as above.
    """
    if not ranks:
        return StepRest(0.0, 0.0, 0.0)
    if not overlap_grad_reduce:
        reduce = max(rank.reduction for rank in ranks)
    elif makespan is None:
        reduce = min(rank.exposed for rank in ranks)
    else:
        reduce = max(0.0, max(rank.end + rank.exposed for rank in ranks) - makespan)
    gather = max(rank.param_gather_exposed for rank in ranks)
    walk = sum(rank.walk for rank in ranks)
    return StepRest(
        dp_comm=max(rank.reduction + rank.param_gather for rank in ranks),
        dp_exposed=reduce + gather + walk,
        optimizer=max(rank.optimizer for rank in ranks),
        ranks=tuple(ranks),
    )


def fsdp_exposed_ms(forward_ms: Sequence[float], backward_ms: Sequence[float], gather_ms: Sequence[float],
                    scatter_ms: Sequence[float], *, backward_gathers: bool = True) -> float:
    """One microbatch's exposed FSDP communication, ms, with one layer prefetched (module doc).

    Args:
        forward_ms, backward_ms: each layer's compute, in model order.
        gather_ms: each layer's parameter all-gather (run before its forward and
            again before its backward).
        scatter_ms: each layer's gradient reduce-scatter (after its backward).
        backward_gathers: the backward gathers each layer again (FSDP2's ``reshard_after_forward``);
            ``False``: the parameters stayed gathered from the forward, the backward gathers nothing.

    Forward: the first layer's gather, then ``max(0, Σ gathers of layers 2..L −
    Σ forward of layers 1..L−1)``; backward (layers in reverse): the last
    layer's gather, then the other gathers and every reduce-scatter but the
    first layer's against the backward compute, then the first layer's
    reduce-scatter.
    """
    if not gather_ms:
        return 0.0
    forward = gather_ms[0] + max(0.0, sum(gather_ms[1:]) - sum(forward_ms[:-1]))
    hidden = sum(backward_ms[1:]) if len(backward_ms) > 1 else 0.0
    if not backward_gathers:
        return forward + max(0.0, sum(scatter_ms[1:]) - hidden) + scatter_ms[0]
    backward = gather_ms[-1] + max(0.0, sum(gather_ms[:-1]) + sum(scatter_ms[1:]) - hidden) + scatter_ms[0]
    return forward + backward
