"""An engine's knobs priced in the step: its gradient sync per data-parallel mode and its host time per tensor.

    from pipeplan import engines
    from pipeplan.planner.engine_costs import EngineCosts
    costs = EngineCosts.of(engines.get("deepspeed"), {"overlap-comm": "on"})
    costs.sync_for("zero2", "megatron-overlap")   # GradientSync('deepspeed-overlap', ...): buckets of 5e8 elements
    costs.hooks_for("zero2")                      # (41.0, 0.0): µs per trainable tensor per backward, per step

An engine whose knobs change more than the kernels (:class:`pipeplan.engines.Pricing`:
DeepSpeed's ``overlap_comm``, ``reduce_bucket_size`` and the host cost of its hooks; plain
torch's DDP ``bucket_cap_mb`` and ``find_unused_parameters``) is priced here; the search gives each data-parallel mode's evaluator its sync and hooks
(:class:`~pipeplan.planner.evaluate.Evaluator`). Megatron-LM's knobs change the kernels
and collectives of the layers and are priced in :class:`~pipeplan.planner.Workload`.

**The host cost of per-tensor hooks.** The GPU runs asynchronously: the host launches a
layer's kernels and runs its hooks, and the GPU works through what was launched. The
host's time delays the GPU only where the host falls behind, so the rule is: each layer's
backward lasts ``max(GPU time, hooks × tensors)`` per microbatch
(:meth:`~pipeplan.planner.Workload.with_backward_floor`: per layer, so the host gains no
lead from one layer to spend on the next; for a stack of equal layers the same as per
stage), and the optimizer step lasts ``max(GPU step, step hooks × tensors on the rank)``.
The host's own kernel launches are not added: a kernel's time already has the launch
overhead as its floor, so without hooks the host never falls behind and every other
engine's step is unchanged.

**Beside a pipeline** (``pp > 1``: DeepSpeed's ``PipelineEngine``) two more terms,
:class:`PipelineEngineCosts` (:meth:`EngineCosts.pipeline_for`), applied to each stage's
costs by :class:`~pipeplan.planner.layout.Layouts`: the engine's gradient accumulation
(``accumulate_bytes`` per trainable parameter per microbatch, an HBM-bound pass added to
the stage's backward, :func:`~pipeplan.planner.step.optimizer_ms`) and one factor per
device on each stage's forward and backward (fitted; the engine's module says to what).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .. import data_parallel
from ..costs import StageCosts
from ..models.layer_costs import layer_costs
from ..models.spec import ModelSpec
from ..models.tensor_counts import layer_tensor_counts
from .step import GradientSync, gradient_sync, optimizer_ms

from ..engines.pipelining import DDP_BUCKET_CAP_MB
from ..engines.record import BUCKET_TAG, Pricing

if TYPE_CHECKING:
    from ..engines import Engine

__all__ = ["EngineCosts", "PipelineEngineCosts", "autograd_nodes", "DDP_BUCKET_TAG"]

#: what follows DDP's sync's name (``torch-ddp``) when its bucket is not torch's 25 MiB: ``torch-ddp:bucket_cap_mb=50``
#: (not :data:`~pipeplan.engines.record.BUCKET_TAG`, DeepSpeed's bucket in elements, which its export reads)
DDP_BUCKET_TAG = ":bucket_cap_mb="


@dataclass(frozen=True)
class PipelineEngineCosts:
    """What an engine's pipeline runtime adds to each stage of a plan with ``pp > 1`` (module doc).

    Attributes:
        accumulate_bytes: device-memory bytes moved per trainable parameter in each
            microbatch's backward (gradient accumulation beyond the kernels).
        factors: per device preset name, the factor on each stage's forward and backward
            time (absent: 1).
    """

    accumulate_bytes: float = 0.0
    factors: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[float, tuple[tuple[str, float], ...]]:
        """A hashable form, for caches of timings that these costs change (two modes' differ)."""
        return self.accumulate_bytes, tuple(sorted(self.factors.items()))

    def applied(self, costs: StageCosts, stage_params: Sequence[float], device: Any, time_unit: float) -> StageCosts:
        """``costs`` (in units of ``time_unit`` seconds) of stages holding ``stage_params`` trainable
        parameters each, on ``device``: forward and backward × the device's factor, then each
        backward + the accumulation pass over the stage's parameters (ms from
        :func:`~pipeplan.planner.step.optimizer_ms`)."""
        factor = float(self.factors.get(getattr(device, "name", ""), 1.0))
        per_ms = 1e-3 / time_unit
        extra = [optimizer_ms(self.accumulate_bytes * p, p, device) * per_ms if self.accumulate_bytes else 0.0
                 for p in stage_params]
        if factor == 1.0 and not any(extra):
            return costs
        split = costs.backward_input
        return costs.replaced(forward=[f * factor for f in costs.forward],
                              backward=[b * factor + e for b, e in zip(costs.backward, extra)],
                              weight=[w * factor + e for w, e in zip(costs.weight, extra)],
                              backward_input=None if split is None else [i * factor for i in split])


@dataclass(frozen=True)
class EngineCosts:
    """An engine's :class:`~pipeplan.engines.Pricing`, turned into syncs and hook times (module doc).

    Attributes:
        engine: the engine's name.
        syncs: per data-parallel mode the engine prices, its gradient sync.
        hooks: per data-parallel mode, µs of host time per trainable parameter tensor:
            ``(each microbatch's backward, each optimizer step)``.
        accumulate: per data-parallel mode, beside a pipeline, device-memory bytes per trainable
            parameter per microbatch of the engine's gradient accumulation.
        pipeline_factors: per device preset name, beside a pipeline, the factor on each stage's
            forward and backward (:class:`PipelineEngineCosts`).
        reduce_bytes: bytes per gradient element of the data-parallel reduction, every mode
            (``--grad-reduce-dtype``; :attr:`~pipeplan.engines.Pricing.grad_reduce_bytes`);
            ``None``: each mode's own (:mod:`pipeplan.data_parallel`).
        walks: per data-parallel mode, the host's µs ``(per trainable tensor, per autograd node)``
            once per step on each rank before its last backward (DDP's ``find_unused_parameters``),
            carried by the mode's sync (:attr:`~pipeplan.planner.step.GradientSync.walk_us`).
    """

    engine: str
    syncs: Mapping[str, GradientSync] = field(default_factory=dict)
    hooks: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    accumulate: Mapping[str, float] = field(default_factory=dict)
    pipeline_factors: Mapping[str, float] = field(default_factory=dict)
    reduce_bytes: float | None = None
    walks: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, engine: Engine, knobs: Mapping[str, str]) -> EngineCosts | None:
        """The costs of ``engine`` with ``knobs`` given; ``None``: nothing beyond the workload."""
        pricing = engine.pricing(knobs)
        if pricing is None:
            return None
        syncs: dict[str, GradientSync] = {}
        # an overlapping sync with a bucket other than Pricing's default (DeepSpeed's own) carries it in its name, so
        # a plan says which bucket it was timed with (DeepSpeed's export writes it: reduce_bucket_size)
        default = Pricing.__dataclass_fields__["bucket_elements"].default
        bucket = "" if pricing.bucket_elements == default else f"{BUCKET_TAG}{int(pricing.bucket_elements)}"
        for mode, overlap in pricing.overlap.items():
            if pricing.bucket_bytes is not None:  # a bucket in bytes (DDP's bucket_cap_mb): named where not 25 MiB
                mib = pricing.bucket_bytes / 2 ** 20
                tag = "" if mib == DDP_BUCKET_CAP_MB else f"{DDP_BUCKET_TAG}{mib:g}"
                syncs[mode] = GradientSync(f"{pricing.sync}{tag}", overlap_grad_reduce=overlap,
                                           bucket_bytes=pricing.bucket_bytes, bucket_first_stage_only=False,
                                           overlap_in_pipeline=pricing.overlap_in_pipeline,
                                           bucket_calls=pricing.bucket_calls)
                continue
            syncs[mode] = GradientSync(f"{pricing.sync}-overlap{bucket}" if overlap else pricing.sync,
                                       overlap_grad_reduce=overlap, bucket_first_stage_only=False,
                                       bucket_elements=pricing.bucket_elements,
                                       overlap_in_pipeline=pricing.overlap_in_pipeline)
        for mode, overlap in pricing.overlap_scatter.items():
            syncs[mode] = GradientSync(f"{pricing.sync}-overlap" if overlap else pricing.sync,
                                       overlap_grad_reduce=True, overlap_scatter=overlap)
        for mode, size in pricing.buffer_bytes.items():  # the buckets' buffers (DeepSpeed's contiguous_gradients)
            if mode in syncs:
                syncs[mode] = replace(syncs[mode], buffer_bytes=size)
        for mode, limits in pricing.gather_ahead.items():  # ZeRO-3's prefetch and live-parameter cap
            if mode in syncs:
                syncs[mode] = replace(syncs[mode], gather_ahead=limits)
        return cls(engine.name, syncs, dict(pricing.hook_us), dict(pricing.accumulate_bytes),
                   dict(pricing.pipeline_factors), pricing.grad_reduce_bytes, dict(pricing.walk_us))

    def sync_for(self, mode: str, default: GradientSync | str) -> GradientSync:
        """The gradient sync of ``mode`` (``default`` where the engine does not price it), with the engine's host
        walk before each rank's last backward where it has one (:attr:`walks`)."""
        data_parallel.get(mode)
        sync = self.syncs.get(mode) or gradient_sync(default)
        walk = self.walks.get(mode)
        return sync if walk is None else replace(sync, walk_us=walk)

    def hooks_for(self, mode: str) -> tuple[float, float]:
        """µs of host time per trainable tensor of ``mode``: (per microbatch backward, per step); (0, 0) if none."""
        return self.hooks.get(mode, (0.0, 0.0))

    def pipeline_for(self, mode: str) -> PipelineEngineCosts | None:
        """What the engine's pipeline runtime adds per stage with ``mode`` (``pp > 1``); ``None``: nothing."""
        accumulate = float(self.accumulate.get(mode, 0.0))
        if not accumulate and not self.pipeline_factors:
            return None
        return PipelineEngineCosts(accumulate, dict(self.pipeline_factors))


def autograd_nodes(spec: ModelSpec) -> list[int]:
    """Autograd nodes per pipeline layer of ``spec`` in one forward, what DDP's ``find_unused_parameters`` walks:
    the layer's forward kernels where it has a backward (:func:`~pipeplan.models.layer_costs.layer_costs`, one
    node each; a frozen layer no input gradient flows through has none) plus one ``AccumulateGrad`` per trainable
    parameter tensor (:func:`~pipeplan.models.tensor_counts.layer_tensor_counts`). An estimate: a fused kernel
    (flash attention) is one node, as it is in torch; a view or reshape that launches nothing is not counted."""
    tensors = layer_tensor_counts(spec)
    costs = layer_costs(spec, 1, recompute="none")
    return [(len(cost.forward_ops) if cost.backward_flops > 0 else 0) + count for cost, count in zip(costs, tensors)]
